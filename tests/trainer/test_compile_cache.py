"""trainer.compile_cache with torch_xla 2.9's real persistent cache, in trainer processes (the
cache must be set before a process compiles anything): entries kept per runtime, a second run
and a resumed run start from them, gs:// caches synced down and up through fake-gcs-server,
and corrupt entries or an unusable location are warnings, never failures.

The XLA CPU runtime writes entries but cannot load them back (torch_xla counts each attempt
as a deserialisation failure): these tests check that every entry is offered to the runtime;
loading them is what a TPU runtime adds.
"""

import json
import shutil
import subprocess
import sys

import pytest
import torch_xla

from conftest import REPO, clean_environ

RUNTIME = "torch_xla-{}-CPU".format(torch_xla.__version__.split("+")[0])
SHORT = ["--fake_data", "--num_steps=4", "--log_steps=0", "--batch_size=20"]


def run_trainer(*args, scratch=None):
    """A trainer process; with ``scratch``, its TMPDIR, where it must leave none of its own
    folders (``trainer-*``; torch keeps caches of its own there)."""
    environ = clean_environ(PJRT_DEVICE="CPU", **({"TMPDIR": str(scratch)} if scratch else {}))
    result = subprocess.run([sys.executable, "-m", "trainer.mnist"] + SHORT + list(args),
                            cwd=str(REPO), env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    if scratch is not None:
        assert not list(scratch.glob("trainer-*")), "the run left its local copy of the cache"
    return result


def summary_of(job):
    return json.loads((job / "summary.json").read_text())


@pytest.fixture(scope="module")
def first_epoch(tmp_path_factory):
    """(job dir, local cache) of one epoch run with an empty cache; the tests below each
    take copies, so one run serves them all."""
    root = tmp_path_factory.mktemp("first-epoch")
    job, cache = root / "job", root / "cache"
    run_trainer("--num_epochs=1", "--job_dir=" + str(job), "--compile_cache=" + str(cache))
    return job, cache


def copied(folder, destination):
    shutil.copytree(str(folder), str(destination))
    return destination


def test_second_and_resumed_runs_start_from_a_local_cache(first_epoch, tmp_path):
    job, cache = copied(first_epoch[0], tmp_path / "job"), copied(first_epoch[1],
                                                                  tmp_path / "cache")
    first = summary_of(job)["compile_cache"]
    entries = sorted(path.name for path in (cache / RUNTIME).iterdir())
    assert first["entries_at_start"] == 0 and len(entries) == summary_of(job)["compile_count"]

    common = ["--job_dir=" + str(job), "--compile_cache=" + str(cache)]
    resumed = run_trainer("--num_epochs=2", *common)  # resumes from epoch 1's checkpoint
    assert "resumed from" in resumed.stdout
    report = summary_of(job)["compile_cache"]
    assert report["entries_at_start"] == len(entries)
    assert report["loaded"] + report["unusable"] >= 1  # the runtime was offered the entries
    assert "could not be loaded" in resumed.stdout  # ... and says it could not use them


def test_a_corrupt_entry_is_a_warning_and_is_replaced(first_epoch, tmp_path):
    cache = copied(first_epoch[1], tmp_path / "cache")
    damaged = sorted((cache / RUNTIME).iterdir())[0]
    damaged.write_bytes(b"\x00garbage")
    result = run_trainer("--num_epochs=1", "--compile_cache=" + str(cache))
    assert "could not be loaded" in result.stdout
    assert damaged.stat().st_size > len(b"\x00garbage")  # compiled again and written back


def test_gcs_cache_is_synced_down_at_start_and_up_after_the_first_epoch(gcs, tmp_path):
    location = "gs://{}/shared-cache".format(gcs.name)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run_trainer("--num_epochs=1", "--compile_cache=" + location,
                "--job_dir=" + str(tmp_path / "trial-1"), scratch=scratch)
    names = sorted(blob.name for blob in gcs.list_blobs(prefix="shared-cache/"))
    assert names and all(name.startswith("shared-cache/{}/".format(RUNTIME)) for name in names)
    assert summary_of(tmp_path / "trial-1")["compile_cache"]["saved"] == len(names)

    gcs.blob(names[0]).upload_from_string(b"not a compiled program")
    second = run_trainer("--num_epochs=1", "--compile_cache=" + location,
                         "--job_dir=" + str(tmp_path / "trial-2"))
    report = summary_of(tmp_path / "trial-2")["compile_cache"]
    assert report["entries_at_start"] == len(names)
    assert "could not be loaded" in second.stdout
    # Entries it synced down are not uploaded again; the corrupt one, compiled again, is.
    assert report["saved"] == 1
    assert gcs.blob(names[0]).download_as_bytes() != b"not a compiled program"


def test_an_unusable_cache_location_is_a_warning(gcs, tmp_path):
    result = run_trainer("--num_epochs=1", "--compile_cache=gs://no-such-bucket-here/cache",
                         "--job_dir=" + str(tmp_path / "job"))
    assert "compile cache: gs://no-such-bucket-here/cache/{} cannot be read".format(
        RUNTIME) in result.stdout
    assert summary_of(tmp_path / "job")["compile_cache"] is None


def test_default_is_off_on_the_cpu_device_and_none_turns_it_off(tmp_path):
    result = run_trainer("--num_epochs=1", "--job_dir=" + str(tmp_path / "job"))
    [line] = [line for line in result.stdout.splitlines() if "compile cache: " in line]
    # Why it is off, and no advice to turn on what would only cost time here.
    assert line.endswith("compile cache: off on this device: its runtime writes compiled "
                         "programs but cannot load them back, so a cache would only cost time "
                         "here (on a TPU it is on by default)")
    assert not (tmp_path / "job" / "compile-cache").exists()
    run_trainer("--num_epochs=1", "--compile_cache=none", "--job_dir=" + str(tmp_path / "j2"))
    assert summary_of(tmp_path / "j2")["compile_cache"] is None
