"""What runs the command after the hand-over: the command itself, or an init with the command
as its child.

In a container the entrypoint is PID 1, and the kernel drops every signal PID 1 has no handler
for: a training script without a SIGTERM handler, exec'd as PID 1, ignores ``docker stop``
(and the platform's preemption notice) until SIGKILL ends it a grace period later, and nothing
reaps the zombies of the processes it leaves behind. So for a command of the user's own the
launcher execs ``dumb-init`` (pinned in the images, a small C program of Yelp's) with the
command as its child: dumb-init forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
(every catchable signal), reaps its children and exits with the child's status, 128+N when the
child died of signal N.

It does so when the launcher is not PID 1 too (``docker run --init``, whose tini signals only
its own child unless given ``-g``; a pod sharing its PID namespace): there the init in front
signals the launcher's process alone, so a wrapper's children would never hear of a SIGTERM.
dumb-init forwards the same way when it is not PID 1 (it ``sigwait``s for every signal, PID 1
or not); orphans then go to the real PID 1, which reaps them.

Modes (``--init`` / ``LAUNCHER_INIT``):

- ``group`` (default): signals go to the command's whole process group, as a terminal's Ctrl-C
  does. A user's command is often a wrapper (``bash run.sh``, ``torch_xla.launch`` or
  ``xmp.spawn`` with one process per chip) whose real work is in its children; only the group
  reaches all of them. A shell without a trap dies of SIGTERM at once, even while it waits for
  a child, and dumb-init exits with its child (SIGTERMing the rest), so the children's handlers
  get no time unless the wrapper ``exec``s its last command or traps SIGTERM (a shell runs its
  trap only once the child it waits for has ended).
- ``child``: only the command's own process gets them (``dumb-init --single-child``), for a
  script whose handler must checkpoint while its helper processes (e.g. DataLoader workers,
  which die of SIGTERM) keep running.
- ``exec``: the command replaces the launcher (and is PID 1 when the launcher was).

The bundled trainers (``python -m trainer.mnist``, ``trainer.imagenet``, ``trainer.lm``) are
always exec'd: they install their SIGTERM handler before their first import (the launcher
holds the signal blocked until then), reap their data workers themselves, and must keep those
workers alive until the checkpoint is written, which a group-forwarding init would not. Every
other command, the data tools ``python -m trainer.data.*`` included, is a command like the
user's own.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

INIT_MODES = ("group", "child", "exec")
DEFAULT_INIT_MODE = "group"
INIT_PROGRAM = "dumb-init"


@dataclass(frozen=True)
class Handover:
    """How the command starts: ``prefix`` (the init's argv, empty for a plain exec) goes in
    front of it; ``note`` says why, for the launcher's log; ``warning`` is set when the command
    runs without the init that was wanted."""

    prefix: Tuple[str, ...] = ()
    note: str = ""
    warning: str = ""


def plan_handover(mode: str, is_pid1: bool, bundled: bool, init_path: Optional[str]
                  ) -> Handover:
    """Decide between an exec and an init for a command (``bundled``: one of our trainers)."""
    if bundled:
        return Handover(note="exec (the bundled trainer handles SIGTERM itself)")
    if mode == "exec":
        return Handover(note="exec (LAUNCHER_INIT=exec: the command must handle SIGTERM "
                             "itself)")
    if init_path is None:
        return Handover(note="exec", warning="no {} next to {} or on PATH: {}".format(
            INIT_PROGRAM, sys.executable,
            "the command is PID 1 and ignores SIGTERM unless it handles it" if is_pid1 else
            "signals reach the command's own process alone, not its children"))
    where = "(PID 1)" if is_pid1 else "(not PID 1)"
    if mode == "child":
        return Handover((init_path, "--single-child", "--"),
                        "{} {} runs the command and forwards signals to it alone "
                        "(LAUNCHER_INIT=child)".format(INIT_PROGRAM, where))
    return Handover((init_path, "--"),
                    "{} {} runs the command and forwards signals to its process group "
                    "(LAUNCHER_INIT=group)".format(INIT_PROGRAM, where))


def find_init(environ: Mapping[str, str]) -> Optional[str]:
    """``dumb-init`` next to this interpreter (pip installs it there, in a venv or conda env
    that is not on PATH too), else on the PATH of ``environ``."""
    beside = os.path.join(os.path.dirname(sys.executable), INIT_PROGRAM)
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which(INIT_PROGRAM, path=environ.get("PATH", os.defpath))


def with_handover(handover: Handover, command: Sequence[str]) -> Tuple[str, ...]:
    return handover.prefix + tuple(command)
