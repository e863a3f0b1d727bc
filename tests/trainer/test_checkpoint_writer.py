"""trainer.checkpoint_writer: checkpoints written in the background, one at a time, their
errors raised in the training thread as one line; and the trainer around it as a process:
training goes on while a checkpoint uploads, a kill -9 during that upload leaves the previous
checkpoint to resume from, and SIGTERM with one in flight completes both (exit 143).

The uploads are held by the fault proxy in front of fake-gcs-server (tests/gcs_fault_proxy.py),
so the signals land while a write is in flight, whatever the machine's speed."""

import io
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import torch
from gcs_fault_proxy import Rule

from conftest import REPO, clean_environ, wait_for_line
from trainer.checkpoint_writer import BackgroundWriter
from trainer.checkpoints import CheckpointStore, checkpoint_name
from trainer.errors import StorageError
from trainer.storage import LocalDirectory


def test_one_write_in_flight_and_in_order():
    writer, done = BackgroundWriter(), []
    gates = {"first": threading.Event(), "second": threading.Event()}

    def held(name):
        def write():
            gates[name].wait(30)
            done.append(name)
        return write

    writer.submit(held("first"), "first")
    assert writer.busy() and done == []  # the caller goes on while it writes
    threading.Timer(0.2, gates["first"].set).start()
    writer.submit(held("second"), "second")  # waits for the first before starting
    assert done == ["first"] and writer.busy()
    assert writer.waited_seconds > 0
    gates["second"].set()
    writer.wait()
    assert done == ["first", "second"] and not writer.busy()


def test_a_failed_write_is_one_storage_error_in_the_caller_and_no_thread_traceback(
        tmp_path, capfd):
    (tmp_path / "checkpoints").write_text("a file where the folder should be")
    directory = LocalDirectory(str(tmp_path))
    writer = BackgroundWriter()
    writer.submit(lambda: directory.write_bytes("checkpoints/" + checkpoint_name(5), b"x"),
                  "ckpt-5")
    with pytest.raises(StorageError) as raised:
        writer.wait()
    assert raised.value.exit_code == 74
    assert "checkpoints" in raised.value.message and "\n" not in raised.value.message
    writer.wait()  # reported once
    assert "Traceback" not in capfd.readouterr().err


def test_an_unexpected_error_becomes_a_storage_error_naming_the_checkpoint():
    writer = BackgroundWriter()
    writer.submit(lambda: {}["missing"], "checkpoint gs://b/job/checkpoints/ckpt-000000007.pt")
    with pytest.raises(StorageError) as raised:
        writer.wait()
    assert raised.value.message == ("writing checkpoint gs://b/job/checkpoints/"
                                    "ckpt-000000007.pt failed: KeyError: 'missing'")
    assert writer.drain() is None  # nothing left to report


# --- the trainer as a process -----------------------------------------------------------------

RUN = ["--fake_data", "--num_epochs=1", "--num_steps=60", "--checkpoint_steps=10",
       "--log_steps=1", "--batch_size=16"]


