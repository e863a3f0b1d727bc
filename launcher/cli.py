"""``python -m launcher [launcher options] [trainer args...]`` or ``[options] -- COMMAND ...``

The container's entrypoint. It reads the platform's environment, works out the XLA device,
waits for a legacy TPU node when there is one, exports torch_xla's runtime variables and
``exec``s the trainer, which then replaces the launcher (it becomes PID 1 and receives the
platform's signals directly); a command of your own runs under an init (``launcher.init``),
in the signal state ``launcher.exec_command`` describes.

Arguments: launcher options are recognised only at the front. The first other argument starts
the trainer's arguments, which are passed on unchanged and in order (``--job-dir=gs://...``,
``--lr=0.1``, ...) to the trainer command (``--trainer``, default ``python -m trainer.mnist``).
A ``--`` in place of the next launcher option ends the launcher options: if the next argument
is a command (``-- python my_train.py ...``) it replaces the trainer command, otherwise
(``-- --lr=0.1``) the rest are arguments for the default trainer.

Every option can be given as an environment variable (the image sets them with ``ENV``, since
the platform's job arguments replace the Docker ``CMD``); the command line wins.

Exit codes are listed in ``launcher.errors``; after the exec the exit code is the trainer's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import traceback
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import EX_SOFTWARE, Interrupted, LauncherError, UsageError
from launcher.exec_command import exec_command, find_program
from launcher.init import DEFAULT_INIT_MODE, INIT_MODES, with_handover
from launcher.launch import (
    DEFAULT_TRAINER,
    LaunchOptions,
    LaunchPlan,
    describe,
    environment_changes,
    is_bundled_trainer,
    plan_launch,
)
from launcher.report import format_command, printable, shell_exports
from launcher.runtime import RUNTIMES
from launcher.tpu_wait import WaitPolicy

# (flag, environment variable, help). Every launcher option takes a value except --dry-run.
_OPTIONS = (
    ("--trainer", "LAUNCHER_TRAINER",
     "trainer command, split like a shell would (default: %r)" % DEFAULT_TRAINER),
    ("--xla-runtime", "LAUNCHER_XLA_RUNTIME",
     "force the torch_xla runtime, %s (default: from the installed torch_xla)" % "|".join(
         RUNTIMES)),
    ("--tpu-wait-timeout", "LAUNCHER_TPU_WAIT_TIMEOUT",
     "seconds to wait for a TPU node to become usable (default: %.0f)" % WaitPolicy.deadline_s),
    ("--tpu-lost-grace", "LAUNCHER_TPU_LOST_GRACE",
     "seconds a PREEMPTED/TERMINATED node may take to recover (default: %.0f)"
     % WaitPolicy.lost_grace_s),
    ("--host-root", "LAUNCHER_HOST_ROOT",
     "where to look for /sys and /dev when detecting TPU chips (default: /)"),
    ("--init", "LAUNCHER_INIT",
     "how a command of your own runs: %s (default: %s; group and child run it under "
     "dumb-init, forwarding signals to its process group or to it alone; exec makes it "
     "replace the launcher, PID 1 in a container)" % ("|".join(INIT_MODES), DEFAULT_INIT_MODE)),
)
_FLAG_OPTIONS = ("--dry-run",)
_LOG_PREFIX = "launcher: "


def main(argv: Optional[Sequence[str]] = None, environ: Optional[Mapping[str, str]] = None,
         execvpe: Callable[..., None] = os.execvpe) -> int:
    """Run the launcher; returns an exit code only when it does not exec the trainer."""
    environ = dict(os.environ if environ is None else environ)  # the one read of os.environ
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            options = parse_command_line(argv, environ)
        except SystemExit as shown:  # -h/--help: argparse printed the help and wants out
            return int(shown.code or 0)
        # The handlers stay in until the exec, where launcher.exec_command takes over.
        with interrupt_on_signals():
            plan = plan_launch(options, environ, log)
            for line in describe(plan):
                log(line)
            if options.dry_run:
                print_dry_run(plan, environ)
                return 0
            exec_trainer(plan, environ, execvpe)
        return 0
    except (LauncherError, Interrupted) as error:
        log("{}: {}".format(type(error).__name__, error.message))
        if error.hint:
            log("HINT: {}".format(error.hint))
        return error.exit_code
    except Exception as error:  # a bug: still one line, unless debugging is asked for
        if environ.get("LAUNCHER_DEBUG"):
            traceback.print_exc()
        log("internal error: {}: {}".format(type(error).__name__, " ".join(str(error).split())))
        log("HINT: this is a launcher bug; rerun with LAUNCHER_DEBUG=1 and report the output")
        return EX_SOFTWARE


def log(line: str) -> None:
    """One line of the launcher's log on stderr, whatever characters ``line`` holds."""
    print(_LOG_PREFIX + printable(line), file=sys.stderr, flush=True)


