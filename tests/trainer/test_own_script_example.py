"""docs/examples/own-code/train.py, the script of one's own that docs/own-code.md shows, run
through the launcher as a user runs it locally: Ctrl-C stops it as SIGTERM does (the step in
flight, a checkpoint, exit 130), and the next run resumes. It handled SIGTERM only: Ctrl-C
gave a ``KeyboardInterrupt`` traceback, an empty checkpoint folder and a rerun from step 0.
(SIGTERM in the image: tests/images/test_own_code.py.)"""

import os
import re
import signal
import subprocess
import sys

from conftest import REPO, clean_environ

EXAMPLE = REPO / "docs" / "examples" / "own-code" / "train.py"


def launch(job_dir, steps):
    return subprocess.Popen(
        [sys.executable, "-m", "launcher", "--", "python", str(EXAMPLE),
         "--steps={}".format(steps), "--job-dir=" + str(job_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
        env=clean_environ(PJRT_DEVICE="CPU", PYTHONPATH=str(REPO)),
        start_new_session=True)  # its own process group, as a terminal's foreground job


def test_ctrl_c_saves_a_checkpoint_exits_130_and_the_rerun_resumes(tmp_path):
    job_dir = tmp_path / "ckpt"
    run = launch(job_dir, 100000)
    try:
        for line in run.stdout:
            if line.startswith("step "):  # training: its handlers are in
                break
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C sends the foreground job
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 128 + signal.SIGINT, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    stopped = re.search(r"^stopped by SIGINT at step (\d+): checkpoint saved$", out,
                        re.MULTILINE)
    assert stopped, out + err[-2000:]
    step = int(stopped.group(1))
    assert (job_dir / "checkpoint.pt").is_file()
    rerun = launch(job_dir, step + 5)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-2000:]
    assert "resumed from step {}".format(step) in out
    assert "done at step {}".format(step + 5) in out
