"""The hand-over itself: finding the program as a shell would, the signal state the command
starts with, and the exec.

What the command inherits, and why:

- SIGPIPE and SIGXFSZ go back to their defaults. Python's start-up ignores them, and an exec
  keeps what is ignored: ``yes | head -1`` would print "Broken pipe" and exit 1 instead of
  ending by SIGPIPE (141 in a shell). ``subprocess`` resets the same two (``restore_signals``).
- SIGTERM and SIGINT: the launcher's handlers (``launcher.cli``) stay in up to the exec,
  which resets them to the default; a signal caught until then is the launcher's
  ``Interrupted`` (exit 128+N, the command never starts), also when it reached another
  thread (TensorFlow starts one) and the handler runs in the main thread a moment later. A
  command that ``installs_handler`` (the bundled trainers, ``trainer.stop_signal``) is
  exec'd with both blocked, so that one arriving at the exec or while the trainer imports
  stays pending (the mask survives the exec) until its handler is in and unblocks them. Any
  other command would keep them blocked for good, so it gets them unblocked; that includes
  dumb-init, which would lose a signal pending at its start (it forwards it before its child
  exists: checked with dumb-init 1.2.5). Unblocked, a signal in the microseconds between the
  last check and the ``execve`` is lost: too late for the launcher, too early for the command.
"""

from __future__ import annotations

import os
import shutil
import signal
from typing import Callable, Mapping, Sequence

from launcher.errors import EX_CANNOT_EXECUTE, EX_NOT_FOUND, TrainerExecError

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
# Ignored by Python's start-up; a program expects them at their defaults.
RESET_TO_DEFAULT = (signal.SIGPIPE, signal.SIGXFSZ)

_NOT_FOUND_HINT = "check LAUNCHER_TRAINER / --trainer and the image's PATH"
_CANNOT_EXECUTE_HINT = "check the file's permissions and interpreter line"


def find_program(program: str, environ: Mapping[str, str]) -> str:
    """The file a shell would run for ``program``: itself when it names a path, else the first
    executable regular file on the ``PATH`` of ``environ``. Raises the launcher's 127 when
    there is none, and 126 when the only files by that name cannot be executed (the errors a
    shell gives, in the launcher's words, before an init is exec'd in front of the command)."""
    search = environ.get("PATH", os.defpath)
    if os.sep in program:
        found = program if os.path.exists(program) else None
        runnable = found if found and _is_runnable(found) else None
    else:
        runnable = shutil.which(program, mode=os.X_OK, path=search)
        found = runnable or shutil.which(program, mode=os.F_OK, path=search)
    if found is None:
        raise TrainerExecError("trainer command not found: {}".format(program), _NOT_FOUND_HINT,
                               EX_NOT_FOUND)
    if runnable is None:
        raise TrainerExecError("cannot execute the trainer {}: Permission denied".format(found),
                               _CANNOT_EXECUTE_HINT, EX_CANNOT_EXECUTE)
    return runnable


def _is_runnable(path: str) -> bool:
    return not os.path.isdir(path) and os.access(path, os.X_OK)


def exec_command(argv: Sequence[str], env: Mapping[str, str], installs_handler: bool,
                 execvpe: Callable[..., None] = os.execvpe) -> None:
    """Replace this process with ``argv`` (looked up on ``env``'s PATH) in the signal state
    described above; returns only when ``execvpe`` does (a test double), raises
    ``TrainerExecError`` (127/126) when the exec fails. The caller's mask and dispositions
    are back in place when it returns."""
    # Python runs a handler due when the mask changes: a signal caught so far raises
    # Interrupted here rather than being lost in the exec.
    previous_mask = signal.pthread_sigmask(
        signal.SIG_BLOCK if installs_handler else signal.SIG_UNBLOCK, STOP_SIGNALS)
    previous = {signum: signal.signal(signum, signal.SIG_DFL) for signum in RESET_TO_DEFAULT}
    try:
        _exec(list(argv), env, execvpe)
    finally:  # the exec failed (or was a test double): the launcher goes on to report it
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


def _exec(argv: list, env: Mapping[str, str], execvpe: Callable[..., None]) -> None:
    try:
        execvpe(argv[0], argv, env)
    except FileNotFoundError:
        raise TrainerExecError("trainer command not found: {}".format(argv[0]), _NOT_FOUND_HINT,
                               EX_NOT_FOUND)
    except OSError as error:
        raise TrainerExecError("cannot execute the trainer {}: {}".format(
            argv[0], error.strerror), _CANNOT_EXECUTE_HINT, EX_CANNOT_EXECUTE)
