"""trainer.scratch: a run's working folders in $TMPDIR outlive a ``kill -9`` of their owner
only until the next run on the host starts: a folder whose owner was SIGKILLed is removed,
one whose owner is alive is left alone, and so is a folder that is not one of these."""

import signal
import subprocess
import sys
import tempfile

from conftest import REPO, clean_environ
from trainer import scratch

HOLD = ("import sys, time; from trainer import scratch; "
        "print(scratch.folder('outputs'), flush=True); time.sleep(600)")


def holder(tmpdir):
    process = subprocess.Popen([sys.executable, "-c", HOLD], cwd=str(REPO),
                               env=clean_environ(TMPDIR=str(tmpdir)), stdout=subprocess.PIPE,
                               text=True)
    return process, process.stdout.readline().strip()


def test_the_next_folder_removes_those_whose_owner_was_killed_and_keeps_the_rest(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed, stale = holder(tmp_path)
    alive, held = holder(tmp_path)
    other = tmp_path / "trainer-not-ours"
    other.mkdir()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        assert (tmp_path / stale).exists()  # what a kill -9 leaves
        mine = scratch.folder("compile-cache")
        assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
            name.rsplit("/", 1)[-1] for name in (held, mine, str(other)))
        scratch.release(mine)
        assert not (tmp_path / mine).exists()
    finally:
        alive.kill()
        alive.wait(30)
    scratch.remove_stale()  # its owner is gone now too
    assert [path.name for path in tmp_path.iterdir()] == ["trainer-not-ours"]
