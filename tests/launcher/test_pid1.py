"""The launcher as PID 1 (``unshare --pid --fork``), as in a container: SIGTERM sent to PID 1
reaches a command of the user's (run by dumb-init as PID 1, or exec'd with LAUNCHER_INIT=exec),
a script without a handler ends at once, zombies are reaped, exit codes pass through, and
SIGTERM while waiting for the TPU, or while the launcher logs its summary, ends the launcher
with 128 + SIGTERM. Only the trainers that catch SIGTERM first start with it blocked; under
an init that signals the launcher alone (tini without -g) a wrapper's children still get it;
the command is looked up on PATH as a shell does. The container tier runs the same user
command in both images (tests/images/test_user_command.py).
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from pid_namespace import namespace_init_pid
from signal_state import MASK_AT_START, STOP_BITS, commands_on_path, masks_at_start

import fake_cloud_tpu as fake
from conftest import (
    REPO,
    SEED_TPU_CONFIG,
    TESTS,
    clean_environ,
    fake_trainer_env,
    launcher_command,
    read_records,
)
from launcher.init import find_init

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="needs util-linux unshare and root to make a PID namespace")


USER_COMMAND = ["--", "python", str(TESTS / "user_command.py")]


def start_as_pid1(env, *args, init=(), stderr=subprocess.PIPE):
    """The launcher as PID 1 of a new PID namespace with its own /proc (so that what the
    command reads there, PID 1 and zombies, is the namespace's); with ``init``, that init is
    PID 1 and the launcher its child. When unshare ends (a test's ``kill()`` included), every
    process of the namespace is killed: a PID 1 that ignores SIGTERM would outlive the test."""
    prefix = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"] + list(init)
    return subprocess.Popen(launcher_command(*args, prefix=prefix), cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def user_command(*args, init=(), **env):
    """The launcher (PID 1, or ``init``'s child) running tests/user_command.py ARGS; returns
    the process."""
    return start_as_pid1(clean_environ(LAUNCHER_HOST_ROOT="/nonexistent", **env),
                         *(USER_COMMAND + list(args)), init=init)


def stop_when_ready(process, signum=signal.SIGTERM):
    """Wait for the command's "ready", send ``signum`` to the namespace's PID 1 (as ``docker
    stop`` does); returns (exit code, seconds from the signal to the exit)."""
    init = namespace_init_pid(process.pid)
    assert process.stdout.readline().strip() == "ready", process.stderr.read()
    sent = time.monotonic()
    os.kill(init, signum)
    code = process.wait(10)
    return code, time.monotonic() - sent


def wait_for(predicate, timeout, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


@pytest.mark.parametrize("init, under_init", [("group", True), ("child", True), ("exec", False)])
def test_sigterm_to_pid1_reaches_the_trainer(trainer_out, init, under_init):
    process = start_as_pid1(fake_trainer_env(trainer_out, FAKE_TRAINER_WAIT="1",
                                             LAUNCHER_HOST_ROOT="/nonexistent",
                                             LAUNCHER_INIT=init))
    try:
        init = namespace_init_pid(process.pid)
        assert wait_for(lambda: read_records(trainer_out), 60), process.stderr.read()
        # dumb-init (PID 1) started it as its child; exec'd, it is PID 1 itself.
        start = read_records(trainer_out)[0]
        assert (start["pid"], start["ppid"]) == ((2, 1) if under_init else (1, 0))
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


def test_a_script_without_a_handler_ends_at_once_with_143():
    process = user_command("sleep")
    try:
        code, seconds = stop_when_ready(process)
        assert (code, seconds < 2.0) == (128 + signal.SIGTERM, True)
        assert "hand-over: dumb-init (PID 1) runs the command and forwards signals to its " \
               "process group" in process.stderr.read()
    finally:
        process.kill()


def test_exec_mode_makes_the_script_pid1_which_ignores_sigterm():
    """What the init is for: exec'd as PID 1, the same script drops SIGTERM (the kernel
    ignores signals PID 1 has no handler for) and only SIGKILL ends it."""
    process = user_command("sleep", LAUNCHER_INIT="exec")
    try:
        init = namespace_init_pid(process.pid)
        assert process.stdout.readline().strip() == "ready"
        os.kill(init, signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(1.5)
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.parametrize("init", ["group", "child"])
def test_a_handler_runs_and_its_exit_code_is_the_containers(tmp_path, init):
    marker = tmp_path / "checkpoint"
    process = user_command("handler", str(marker), "7", LAUNCHER_INIT=init)
    try:
        code, seconds = stop_when_ready(process)
        assert (code, seconds < 2.0, marker.read_text()) == (7, True, "checkpoint\n")
    finally:
        process.kill()


@pytest.mark.parametrize("init, zombies", [("group", 0), ("exec", 2)])
def test_orphaned_grandchildren_are_reaped(init, zombies):
    """Under the init nothing is left <defunct>; exec'd, the script (PID 1) inherits the
    orphans and never waits for them: two zombies, which shows the check can fail."""
    process = user_command("orphans", LAUNCHER_INIT=init)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert out.split() == ["zombies:", str(zombies)]


@pytest.mark.parametrize("args, code", [(["exit", "0"], 0), (["exit", "3"], 3),
                                        (["kill"], 128 + signal.SIGKILL)])
def test_exit_codes_pass_through(args, code):
    process = user_command(*args)
    _, err = process.communicate(timeout=30)
    assert process.returncode == code, err


def test_a_missing_command_is_the_launchers_127_not_the_inits():
    process = start_as_pid1(clean_environ(LAUNCHER_HOST_ROOT="/nonexistent"), "--",
                            "no-such-trainer-command")
    _, err = process.communicate(timeout=30)
    assert process.returncode == 127
    assert err.splitlines()[-2:] == [
        "launcher: TrainerExecError: trainer command not found: no-such-trainer-command",
        "launcher: HINT: check LAUNCHER_TRAINER / --trainer and the image's PATH"]


# A stand-in for `docker run --init` (tini without -g): an init, PID 1, that signals its own
# child (the launcher's process) alone.
INIT_SIGNALLING_ITS_CHILD = (find_init({}), "--single-child", "--")
# The wrapper, with a trap so that the shell outlives the SIGTERM: a shell runs its
# trap only once the child it waits for has ended.
WRAPPER = 'trap "echo wrapper: TERM" TERM; "$@"; echo "wrapper: end $?"'


def test_not_pid1_a_wrappers_children_still_get_sigterm(tmp_path):
    """The launcher is not PID 1, so without an init of its own the shell alone would get the
    signal: it waits for the script, which never hears of it, and nothing ends."""
    marker = tmp_path / "checkpoint"
    process = start_as_pid1(
        clean_environ(LAUNCHER_HOST_ROOT="/nonexistent"), "--", "sh", "-c", WRAPPER, "sh",
        sys.executable, str(TESTS / "user_command.py"), "handler", str(marker), "7",
        init=INIT_SIGNALLING_ITS_CHILD)
    try:
        code, _ = stop_when_ready(process)
        out, err = process.communicate(timeout=10)
        assert (code, out.splitlines()) == (0, ["wrapper: TERM", "wrapper: end 7"]), err
        assert "hand-over: dumb-init (not PID 1) runs the command" in err
        assert marker.read_text() == "checkpoint\n"
    finally:
        process.kill()


@pytest.mark.parametrize("module, blocked", [
    ("trainer.data.make_shards", False), ("trainer.data.reindex", False),
    ("trainer.data.plan", False), ("trainer.mnist", True)])
def test_only_the_trainers_that_unblock_them_start_with_the_stop_signals_blocked(
        tmp_path, module, blocked):
    """The issue's check: `-- python -m trainer.data.make_shards` as PID 1 kept SigBlk 0x4002
    for good. Every Python started reports its mask (a sitecustomize); the last is the
    command's."""
    (tmp_path / "sitecustomize.py").write_text(MASK_AT_START)
    process = start_as_pid1(clean_environ(LAUNCHER_HOST_ROOT="/nonexistent",
                                          PYTHONPATH=str(tmp_path)),
                            "--", "python", "-m", module, "--help")
    _, err = process.communicate(timeout=120)
    masks = masks_at_start(err)
    assert len(masks) == 2, err  # the launcher's and the command's
    assert (masks[-1] & STOP_BITS == STOP_BITS) == blocked, err


def test_sigterm_while_the_launcher_logs_its_summary_ends_it_with_143():
    """Its stderr pipe full, the launcher blocks in its first log line; the SIGTERM sent then
    must not be dropped (PID 1 without a handler) to let the command run."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        os.set_blocking(write_end, True)
    try:
        process = start_as_pid1(clean_environ(LAUNCHER_HOST_ROOT="/nonexistent"),
                                *(USER_COMMAND + ["exit", "0"]), stderr=write_end)
        os.close(write_end)
        init = namespace_init_pid(process.pid)
        assert wait_for(lambda: wchan(init).endswith("pipe_write"), 60)
        os.kill(init, signal.SIGTERM)
        with os.fdopen(read_end, "rb") as pipe:
            err = pipe.read().decode()
        assert process.wait(10) == 128 + signal.SIGTERM
        assert "launcher: Interrupted: received SIGTERM" in err
    finally:
        process.kill()


def wchan(pid):
    """Where in the kernel ``pid`` sleeps: "pipe_write" ("anon_pipe_write" on newer kernels)
    while its write to a full pipe waits."""
    try:
        with open("/proc/{}/wchan".format(pid)) as handle:
            return handle.read()
    except OSError:
        return ""


def test_as_pid1_the_command_is_looked_up_on_path_as_a_shell_does(tmp_path):
    """An unexecutable file of the same name earlier on PATH is passed over (it was 126)."""
    path = ":".join(list(map(str, commands_on_path(tmp_path))) + [os.environ["PATH"]])
    process = start_as_pid1(clean_environ(LAUNCHER_HOST_ROOT="/nonexistent", PATH=path),
                            "--", "train-cmd")
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out.strip()) == (0, "ran second"), err
