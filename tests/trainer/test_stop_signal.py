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
    # A claim about the wait, not the network: tests/tiny_model.py compiles in about a second,
    # where ResNet-18's steps took most of this test's 44 CPU seconds even compiled quickly.
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer.imagenet", "--data_dir=" + data, "--job_dir=" + str(job),
         "--model=tiny_model:build", "--image_size=16", "--batch_size=8", "--num_workers=1",
         "--warmup_epochs=0", "--num_epochs=10", "--log_steps=1"],
        cwd=str(REPO), env=clean_environ(
            PJRT_DEVICE="CPU", STORAGE_EMULATOR_HOST=proxy.url, HOME=str(tmp_path),
            PYTHONPATH=str(REPO / "tests")),
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
    """Its hint names the command that resumes this run (nothing restarts a local one), with
    the PYTHONPATH the run had, and that command, pasted in a shell without it, resumes it."""
    job = tmp_path / "job"
    args = ("--data_dir=data/mnist-sample --log_steps=5 --num_epochs=100 --job_dir=" + str(job))
    code = tmp_path / "my code"  # where a --model of one's own would come from
    code.mkdir()

    def in_a_terminal(command, **environ):
        return subprocess.Popen(
            ["bash", "-c", command], cwd=str(REPO), env=clean_environ(**environ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # its own process group, as a terminal's job is

    process = in_a_terminal("make --no-print-directory run RUN_ARGS='{}'".format(args),
                            PYTHONPATH=str(code))
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
    assert resume == "PYTHONPATH='{}' make run RUN_ARGS='{} --job-dir={}'".format(
        code, args.rsplit(" ", 1)[0], job)
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


def _children(pid):
    """The processes whose parent is ``pid`` (its data workers)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/{}/stat".format(entry)) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _resnet_run(args, tmp_path, **environ):
    """The ImageNet trainer on ResNet-18 at 32 px, whose first step compiles for tens of
    seconds on this machine (80 s measured; a TPU compiles ResNet-50 for about as long), its
    output read line by line."""
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.imagenet", "--model=resnet18", "--image_size=32",
         "--batch_size=8", "--warmup_epochs=0", "--log_steps=1"] + args,
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU", HOME=str(tmp_path), **environ),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop(process, signum):
    """Send ``signum``; returns (seconds until the process ended, its stdout, its stderr)."""
    sent = time.monotonic()
    process.send_signal(signum)
    out, err = process.communicate(timeout=300)
    return time.monotonic() - sent, out, err


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_during_the_first_steps_compile_ends_the_run_within_2_s_without_a_checkpoint(
        photo_shards, tmp_path, signum, code):
    job, scratch = tmp_path / "job", tmp_path / "tmp"
    scratch.mkdir()
    process = _resnet_run(["--data_dir=" + str(photo_shards), "--job_dir=" + str(job),
                           "--num_workers=1", "--num_epochs=1"], tmp_path, TMPDIR=str(scratch))
    try:
        # The last line before the loop: its first step is being traced and compiled now.
        wait_for_line(process, "global batch")
        deadline = time.monotonic() + 60  # its data worker starts as the first batch is asked
        while not _children(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        workers = _children(process.pid)
        took, out, err = _stop(process, signum)
    finally:
        process.kill()
    print("exit {:.2f} s after {}".format(took, signal.Signals(signum).name))
    assert process.returncode == code, err
    assert "step 1/" not in out, "the first step had finished: not its compile that was stopped"
    # The bound is 2 s; this loaded machine may take one more to schedule the process.
    assert took < 3, "exit {:.1f} s after the signal".format(took)
    assert "Traceback" not in err
    assert err.strip().splitlines()[-2].startswith("Preempted: stopped by {} before training "
                                                   "resumed".format(signal.Signals(signum).name))
    assert not (job / "checkpoints").exists() or not os.listdir(str(job / "checkpoints"))
    assert workers, "the run had no data worker to end"
    deadline = time.monotonic() + 10  # the workers exit at their parent's SIGTERM
    while time.monotonic() < deadline and any(os.path.exists("/proc/{}".format(pid))
                                              and _children(process.pid) for pid in workers):
        time.sleep(0.1)
    assert not [pid for pid in workers if os.path.exists("/proc/{}/stat".format(pid))
                and open("/proc/{}/stat".format(pid)).read().rsplit(")", 1)[1].split()[0]
                != "Z"], "a data worker outlived the trainer"
    assert not list(scratch.glob("trainer-*"))


def test_a_stop_during_the_first_evaluation_ends_the_run_within_10_s(tmp_path):
    # The epoch's last step is logged just before its checkpoint is handed to the writer and
    # its evaluation starts and compiles: the stop cannot wait for that compile to end (a Spot
    # VM's notice is about 15 s), nor for the evaluation. The compile took 20 s on a loaded
    # machine and under 0.5 s on an idle one, so the signal comes 0.3 s after the step's line
    # and the evaluation's batches are large (4,096 images: seconds of evaluation after the
    # compile), so that it lands inside the compile or between the evaluation's batches,
    # never after; more epochs than the run can reach, so that it never ends by itself first.
    # (The checkpoint's own line is no anchor: the writer's thread logs it when the write is
    # done, after the evaluation on a loaded machine.)
    job = tmp_path / "job"
    process = _resnet_run(["--fake_data", "--job_dir=" + str(job), "--num_epochs=50",
                           "--num_steps=3", "--eval_batch_size=4096"], tmp_path)
    try:
        wait_for_line(process, "step 3/")
        time.sleep(0.3)
        took, out, err = _stop(process, signal.SIGTERM)
    finally:
        process.kill()
    print("exit {:.2f} s after SIGTERM".format(took))
    assert process.returncode == 143, err
    assert "Traceback" not in err
    # Inside the compile (the deadline ends it); between the evaluation's batches, or, where
    # the signal comes before the evaluation started, at the epoch's last step boundary (the
    # loop ends it): each time before the evaluation finished.
    assert ("inside one call (a compile)" in err
            or "stopped by SIGTERM while evaluating epoch 1" in err
            or "stopped by SIGTERM at step 3;" in err), err
    assert "epoch 1 done" not in out, "the evaluation had finished: it was not stopped"
    # 10 s is the bound (stop_signal.DEADLINE_S is 8), plus 1 s for this loaded machine.
    assert took < 11, "exit {:.1f} s after SIGTERM".format(took)
    # Where the compile outlasted the deadline, no new checkpoint; the epoch's is whole.
    newest = max(name for name in os.listdir(str(job / "checkpoints"))
                 if name.startswith("ckpt-"))
    assert torch.load(str(job / "checkpoints" / newest), weights_only=False)["step"] >= 3


# A trainer process whose main thread sits in one long C call, as in an XLA compile: libc's
# sleep with the stop signals blocked in that thread, so that only the wakeup reader sees
# them (Python runs no handler on a main thread inside C). ``BEFORE`` marks the state the
# signal finds; the script prints "call ended" if the call was let finish.
_LONG_CALL = """
import ctypes, signal, sys, time
from trainer import stop_signal
stop_signal.DEADLINE_S = {deadline}
stop_signal.catch_sigterm()
{before}
signal.pthread_sigmask(signal.SIG_BLOCK, set(stop_signal.STOPS))
print("in the call", flush=True)
with {context}:
    ctypes.CDLL(None).sleep({seconds})
print("call ended", flush=True)
"""


def _long_call(before="", context="open('/dev/null')", seconds=6, deadline=8.0):
    script = _LONG_CALL.format(before=before, context=context, seconds=seconds,
                               deadline=deadline)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=str(REPO),
                               env=clean_environ(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for_line(process, "in the call")
    return process


def _signalled(process, signum):
    """Send ``signum`` and return the process's (stdout, stderr) once it has ended."""
    try:
        process.send_signal(signum)
        return process.communicate(timeout=60)
    finally:
        process.kill()


def test_a_second_ctrl_c_inside_a_long_call_ends_the_process_at_once():
    # The first Ctrl-C after a step has trained waits for the step boundary (or the
    # deadline, 8 s); the second ends the process at once, though no handler runs on the
    # main thread (it was the 8 s deadline before: the second only reset SIGINT's handler,
    # which the main thread never ran).
    process = _long_call(before="stop_signal.step_trained()", seconds=30)
    try:
        process.send_signal(signal.SIGINT)
        time.sleep(0.5)  # two signals at once would merge into one
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    took = time.monotonic() - sent
    assert process.returncode == 130, err
    assert "Preempted: stopped by SIGINT twice" in err and "Traceback" not in err
    # At once: well inside the 8 s deadline whatever the load (the bound is 2 s + 2 s).
    assert took < 4, "exit {:.1f} s after the second Ctrl-C".format(took)


def test_the_deadline_does_not_end_a_process_writing_a_checkpoint():
    # A periodic checkpoint is being written (a slow upload) when SIGTERM comes: the
    # deadline (1 s here) lets it finish, and the loop stops right after it.
    process = _long_call(before="stop_signal.step_trained()", context="stop_signal.saving()",
                         seconds=4, deadline=1.0)
    out, err = _signalled(process, signal.SIGTERM)
    assert "call ended" in out, err


def test_a_run_that_is_ending_is_not_ended_by_a_stop_before_training():
    # No step trained, but the run is ending already (an error being reported, or its
    # evaluation after a resume at its last step): a stop must not end it with 143, which
    # would replace its own exit code and skip its last outputs.
    process = _long_call(before="stop_signal.stopping()", seconds=3)
    out, err = _signalled(process, signal.SIGTERM)
    assert "call ended" in out, err
    assert "before training resumed" not in err


# A trainer process past its first step whose background checkpoint write (step 2, to gs://)
# is held by the fault proxy while the main thread sits in a long C call (a compile).
_STALLED_WRITE = """
import ctypes, signal, torch
from trainer import stop_signal
from trainer.checkpoint_writer import BackgroundWriter
from trainer.checkpoints import CheckpointStore
from trainer.storage import open_dir
stop_signal.DEADLINE_S = {deadline}
stop_signal.catch_sigterm()
stop_signal.step_trained()
store = CheckpointStore(open_dir({job!r}))
store.save(1, {{"step": 1, "weights": torch.ones(4)}})
writer = BackgroundWriter()
with stop_signal.before_ending(writer.settle):
    writer.submit(lambda: store.save(2, {{"step": 2, "weights": torch.ones(4)}}), "checkpoint")
    signal.pthread_sigmask(signal.SIG_BLOCK, set(stop_signal.STOPS))
    print("in the call", flush=True)
    ctypes.CDLL(None).sleep(120)
"""


def test_the_deadline_abandons_a_background_write_that_outlasts_it(faulty_gcs, tmp_path):
    # The write in flight gets until DEADLINE_S + ENDING_S to land (it waited for as long as
    # the upload was retried, 60 s here, before); abandoned, it leaves the checkpoint before
    # it the newest whole one: a gs:// object appears only once its upload completes.
    bucket, proxy = faulty_gcs
    held = proxy.add(Rule("ckpt-000000002", hang_s=60))
    deadline = 1.0
    process = subprocess.Popen(
        [sys.executable, "-c", _STALLED_WRITE.format(
            deadline=deadline, job="gs://{}/job".format(bucket.name))],
        cwd=str(REPO), env=clean_environ(STORAGE_EMULATOR_HOST=proxy.url, HOME=str(tmp_path),
                                         TRAINER_GCS_RETRY_DEADLINE="120"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(process, "in the call")
        assert held.hit.wait(60), "the checkpoint of step 2 was never uploaded"
        sent = time.monotonic()
        out, err = _signalled(process, signal.SIGTERM)
        took = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert "still inside one call" in err and "Traceback" not in err
    # The bound is 2.5 s, plus up to 5 s for this loaded machine to run the threads and the
    # exit; the write's retries (up to TRAINER_GCS_RETRY_DEADLINE, 120 s) are far beyond it.
    bound = deadline + stop_signal.ENDING_S
    assert took < bound + 5, "exit {:.1f} s after SIGTERM (bound {} s)".format(took, bound)
    assert took >= bound - 0.1, "the write was not given its time: {:.1f} s".format(took)
    names = sorted(blob.name for blob in bucket.list_blobs(prefix="job/"))
    assert names == ["job/ckpt-000000001.pt"], names
