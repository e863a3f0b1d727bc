"""The trainers' shared ``main`` plumbing: logging, absl flag parsing (``--job-dir`` spelling
accepted), and the one place that turns errors into a one-line message and an exit code.

Two phases, so that a trainer answers ``--help`` or a bad flag in a fraction of a second:
``parse_main`` (flags, ``TRAINER_*`` variables, the config's checks) imports neither torch
nor torch_xla; the entry modules call it before their framework imports, and ``run_parsed``
after them. The checks that need a device or a model (``--devices`` against the runtime's,
the model's first forward pass) belong to the run.

``--help`` / ``-h`` print the trainer's flags, ``--helpfull`` every flag defined (absl's
own included), and exit 0 without training.

Exit codes: 0 done; 64 bad flag; 65 bad or missing data; 70 a data worker died (killed, or
crashed in native code); 74 job dir not readable/writable; 78 the container's ``/dev/shm`` is
too small for the data workers (``docker run --shm-size``); 130 stopped by Ctrl-C
(SIGINT), 143 by SIGTERM, after writing a checkpoint, or at once without one when nothing
had trained yet (the platform restarts and it resumes).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from absl import flags

from trainer import scratch, stop_signal, storage
from trainer.config import FLAGS, TrainConfig, config_from_flags, normalize_argv
from trainer.console import configure_logging, report
from trainer.errors import EX_USAGE, TrainerError


def run_main(define_flags: Callable[..., None], run: Callable[..., Dict[str, Any]],
             argv: Optional[List[str]] = None,
             fixed: Optional[Dict[str, Any]] = None) -> int:
    """``parse_main`` then, with a config, ``run_parsed``: the exit code."""
    parsed = parse_main(define_flags, argv, fixed)
    return parsed if isinstance(parsed, int) else run_parsed(run, parsed)


def parse_main(define_flags: Callable[..., None], argv: Optional[List[str]] = None,
               fixed: Optional[Dict[str, Any]] = None) -> Union[TrainConfig, int]:
    """Define and parse flags (``argv``, program name first; default ``sys.argv``) and the
    trainer's environment variables into the config (``fixed``: config fields that are no flag
    of this trainer), or the exit code when there is nothing to run: 0 after ``--help``, a
    usage error's code after its one line. Needs neither torch nor torch_xla (nor imports
    them), so the trainers answer a typo before loading a framework."""
    configure_logging()
    define_flags()
    argv = list(sys.argv if argv is None else argv)
    help_text = requested_help(argv, FLAGS, describe=define_flags.__globals__.get("__doc__"))
    if help_text is not None:
        print(help_text)
        return 0
    try:
        _configure_retries_and_deadlines(os.environ)
        _configure_shared_memory(os.environ)
        return parse_config(argv, fixed=fixed)
    except TrainerError as error:
        return report(error)


def run_parsed(run: Callable[..., Dict[str, Any]], config: TrainConfig) -> int:
    """``run(config, paths=...)`` (the one place that reads Vertex's ``AIP_*`` dirs from the
    environment), mapping its errors to one line and an exit code."""
    from trainer.outputs import OutputPaths

    try:
        paths = OutputPaths.resolve(config.job_dir, os.environ)
        _size_host_threads()
        run(config, paths=paths)
    except TrainerError as error:
        return report(error)
    except RuntimeError as error:
        from trainer.data.loader import worker_death

        died = worker_death(error)
        if died is None:
            raise
        return report(died)
    return 0


def _size_host_threads() -> None:
    """The trainer process's torch pools, once, before anything runs (``host_threads``)."""
    from trainer import host_threads, xla
    from trainer.host_resources import host_cores

    host_threads.configure(host_cores(), xla.device_type())


HELP_FLAGS = ("-h", "--help", "-help", "--helpshort")
HELP_FULL_FLAGS = ("--helpfull", "-helpfull")


def requested_help(argv: List[str], flag_values: Any = FLAGS,
                   describe: Optional[str] = None) -> Optional[str]:
    """The help that ``argv`` (program name first) asks for, else None: with ``--help`` or
    ``-h``, the first paragraph of ``describe`` (the trainer's docstring) and the flags the
    trainer package defines; with ``--helpfull``, every flag in ``flag_values``. absl's own
    help flags come with ``absl.app``, which the trainers do not run (their ``main`` is
    theirs), so without this ``--help`` was an unknown flag."""
    wanted = {arg.split("=", 1)[0] for arg in argv[1:]}
    if not wanted & set(HELP_FLAGS + HELP_FULL_FLAGS):
        return None
    intro = (describe or "").replace("``", "").strip().split("\n\n")[0]
    lines = [" ".join(intro.split()), ""] if intro else []
    lines.append("Flags (--name=value; --name-with-dashes is accepted too):")
    if wanted & set(HELP_FULL_FLAGS):
        lines.append(flag_values.get_help())
    else:
        # absl files a script's own flags under its path (``trainer.train``'s callers).
        lines.extend(flag_values.module_help(module) for module in
                     sorted(flag_values.flags_by_module_dict())
                     if module.split(".")[0] in ("trainer", "__main__")
                     or module == sys.argv[0])
    return "\n".join(lines)


