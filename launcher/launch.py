"""The launcher's pipeline: environment -> platform -> runtime -> (TPU wait) -> trainer env.

``plan_launch`` does everything except exec; ``launcher.cli.main`` prints the plan and execs
it. Keeping it free of printing and exec makes each step testable with plain values.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from launcher.address import Endpoint, parse_endpoint
from launcher.devices import DeviceCount, count_devices, host_devices, stale_topology
from launcher.errors import ConfigError, TpuApiError, UsageError
from launcher.identity import home_directory, user_name
from launcher.init import DEFAULT_INIT_MODE, Handover, find_init, plan_handover
from launcher.job_env import RUNTIME_VARIABLES, JobEnvironment
from launcher.platforms import detect_platform
from launcher.platforms.base import TPU_NODE, Platform, TpuNodeRef
from launcher.report import format_assignments, format_command, printable
from launcher.runtime import XlaRuntime, detect_runtime
from launcher.runtime_env import RuntimeEnv, check_supported, runtime_env
from launcher.tpu_wait import WaitPolicy, wait_until_ready

DEFAULT_TRAINER = "python -m trainer.mnist"
_PYTHON_NAMES = ("python", "python3")
# The modules that catch SIGTERM before their first import (launcher.exec_command).
SELF_HANDLING_TRAINERS = ("trainer.mnist", "trainer.imagenet", "trainer.lm")


@dataclass(frozen=True)
class LaunchOptions:
    """The launcher's settings, from its command line and ``LAUNCHER_*`` variables."""

    trainer: str = DEFAULT_TRAINER
    trainer_args: Tuple[str, ...] = ()
    command: Tuple[str, ...] = ()
    xla_runtime: Optional[str] = None
    wait: WaitPolicy = WaitPolicy()
    host_root: str = "/"
    dry_run: bool = False
    init: str = DEFAULT_INIT_MODE  # launcher.init.INIT_MODES


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start the trainer, and what to tell the user about it."""

    platform: Platform
    runtime: XlaRuntime
    endpoint: Optional[Endpoint]
    env: RuntimeEnv
    command: Tuple[str, ...]
    devices: Optional[DeviceCount] = None
    stale: Tuple[str, ...] = ()  # inherited topology variables unset for the trainer
    handover: Handover = Handover()  # exec, or an init in front of the command


def plan_launch(options: LaunchOptions, environ: Mapping[str, str], log: Callable[[str], None],
                resolve: Optional[Callable[..., str]] = None,
                is_pid1: Optional[bool] = None) -> LaunchPlan:
    """Detect, check, resolve (TPU node only) and compute the trainer's environment.

    ``resolve(node, policy, log)`` turns a node into ``host:port``; by default
    ``resolve_tpu_node`` (TensorFlow's resolver, waiting). ``is_pid1`` defaults to whether
    this process is PID 1 (``launcher.init`` decides what runs the command).
    """
    command = trainer_command(options)
    job_env = JobEnvironment.from_environ(environ)
    platform = detect_platform(job_env, options.host_root, rehearsal=options.dry_run)
    runtime = detect_runtime(options.xla_runtime)
    check_supported(platform, runtime)  # fail in seconds, before any waiting
    endpoint = None
    if platform.kind == TPU_NODE and platform.tpu_node is not None:
        address = (resolve or resolve_tpu_node)(platform.tpu_node, options.wait, log)
        try:
            endpoint = parse_endpoint(address, "the address of TPU node {}".format(
                platform.tpu_node.name))
        except ConfigError as error:  # the API's answer, not the user's configuration
            raise TpuApiError("the Cloud TPU API answered with an unusable address: {}".format(
                error.message), "check TPU_API_DISCOVERY_URL or report the API's response")
    bundled = is_bundled_trainer(command)
    handover = plan_handover(options.init, os.getpid() == 1 if is_pid1 is None else is_pid1,
                             bundled, find_init(environ))
    devices = (count_devices(platform, runtime, environ, command[1:]) if bundled
               else host_devices(platform, runtime, environ))
    return LaunchPlan(platform, runtime, endpoint, runtime_env(platform, runtime, endpoint),
                      command, devices, stale_topology(environ), handover)


def is_bundled_trainer(command: Sequence[str]) -> bool:
    """Whether ``command`` is one of our trainers (``python -m trainer.mnist`` or
    ``trainer.imagenet``), which install their SIGTERM handler first thing and unblock SIGTERM
    and SIGINT once it is in (``trainer.stop_signal``). The other ``trainer.*`` modules (the
    data tools) install none: they run like any other command."""
    return (len(command) > 2 and command[1] == "-m" and command[2] in SELF_HANDLING_TRAINERS
            and os.path.basename(command[0]).startswith("python"))


def environment_changes(plan: LaunchPlan, environ: Mapping[str, str]
                        ) -> Tuple[Tuple[Tuple[str, str], ...], Tuple[str, ...]]:
    """How the trainer's environment differs from ``environ``: (assignments, names to unset).

    A runtime variable set blank counts as unset (docs/launcher.md), so it is unset for the
    trainer too: a torch_xla that tests for its presence would take ``PJRT_DEVICE=`` as a
    choice of PJRT.
    Stale topology variables are unset (``launcher.devices``). Kept settings reach the trainer
    as the launcher read and reported them (``PJRT_DEVICE`` trimmed and upper-cased); the
    exports come on top."""
    unset = tuple(name for name in RUNTIME_VARIABLES
                  if name in environ and not environ[name].strip()) + plan.stale
    kept = tuple((name, value) for name, value in plan.env.kept if environ.get(name) != value)
    return kept + plan.env.exports + user_name(environ) + home_directory(environ), unset


def resolve_tpu_node(node: TpuNodeRef, policy: WaitPolicy, log: Callable[[str], None]) -> str:
    """Wait with TensorFlow's ``TPUClusterResolver`` until the node is usable."""
    from launcher.tpu_api import NodeProbe  # imports TensorFlow: only on this path

    probe = NodeProbe(node)
    return wait_until_ready(probe.poll, node.name, policy, log)


def trainer_command(options: LaunchOptions) -> Tuple[str, ...]:
    """The argv to exec: an explicit command after ``--``, else the trainer plus its args.

    A leading ``python``/``python3`` means the launcher's own interpreter, so the trainer runs
    in the same environment (virtual env or image) as the launcher.
    """
    if options.command:
        command: List[str] = list(options.command)
        source = "the command after --"
    else:
        source = "LAUNCHER_TRAINER / --trainer"
        try:
            command = shlex.split(options.trainer) + list(options.trainer_args)
        except ValueError as error:
            raise UsageError("{} is not a valid command ({})".format(source, error),
                             'use e.g. LAUNCHER_TRAINER="python -m trainer.imagenet"')
    if not command or not command[0].strip():
        raise UsageError("{} is empty".format(source),
                         'use e.g. LAUNCHER_TRAINER="python -m trainer.mnist"')
    if command[0] in _PYTHON_NAMES:
        command[0] = sys.executable
    first = options.trainer_args[0] if options.trainer_args else ""
    if not options.command and first and not first.startswith("-") and \
            is_bundled_trainer(command):
        # The bundled trainers take flags only: a word here is a command whose "--" was
        # forgotten (``python -m launcher python train.py``), which would run the trainer.
        raise UsageError(
            "{!r} is not a flag of the trainer ({}): a command of your own goes after "
            "--".format(printable(first), options.trainer),
            "python -m launcher -- {} (the launcher's options, if any, before the --)".format(
                format_command(options.trainer_args)))
    return tuple(command)


def describe(plan: LaunchPlan) -> Sequence[str]:
    """The summary lines logged before the trainer starts."""
    lines = ["platform: {}".format(plan.platform.description)]
    lines.extend("{}: {}".format(label, value) for label, value in plan.platform.facts)
    if plan.endpoint is not None:
        lines.append("TPU address: {}".format(plan.endpoint))
    lines.append("XLA runtime: {}".format(plan.runtime))
    lines.append("exported: {}".format(format_assignments(plan.env.exports)))
    if plan.env.kept:
        lines.append("kept as set by the user: {}".format(format_assignments(plan.env.kept)))
    if plan.devices is not None:
        lines.append("devices: {}".format(plan.devices.describe()))
    if plan.stale:
        lines.append("unset (stale topology, the trainer runs one process per host): {}".format(
            ", ".join(plan.stale)))
    lines.extend("warning: {}".format(warning) for warning in plan.platform.warnings)
    if plan.handover.warning:
        lines.append("warning: {}".format(plan.handover.warning))
    lines.append("trainer: {}".format(format_command(plan.command)))
    lines.append("hand-over: {}".format(plan.handover.note))
    return lines
