"""Who is PID 1 after the hand-over: the command itself, or an init that runs it as its child.

In a container the entrypoint is PID 1, and the kernel drops every signal PID 1 has no handler
for: a training script without a SIGTERM handler, exec'd as PID 1, ignores ``docker stop``
(and the platform's preemption notice) until SIGKILL ends it a grace period later, and nothing
reaps the zombies of the processes it leaves behind. So when the launcher is PID 1 and the
command is the user's own, it execs ``dumb-init`` (pinned in the images, a small C program of
Yelp's) with the command as its child: dumb-init forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT,
SIGUSR1, SIGUSR2 (every catchable signal), reaps every zombie and exits with the child's
status, 128+N when the child died of signal N.

Modes (``--init`` / ``LAUNCHER_INIT``):

- ``group`` (default): signals go to the command's whole process group, as a terminal's Ctrl-C
  does. A user's command is often a wrapper — ``bash run.sh``, ``torch_xla.launch`` or
  ``xmp.spawn`` with one process per chip — whose real work is in its children; only the
  group reaches all of them within the platform's grace period (a shell waiting for a child
  defers its own SIGTERM until the child ends, which would be SIGKILL's turn).
- ``child``: only the command's own process gets them (``dumb-init --single-child``), for a
  script whose handler must checkpoint while its helper processes (e.g. DataLoader workers,
  which die of SIGTERM) keep running.
- ``exec``: the command replaces the launcher and is PID 1, as before.

The bundled trainers (``python -m trainer.*``) are always exec'd: they install their SIGTERM
handler before their first import (the launcher holds the signal blocked until then), reap
their data workers themselves, and must keep those workers alive until the checkpoint is
written, which a group-forwarding init would not. Where the launcher is not PID 1 (``docker
run --init``, tini, a pod's shared PID namespace), an init already runs: it execs as before.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from launcher.errors import EX_CANNOT_EXECUTE, EX_NOT_FOUND, TrainerExecError

INIT_MODES = ("group", "child", "exec")
DEFAULT_INIT_MODE = "group"
INIT_PROGRAM = "dumb-init"


@dataclass(frozen=True)
class Handover:
    """How the command starts: ``prefix`` (the init's argv, empty for a plain exec) goes in
    front of it; ``note`` says why, for the launcher's log; ``warning`` is set when the user's
    command becomes PID 1 although an init was wanted."""

    prefix: Tuple[str, ...] = ()
    note: str = ""
    warning: str = ""


def plan_handover(mode: str, is_pid1: bool, bundled: bool, init_path: Optional[str]
                  ) -> Handover:
    """Decide between an exec and an init for a command (``bundled``: one of our trainers)."""
    if not is_pid1:
        return Handover(note="exec (the launcher is not PID 1: an init runs already)")
    if bundled:
        return Handover(note="exec (the bundled trainer is PID 1 and handles SIGTERM itself)")
    if mode == "exec":
        return Handover(note="exec (LAUNCHER_INIT=exec: the command is PID 1 and must handle "
                             "SIGTERM itself)")
    if init_path is None:
        return Handover(note="exec", warning="no {} next to {} or on PATH: the command is PID 1 "
                        "and ignores SIGTERM unless it handles it".format(
                            INIT_PROGRAM, sys.executable))
    if mode == "child":
        return Handover((init_path, "--single-child", "--"),
                        "{} (PID 1) runs the command and forwards signals to it alone "
                        "(LAUNCHER_INIT=child)".format(INIT_PROGRAM))
    return Handover((init_path, "--"),
                    "{} (PID 1) runs the command and forwards signals to its process group "
                    "(LAUNCHER_INIT=group)".format(INIT_PROGRAM))


def find_init(environ: Mapping[str, str]) -> Optional[str]:
    """``dumb-init`` next to this interpreter (pip installs it there, in a venv or conda env
    that is not on PATH too), else on the PATH of ``environ``."""
    beside = os.path.join(os.path.dirname(sys.executable), INIT_PROGRAM)
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which(INIT_PROGRAM, path=environ.get("PATH", os.defpath))


def check_executable(program: str, environ: Mapping[str, str]) -> None:
    """Raise the launcher's own 127/126 errors for a command that cannot start, before an init
    is exec'd in front of it (the init would report it in its own words, with its own code)."""
    if os.sep in program:
        found = program if os.path.exists(program) else None
    else:
        found = shutil.which(program, mode=os.F_OK, path=environ.get("PATH", os.defpath))
    if found is None:
        raise TrainerExecError("trainer command not found: {}".format(program),
                               "check LAUNCHER_TRAINER / --trainer and the image's PATH",
                               EX_NOT_FOUND)
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise TrainerExecError("cannot execute the trainer {}: Permission denied".format(found),
                               "check the file's permissions and interpreter line",
                               EX_CANNOT_EXECUTE)


def with_handover(handover: Handover, command: Sequence[str]) -> Tuple[str, ...]:
    return handover.prefix + tuple(command)