def parse_early(define_flags: Callable[..., None]) -> TrainConfig:
    """A trainer process's flags, parsed before its framework imports (right after it caught
    SIGTERM): the garbage collector paused until those imports are done
    (``trainer.startup``); after ``--help`` or a usage error's line the process ends here."""
    from trainer import startup

    startup.pause_collector()
    parsed = parse_main(define_flags)
    if isinstance(parsed, int):
        exit_process(parsed)
    return parsed


def exit_process(code: int) -> None:
    """End the trainer process with ``code`` once ``main`` has returned: flush the log and the
    standard streams, then leave without the interpreter's teardown. With torch_xla loaded
    that teardown takes about a second and has nothing left to do: every output was written
    and closed before ``main`` returned; what it would delete in ``$TMPDIR`` is deleted here."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    scratch.remove_library_folders()
    os._exit(code)


def parse_config(argv: List[str], flag_values: Any = FLAGS,
                 fixed: Optional[Dict[str, Any]] = None) -> TrainConfig:
    """The ``TrainConfig`` that ``argv`` (program name first) asks for, from flags already
    defined in ``flag_values`` (and ``fixed`` fields); anything unusable is a
    ``TrainerError`` (exit 64)."""
    try:
        positional = flag_values(normalize_argv(argv, flag_values))[1:]
    except flags.Error as error:
        raise TrainerError(str(error).splitlines()[0] if str(error) else repr(error),
                           "see --helpfull for the flags", EX_USAGE)
    if positional:  # the trainers take flags only: a stray word is a mistake, not ignorable
        raise TrainerError("unexpected argument {!r}".format(positional[0]),
                           "pass options as --name=value; see --helpfull", EX_USAGE)
    return config_from_flags(flag_values, **(fixed or {}))


def _configure_retries_and_deadlines(environ: Mapping[str, str]) -> None:
    """``TRAINER_GCS_RETRY_DEADLINE``: seconds one GCS operation keeps retrying (positive);
    ``TRAINER_GCS_REFUSAL_RETRY``: seconds after a process's first GCS request in which a
    refusal (401/403, a missing bucket) is still retried (0: final at once);
    ``TRAINER_STOP_DEADLINE``: seconds from a stop signal to the end of a process still
    inside one long call (``stop_signal.DEADLINE_S``)."""
    deadline = _seconds(environ, "TRAINER_GCS_RETRY_DEADLINE", "300", zero_allowed=False)
    if deadline is not None:
        storage.RETRY_DEADLINE_S = deadline
    refusal = _seconds(environ, "TRAINER_GCS_REFUSAL_RETRY", "20", zero_allowed=True)
    if refusal is not None:
        storage.REFUSAL_RETRY_S = refusal
    deadline = _seconds(environ, "TRAINER_STOP_DEADLINE", "8", zero_allowed=False)
    if deadline is not None:
        stop_signal.DEADLINE_S = deadline


def _seconds(environ: Mapping[str, str], name: str, example: str,
             zero_allowed: bool) -> Optional[float]:
    """The finite number of seconds in ``environ[name]``, None when unset or empty; anything
    else (a word, nan, inf, a negative number, zero where ``zero_allowed`` is False) is a
    ``TrainerError`` (exit 64) naming the variable."""
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not (0 <= seconds if zero_allowed else 0 < seconds) or seconds == float("inf"):
        raise TrainerError("{}={!r} is not a {} number of seconds".format(
            name, text, "non-negative" if zero_allowed else "positive"),
            "e.g. {}={}".format(name, example), EX_USAGE)
    return seconds


def _configure_shared_memory(environ: Mapping[str, str]) -> None:
    """``TRAINER_SHM_DIR``: the directory checked for the data workers' shared memory instead
    of ``/dev/shm`` (a hook for tests: a small filesystem stands in for a small container)."""
    path = environ.get("TRAINER_SHM_DIR", "").strip()
    if path:
        from trainer.data import shared_memory

        shared_memory.SHM_DIR = path
