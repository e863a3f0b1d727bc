"""launcher.exec_command: the program found as a shell finds it, and the signal state a command
starts in (SIGPIPE and SIGXFSZ at their defaults, the stop signals unblocked unless the
command unblocks them itself, one at a trainer's exec left pending for it). The launcher as
PID 1 (a signal while it logs its summary) is tests/launcher/test_pid1.py."""

import signal
import stat
import subprocess
import threading

import pytest
from signal_state import RESET_BITS, STOP_BITS, commands_on_path, status_fields

from conftest import REPO, clean_environ, launcher_command
from launcher.cli import interrupt_on_signals
from launcher.errors import EX_CANNOT_EXECUTE, EX_NOT_FOUND, Interrupted, TrainerExecError
from launcher.exec_command import STOP_SIGNALS, exec_command, find_program


def shell_runs(name, path):
    """What bash answers for ``name`` on ``path``: (exit code, output)."""
    result = subprocess.run(["/bin/bash", "-c", name], env={"PATH": path}, capture_output=True,
                            text=True)
    return result.returncode, result.stdout.strip()


def test_an_unexecutable_file_earlier_on_path_is_passed_over_as_a_shell_does(tmp_path):
    first, second = commands_on_path(tmp_path)
    path = "{}:{}".format(first, second)
    assert shell_runs("train-cmd", path) == (0, "ran second")
    assert find_program("train-cmd", {"PATH": path}) == str(second / "train-cmd")


def test_126_only_when_no_match_on_path_can_run_127_when_there_is_none(tmp_path):
    first, second = commands_on_path(tmp_path)
    (second / "train-cmd").unlink()
    (second / "train-cmd").mkdir()  # a directory is no program
    path = "{}:{}".format(first, second)
    assert shell_runs("train-cmd", path)[0] == EX_CANNOT_EXECUTE
    with pytest.raises(TrainerExecError) as error:
        find_program("train-cmd", {"PATH": path})
    assert error.value.exit_code == EX_CANNOT_EXECUTE
    assert str(tmp_path / "first" / "train-cmd") in error.value.message
    assert shell_runs("no-such-program", path)[0] == EX_NOT_FOUND
    with pytest.raises(TrainerExecError) as error:
        find_program("no-such-program", {"PATH": path})
    assert error.value.exit_code == EX_NOT_FOUND


def test_a_path_is_taken_as_it_is(tmp_path):
    first, _ = commands_on_path(tmp_path)
    script = first / "train-cmd"
    with pytest.raises(TrainerExecError) as error:
        find_program(str(script), {"PATH": ""})
    assert error.value.exit_code == EX_CANNOT_EXECUTE
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert find_program(str(script), {"PATH": ""}) == str(script)
    for missing in (str(tmp_path / "absent"), "./absent"):
        with pytest.raises(TrainerExecError) as error:
            find_program(missing, {"PATH": str(first)})
        assert error.value.exit_code == EX_NOT_FOUND
    with pytest.raises(TrainerExecError) as error:  # a directory is not a program
        find_program(str(tmp_path), {"PATH": ""})
    assert error.value.exit_code == EX_CANNOT_EXECUTE


class SignalState:
    """Stands in for os.execvpe and records the signal state the command would start in;
    with ``signal_at_exec``, a SIGTERM arrives at the exec (sent to this thread, as the kernel
    picks the main thread for a process's signal when it does not block it)."""

    def __init__(self, signal_at_exec=False):
        self.signal_at_exec = signal_at_exec

    def __call__(self, file, args, env):
        if self.signal_at_exec:
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        self.blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        self.pending = signal.sigpending()
        self.handlers = {signum: signal.getsignal(signum)
                         for signum in (signal.SIGPIPE, signal.SIGXFSZ)}


@pytest.mark.parametrize("installs_handler", [True, False])
def test_the_command_starts_with_default_dispositions_and_blocked_only_if_it_unblocks(
        installs_handler):
    state = SignalState()
    with interrupt_on_signals():
        before = (signal.getsignal(signal.SIGPIPE), signal.pthread_sigmask(signal.SIG_BLOCK, []))
        exec_command(["train"], {}, installs_handler, execvpe=state)
        after = (signal.getsignal(signal.SIGPIPE), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    assert set(state.handlers.values()) == {signal.SIG_DFL}
    assert state.blocked & STOP_SIGNALS == (STOP_SIGNALS if installs_handler else set())
    assert after == before  # a failed exec leaves the launcher as it was, to report it


def test_a_sigterm_at_a_trainers_exec_waits_pending_for_its_handler():
    """Exec'd now, the trainer would start with it pending and get it once its handler is
    in; here the exec returns, and the launcher's own handler gets it."""
    state = SignalState(signal_at_exec=True)
    with interrupt_on_signals():
        with pytest.raises(Interrupted) as stopped:
            exec_command(["train"], {}, installs_handler=True, execvpe=state)
    assert signal.SIGTERM in state.pending and signal.SIGTERM in state.blocked
    assert stopped.value.exit_code == 128 + signal.SIGTERM


@pytest.mark.parametrize("init", ["group", "exec"])
def test_yes_piped_to_head_dies_of_sigpipe_as_in_a_shell(init):
    """The issue's check: ``yes | head -1`` through the launcher, as bash reports it."""
    launcher = " ".join(launcher_command("--init=" + init, "--", "yes"))
    result = subprocess.run(["bash", "-c", launcher + " | head -n1 >/dev/null; "
                             "echo ${PIPESTATUS[0]}"], cwd=str(REPO), capture_output=True,
                            text=True, timeout=60,
                            env=clean_environ(LAUNCHER_HOST_ROOT="/nonexistent"))
    assert result.stdout.strip() == str(128 + signal.SIGPIPE), result.stderr


@pytest.mark.parametrize("init", ["group", "child", "exec"])
def test_a_command_of_your_own_starts_with_nothing_blocked_or_ignored(init):
    """Not PID 1 (PID 1 is tests/launcher/test_pid1.py): the status of the command itself."""
    result = subprocess.run(launcher_command("--init=" + init, "--", "cat", "/proc/self/status"),
                            cwd=str(REPO), capture_output=True, text=True, timeout=60,
                            env=clean_environ(LAUNCHER_HOST_ROOT="/nonexistent"))
    assert result.returncode == 0, result.stderr
    status = status_fields(result.stdout)
    assert int(status["SigBlk"], 16) & STOP_BITS == 0
    assert int(status["SigIgn"], 16) & RESET_BITS == 0