def start(job, proxy, tmp_path, run=RUN):
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    # TRAINER_GCS_REFUSAL_RETRY=0: a refusal is final at once, so when a refused write is
    # reported does not depend on how many steps fit in a new pod's grace for refusals.
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.mnist"] + run + ["--job_dir=" + job], cwd=str(REPO),
        env=clean_environ(PJRT_DEVICE="CPU", STORAGE_EMULATOR_HOST=proxy.url,
                          TRAINER_GCS_RETRY_DEADLINE="60", TRAINER_GCS_REFUSAL_RETRY="0",
                          HOME=str(tmp_path), TMPDIR=str(scratch)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def checkpoint_steps(bucket):
    return sorted(int(re.search(r"ckpt-(\d+)", blob.name).group(1))
                  for blob in bucket.list_blobs(prefix="job/checkpoints/ckpt-"))


def loaded(bucket, step):
    data = bucket.blob("job/checkpoints/" + checkpoint_name(step)).download_as_bytes()
    return torch.load(io.BytesIO(data), weights_only=False)


def test_kill_9_during_a_background_write_resumes_from_the_previous_checkpoint(faulty_gcs,
                                                                               tmp_path):
    bucket, proxy = faulty_gcs
    job = "gs://{}/job".format(bucket.name)
    held = proxy.add(Rule(checkpoint_name(20), hang_s=60))  # the upload of step 20 hangs
    process = start(job, proxy, tmp_path)
    try:
        assert held.hit.wait(180), "the checkpoint of step 20 was never uploaded"
        # The loop does not wait for the upload: it trains on while the write hangs.
        wait_for_line(process, "step 25/")
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        process.kill()
    assert checkpoint_steps(bucket) == [10]  # the killed write left nothing behind
    assert list((tmp_path / "tmp").rglob(".tmp-*")) == []  # nor its staged file in $TMPDIR
    held.needle = "never matches again"
    process = start(job, proxy, tmp_path)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert re.search(r"resumed from \S+ckpt-000000010\.pt: epoch 1, step 10", out), out
    assert checkpoint_steps(bucket) == [40, 50, 60]


def test_sigterm_with_a_write_in_flight_completes_it_and_the_final_one(faulty_gcs, tmp_path):
    bucket, proxy = faulty_gcs
    job = "gs://{}/job".format(bucket.name)
    # The first upload of step 10 hangs for 5 s and is dropped; its retry gets through.
    held = proxy.add(Rule(checkpoint_name(10), hang_s=5, every=2))
    process = start(job, proxy, tmp_path)
    try:
        assert held.hit.wait(180), "the checkpoint of step 10 was never uploaded"
        wait_for_line(process, "step 12/")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    stopped = re.search(r"Preempted: stopped by SIGTERM at step (\d+); checkpoint (\S+)", err)
    assert stopped and "Traceback" not in err, err
    final = int(stopped.group(1))
    assert final > 10 and stopped.group(2).endswith(checkpoint_name(final))
    # Both whole and loadable. The loop does not wait for the held write until the next
    # checkpoint (step 20), so the signal may land before or after it was handed over.
    saved = checkpoint_steps(bucket)
    assert saved in ([10, final], [10, 20, final]), saved
    assert all(loaded(bucket, step)["step"] == step for step in saved)


def test_a_local_job_dir_gets_its_checkpoints_whole(tmp_path):
    # The background write of a local job dir: the same files as written in the foreground.
    job = tmp_path / "job"
    result = subprocess.run(
        [sys.executable, "-m", "trainer.mnist", "--fake_data", "--num_epochs=2",
         "--num_steps=6", "--checkpoint_steps=4", "--log_steps=0", "--job_dir=" + str(job)],
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"), capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr
    names = sorted(os.listdir(str(job / "checkpoints")))
    assert names == [checkpoint_name(step) for step in (6, 8, 12)]  # the newest 3
    store = CheckpointStore(LocalDirectory(str(job / "checkpoints")))
    assert store.load_latest()[0] == 12


@pytest.mark.skipif(not hasattr(threading, "get_native_id"), reason="Python 3.8+ only")
def test_the_write_runs_nicer_than_the_trainer_and_the_trainer_keeps_its_priority():
    from trainer.checkpoint_writer import WRITER_NICENESS

    seen = []
    trainer_before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    writer = BackgroundWriter()
    writer.submit(lambda: seen.append(os.getpriority(os.PRIO_PROCESS,
                                                     threading.get_native_id())), "probe")
    writer.wait()
    assert seen == [min(19, trainer_before + WRITER_NICENESS)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == trainer_before


def test_a_failed_background_write_stops_the_run_within_a_step_with_its_state_written(
        faulty_gcs, tmp_path):
    # Every upload of step 500's checkpoint is refused (403: a refusal, exit 77), as a bucket
    # whose writes fail would. The loop learns of it after the step during which it failed,
    # not at the next checkpoint (step 1000, the epoch's end): it writes the state it reached
    # and exits 77 naming step 500's.
    bucket, proxy = faulty_gcs
    job = "gs://{}/job".format(bucket.name)
    refused = proxy.add(Rule(checkpoint_name(500), status=403))
    process = start(job, proxy, tmp_path, ["--fake_data", "--num_epochs=1", "--num_steps=1000",
                                           "--checkpoint_steps=500", "--log_steps=100",
                                           "--batch_size=16"])
    try:
        out, err = process.communicate(timeout=300)
    finally:
        process.kill()
    assert refused.hit.is_set()
    assert process.returncode == 77, err
    error, hint = err.strip().splitlines()[-2:]
    assert "Traceback" not in err
    assert error.startswith("StorageError: ") and checkpoint_name(500) in error
    saved = checkpoint_steps(bucket)
    assert len(saved) == 1 and 500 < saved[0] < 1000, saved  # the state it stopped at
    assert "{} was written since".format(checkpoint_name(saved[0])) in hint
    assert loaded(bucket, saved[0])["step"] == saved[0]
