"""SIGTERM at every phase of a trainer that runs as PID 1, as it does in the container after
the launcher's exec: importing, loading data from gs://, compiling, stepping, writing a
checkpoint and uploading metrics. PID 1 ignores signals it has no handler for, so each phase
must already have one. Every case ends with exit 143, a one-line ``Preempted`` message and, when
training had begun, a whole checkpoint at the step the message names; nothing written earlier
is lost. The job dir and the data are on fake-gcs-server behind the fault proxy, which holds
chosen requests so that the signal lands while they are in flight.
"""

import io
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from digits import random_digits
from gcs_fault_proxy import Rule
from mnist_files import write_mnist

from conftest import REPO, clean_environ
from trainer.batches import TensorSource

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="unshare --pid needs root")

RUN = ["--num_epochs=2", "--num_steps=40", "--log_steps=5", "--batch_size=16"]


def start_as_pid_1(args, environ):
    """The trainer as PID 1 of a new PID namespace; returns (unshare process, trainer pid)."""
    process = subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-m", "trainer.mnist"] + args,
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU", **environ),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = "/proc/{0}/task/{0}/children".format(process.pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not open(children).read().split():
        time.sleep(0.01)
    return process, int(open(children).read().split()[0])


def wait_for_output(process, needle, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if needle in line or (not line and process.poll() is not None):
            return
    raise AssertionError("the trainer never printed {!r}".format(needle))


def held(needle, *methods, every=2):
    """A proxy rule that holds every other matching request (``every``: every so many), then
    drops it (its retry gets through): the signal is sent while the first is held. It is
    sent the moment the hold begins, so one second of holding is ample; each held request
    costs the run that long."""
    return Rule(needle, methods=methods or ("POST", "PUT"), hang_s=1, every=every)


# phase -> (extra trainer args, proxy rule holding a request, line to wait for, seconds after)
PHASES = {
    "import": ([], None, None, 0.3),
    # Only the load's first request is held: the signal lands in it, and holding the later
    # ones (every other, as elsewhere) only lengthened the run by half a minute.
    "data load": (["--data_dir=DATA"], lambda: held("mnist/", "GET", every=1000), None, 0),
    "compile": ([], None, " on ", 0),
    "step": ([], None, "step 10/", 0),
    "checkpoint write": (["--checkpoint_steps=15"], lambda: held("checkpoints/ckpt-"), None, 0),
    "metrics upload": ([], lambda: held("metrics.jsonl"), None, 0),
    # The epoch's checkpoint is logged just before its evaluation starts (and compiles);
    # test_sigterm_during_evaluation_stops_it_with_the_epoch_checkpointed pins that path.
    "evaluation": ([], None, "checkpoint gs://", 0),
}


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_sigterm_as_pid_1_stops_with_a_whole_checkpoint(faulty_gcs, tmp_path, phase):
    gcs, proxy = faulty_gcs
    args, rule, line, delay = PHASES[phase]
    data = write_mnist(tmp_path / "mnist", 640, 32)
    for path in data.iterdir():
        gcs.blob("mnist/" + path.name).upload_from_filename(str(path))
    job = "gs://{}/job".format(gcs.name)
    args = [arg.replace("DATA", "gs://{}/mnist".format(gcs.name)) for arg in args]
    if "--data_dir=" not in " ".join(args):
        args.append("--fake_data")
    if rule is not None:
        rule = proxy.add(rule())
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process, pid1 = start_as_pid_1(RUN + args + ["--job_dir=" + job], {
        "STORAGE_EMULATOR_HOST": proxy.url, "TRAINER_GCS_RETRY_DEADLINE": "30",
        "HOME": str(tmp_path), "TMPDIR": str(scratch)})
    try:
        if rule is not None:
            assert rule.hit.wait(120), "the {} request never came".format(phase)
        if line is not None:
            wait_for_output(process, line)
        time.sleep(delay)
        os.kill(pid1, signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    error, hint = err.strip().splitlines()[-2:]
    assert error.startswith("Preempted: stopped by SIGTERM ") and hint.startswith("HINT: ")
    assert "Traceback" not in err
    assert not list(scratch.glob("trainer-*")), "a stopped run left its local working folders"
    written = re.search(r"at step (\d+); checkpoint (\S+)", error)
    if written:  # training had begun: that checkpoint is whole and is the newest
        step, uri = int(written.group(1)), written.group(2)
        name = uri.split(gcs.name + "/", 1)[1]
        state = torch.load(io.BytesIO(gcs.blob(name).download_as_bytes()), weights_only=False)
        assert state["step"] == step
        newest = max(blob.name for blob in gcs.list_blobs(prefix="job/checkpoints/"))
        assert newest == name
    else:
        assert "before training resumed" in error
        assert phase in ("import", "data load", "compile"), error


def test_a_sigterm_that_arrived_while_blocked_reaches_the_handler():
    # The launcher execs the trainer with SIGTERM blocked; catch_sigterm unblocks it, so one
    # that arrived during the exec is delivered instead of lost. Nothing has trained yet, so
    # the handler ends the process at once (the default action would end it with -15, and
    # not at all as PID 1).
    code = ("import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
            "os.kill(os.getpid(), signal.SIGTERM); "
            "from trainer import stop_signal; stop_signal.catch_sigterm(); "
            "print('not stopped')")
    result = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 143 and not result.stdout, result.stderr
    assert result.stderr.startswith("Preempted: stopped by SIGTERM before training resumed")


class _SigtermDuringEvaluation(TensorSource):
    """Digits whose evaluation receives SIGTERM after its first batch, as a platform's would
    during a long evaluation."""

    def eval_batches(self):
        for index, batch in enumerate(super().eval_batches()):
            if index == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch


def test_sigterm_during_evaluation_stops_it_with_the_epoch_checkpointed(tmp_path, monkeypatch):
    from trainer import mnist, stop_signal
    from trainer.config import TrainConfig
    from trainer.errors import Preempted
    from trainer.outputs import OutputPaths

    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setattr(stop_signal, "_received", None)  # restored after this test
    data = random_digits(48, 400, batch_size=16, source=_SigtermDuringEvaluation)
    config = TrainConfig(data_dir="unused", num_epochs=2, batch_size=16, eval_batch_size=8,
                         log_steps=1)
    with pytest.raises(Preempted) as raised:
        mnist.run(config, data_override=data, paths=OutputPaths.resolve(str(tmp_path), {}))
    assert raised.value.exit_code == 143
    assert raised.value.message.startswith("stopped by SIGTERM while evaluating epoch 1 at "
                                           "step 3; checkpoint " + str(tmp_path / "checkpoints"))
    # Epoch 1's 3 steps are saved: the restart goes on with epoch 2, not epoch 1 again.
    assert os.listdir(str(tmp_path / "checkpoints")) == ["ckpt-000000003.pt"]
    assert '"step": 3' in (tmp_path / "metrics.jsonl").read_text()