def parse_command_line(argv: Sequence[str], environ: Mapping[str, str]) -> LaunchOptions:
    """Turn argv and ``LAUNCHER_*`` variables into validated ``LaunchOptions``."""
    launcher_args, trainer_args, command = split_argv(argv)
    parsed = vars(_parser().parse_args(launcher_args))

    def setting(flag: str, env_name: str) -> Tuple[Optional[str], str]:
        value = parsed[flag.lstrip("-").replace("-", "_")]
        if isinstance(value, list):  # argparse gives --trainer=-- as a list of its words
            value = " ".join(value)
        if value is not None:
            if not value.strip():  # given on purpose, so never silently the default
                raise UsageError("{} is empty".format(flag),
                                 "give it a value, or leave it out for the default")
            if "\0" in value:  # no path, name or number holds one (os calls would raise)
                raise UsageError("{} contains a NUL character".format(flag),
                                 "pass the value as plain text")
            return value, flag
        return (environ.get(env_name) or None), env_name

    values = {flag: setting(flag, env_name) for flag, env_name, _ in _OPTIONS}
    runtime, runtime_source = values["--xla-runtime"]
    if runtime is not None and runtime.lower() not in RUNTIMES:
        raise UsageError("{}={!r} is not a runtime".format(runtime_source, runtime),
                         "use one of: {}".format(", ".join(RUNTIMES)))
    init, init_source = values["--init"]
    if init is not None and init.strip().lower() not in INIT_MODES:
        raise UsageError("{}={!r} is not an init mode".format(init_source, init),
                         "use one of: {}".format(", ".join(INIT_MODES)))
    defaults = WaitPolicy()
    return LaunchOptions(
        trainer=values["--trainer"][0] or DEFAULT_TRAINER,
        trainer_args=tuple(trainer_args),
        command=tuple(command),
        xla_runtime=runtime.lower() if runtime else None,
        wait=WaitPolicy(
            deadline_s=_seconds(*values["--tpu-wait-timeout"], default=defaults.deadline_s),
            lost_grace_s=_seconds(*values["--tpu-lost-grace"], default=defaults.lost_grace_s)),
        host_root=values["--host-root"][0] or "/",
        dry_run=parsed["dry_run"],
        init=init.strip().lower() if init else DEFAULT_INIT_MODE,
    )


def split_argv(argv: Sequence[str]) -> Tuple[List[str], List[str], List[str]]:
    """Split into (launcher options, trainer args, explicit trainer command)."""
    takes_value = {flag for flag, _, _ in _OPTIONS}
    known = takes_value | set(_FLAG_OPTIONS) | {"-h", "--help"}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            rest = list(argv[index + 1:])
            # A command cannot start with "-": "-- --lr=0.1" passes args to the default trainer.
            if rest and rest[0].startswith("-"):
                return list(argv[:index]), rest, []
            return list(argv[:index]), [], rest
        name = arg.split("=", 1)[0]
        if name not in known:
            break
        index += 2 if (name in takes_value and "=" not in arg) else 1
    return list(argv[:index]), list(argv[index:]), []


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message, "see `python -m launcher --help`")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m launcher", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="Exit codes: see docs/launcher.md.")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the export lines and the trainer command instead of "
                             "running it (eval \"$(python -m launcher --dry-run)\")")
    for flag, env_name, help_text in _OPTIONS:
        parser.add_argument(flag, metavar=env_name.replace("LAUNCHER_", ""),
                            help="{}; env {}".format(help_text, env_name))
    return parser


def _seconds(text: Optional[str], source: str, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError("{}={!r} is not a positive number of seconds".format(source, text),
                         "use e.g. {}=1200".format(source))
    return value


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGINT into ``Interrupted`` while preparing, so a cancelled job ends now."""

    def handler(signum: int, frame: object) -> None:
        raise Interrupted(signum, signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, handler)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def print_dry_run(plan: LaunchPlan, environ: Mapping[str, str]) -> None:
    """``unset`` and ``export`` lines to ``eval`` in a shell, and the trainer command as a
    comment."""
    assignments, unset = environment_changes(plan, environ)
    for name in unset:
        print("unset {}".format(name))
    for line in shell_exports(assignments):
        print(line)
    print("# trainer: {}".format(format_command(plan.command)))
    sys.stdout.flush()


def exec_trainer(plan: LaunchPlan, environ: Mapping[str, str],
                 execvpe: Callable[..., None]) -> None:
    """Replace this process with the trainer (never a shell); returns only on failure."""
    assignments, unset = environment_changes(plan, environ)
    env: Dict[str, str] = {name: value for name, value in environ.items() if name not in unset}
    env.update(assignments)
    if plan.handover.prefix:  # the init would report a missing command in its own words
        find_program(plan.command[0], env)
    sys.stdout.flush()
    sys.stderr.flush()
    exec_command(with_handover(plan.handover, plan.command), env,
                 installs_handler=is_bundled_trainer(plan.command), execvpe=execvpe)


def main_entry() -> None:
    """Process entry point (``python -m launcher``, ``tpu-launcher``).

    Reaching here means the trainer was not exec'd: an error or a dry run. Exit without the
    interpreter's teardown, which after importing TensorFlow takes about a second, so that a
    cancelled job ends at once.
    """
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
