"""The launcher as PID 1 (``unshare --pid --fork``), as in a container: SIGTERM sent to PID 1
reaches the trainer (the launcher exec'd it, so it *is* PID 1), and SIGTERM while waiting for
the TPU ends the launcher within a second with 128 + SIGTERM."""

import os
import shutil
import signal
import subprocess
import time

import pytest

import fake_cloud_tpu as fake
from conftest import REPO, SEED_TPU_CONFIG, fake_trainer_env, launcher_command, read_records

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="needs util-linux unshare and root to make a PID namespace")


def start_as_pid1(env, *args):
    return subprocess.Popen(launcher_command(*args, prefix=["unshare", "--pid", "--fork"]),
                            cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def namespace_init_pid(unshare_pid, timeout=10.0):
    """The host PID of the process that is PID 1 inside unshare's new namespace."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/{0}/task/{0}/children".format(unshare_pid)) as handle:
                children = handle.read().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError("unshare started no child")


def wait_for(predicate, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def test_sigterm_to_pid1_reaches_the_trainer(trainer_out):
    process = start_as_pid1(fake_trainer_env(trainer_out, FAKE_TRAINER_WAIT="1",
                                             LAUNCHER_HOST_ROOT="/nonexistent"))
    try:
        init = namespace_init_pid(process.pid)
        assert wait_for(lambda: read_records(trainer_out), 60), process.stderr.read()
        assert read_records(trainer_out)[0]["pid"] == 1  # exec'd: the trainer is PID 1
        sent = time.time()
        os.kill(init, signal.SIGTERM)
        assert wait_for(lambda: len(read_records(trainer_out)) == 2, 1.0)
        assert read_records(trainer_out)[1]["event"] == "sigterm"
        assert read_records(trainer_out)[1]["time"] - sent < 1.0
        assert process.wait(10) == 0
    finally:
        process.kill()


@pytest.mark.parametrize("api_delay_s", [0.0, 5.0], ids=["between-polls", "inside-a-request"])
def test_sigterm_while_waiting_for_the_tpu_exits_within_a_second(cloud, trainer_out,
                                                                 api_delay_s):
    """Also when the signal lands inside the TPU client's HTTP request, where TensorFlow
    rewraps any Exception: the cancel must still be a cancel (143), not an API error."""
    cloud.api.answer_with(fake.state("CREATING"))
    cloud.api.node_delay_s = api_delay_s
    env = fake_trainer_env(trainer_out, TPU_CONFIG=SEED_TPU_CONFIG, LAUNCHER_XLA_RUNTIME="xrt",
                           **cloud.environ)
    process = start_as_pid1(env)
    try:
        init = namespace_init_pid(process.pid)
        assert wait_for(lambda: len(cloud.api.node_requests) >= 2, 60)
        time.sleep(0.2 if api_delay_s else 0.0)  # now blocked in the request
        sent = time.monotonic()
        os.kill(init, signal.SIGTERM)
        code = process.wait(5)
        assert time.monotonic() - sent < 1.0
        assert code == 128 + signal.SIGTERM
        assert "Interrupted: received SIGTERM" in process.stderr.read()
        assert read_records(trainer_out) == []
    finally:
        process.kill()
