"""trainer.stop_signal as a user meets it: a SIGTERM while the loop waits for a stalled read
(a storage outage) stops the run within seconds with a checkpoint at the step reached,
instead of waiting for the read; Ctrl-C (SIGINT to the whole process group of ``make run``)
stops like SIGTERM, exit 130 and no traceback, and a second Ctrl-C ends the run at once."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from gcs_fault_proxy import Rule

from conftest import REPO, clean_environ, upload_folder, wait_for_line
from trainer import stop_signal


def test_sigterm_during_a_stalled_read_stops_within_seconds_checkpointed(
        faulty_gcs, photo_shards, tmp_path):
    bucket, proxy = faulty_gcs
    data = upload_folder(photo_shards, bucket, "shards")
    # One shard read, past the first epoch's, hangs for 60 s (then a retry gets through).
    stalled = proxy.add(Rule("train-", methods=("GET",), hang_s=60, after=40, every=1000))
    job = tmp_path / "job"
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer.imagenet", "--data_dir=" + data, "--job_dir=" + str(job),
         "--model=resnet18", "--image_size=16", "--batch_size=8", "--num_workers=1",
         "--warmup_epochs=0", "--num_epochs=10", "--log_steps=1"],
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU", STORAGE_EMULATOR_HOST=proxy.url,
                                         HOME=str(tmp_path)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert stalled.hit.wait(300), "no shard read was held"
        wait_for_line(process, "step ")  # training is under way
        time.sleep(3)  # what the worker had prefetched is trained: the loop waits
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 143, err
    print("exit {:.1f} s after SIGTERM".format(took))
    assert took < 10, "exit {:.1f} s after SIGTERM".format(took)
    assert "Traceback" not in err
    stopped = re.search(r"Preempted: stopped by SIGTERM at step (\d+); checkpoint (\S+)", err)
    assert stopped, err
    step = int(stopped.group(1))
    state = torch.load(stopped.group(2), weights_only=False)
    assert state["step"] == step > 0


def test_interruptible_raises_at_once_or_after_its_grace(monkeypatch):
    monkeypatch.setattr(stop_signal, "_received", None)
    with stop_signal.caught():
        with pytest.raises(stop_signal.Stopped):
            with stop_signal.interruptible(0.0):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # a blocking wait, ended by the signal
        assert stop_signal.received() and stop_signal.exit_code() == 143
        started = time.monotonic()
        with pytest.raises(stop_signal.Stopped):
            with stop_signal.interruptible(0.5):  # the signal came before the wait began
                time.sleep(5)
        assert 0.2 < time.monotonic() - started < 4
        with stop_signal.interruptible(5.0):
            pass  # a wait that ends in time raises nothing, and leaves no alarm behind
    time.sleep(0.1)


def test_a_stop_during_a_wait_takes_a_few_alarms_and_leaves_none_behind(monkeypatch):
    # The stop comes from another thread while the main thread is blocked, so the wakeup
    # reader wakes it with an alarm. That alarm reaches the wakeup pipe too: answering it
    # with another one kept thousands a second going for the whole grace, and one landing
    # after the wait had raised (in its cleanup) raised again there and left the wait
    # marked open, so that every later alarm raised Stopped wherever the trainer was.
    handled = []

    def counting(signum, frame, handler=stop_signal._on_alarm):
        handled.append(signum)
        handler(signum, frame)

    monkeypatch.setattr(stop_signal, "_on_alarm", counting)
    monkeypatch.setattr(stop_signal, "_received", None)
    with stop_signal.caught():
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
        started = time.monotonic()
        with pytest.raises(stop_signal.Stopped):
            with stop_signal.interruptible(1.0):
                time.sleep(5)  # blocked: the stop comes 0.2 s in, the grace ends 1 s later
        assert 1.0 < time.monotonic() - started < 4
        assert stop_signal._waiting is None
        during = len(handled)
        time.sleep(0.5)  # nothing raises here
    # One alarm for the stop, one for the grace's end, one each may echo: a bound by count,
    # not by time.
    assert during <= 6 and len(handled) <= during + 2, (during, len(handled))


def test_ctrl_c_in_make_run_checkpoints_at_the_step_and_a_second_one_ends_it_at_once(
        tmp_path):
    """Its hint names the command that resumes this run (nothing restarts a local one), and
    that command, pasted, resumes it."""
    job = tmp_path / "job"
    args = ("--data_dir=data/mnist-sample --log_steps=5 --num_epochs=100 --job_dir=" + str(job))

    def in_a_terminal(command):
        return subprocess.Popen(
            ["bash", "-c", command], cwd=str(REPO), env=clean_environ(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # its own process group, as a terminal's job is

    process = in_a_terminal("make --no-print-directory run RUN_ARGS='{}'".format(args))
    try:
        wait_for_line(process, "step 20/")
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends
        out, err = process.communicate(timeout=120)
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    assert "Traceback" not in err and "terminate called" not in err, err
    stopped = re.search(r"Preempted: stopped by SIGINT at step (\d+); checkpoint (\S+)", err)
    assert stopped, err
    assert "Ctrl-C again to stop at once" in err
    step = int(stopped.group(1))
    assert torch.load(stopped.group(2), weights_only=False)["step"] == step >= 20
    assert "the platform restarts" not in err
    [resume] = re.findall(r"^HINT: nothing restarts a local run: (.+) resumes it from the "
                          r"checkpoint$", err, re.M)
    assert resume == "make run RUN_ARGS='{} --job-dir={}'".format(
        args.rsplit(" ", 1)[0], job)
    # Ctrl-C twice: the second ends the run at once, whatever it was doing.
    process = in_a_terminal(resume)
    try:
        wait_for_line(process, "resumed from")
        wait_for_line(process, "step ")
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(0.5)  # two signals at once would merge into one
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=60)
        assert time.monotonic() - sent < 10
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
