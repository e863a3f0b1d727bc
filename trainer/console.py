"""What the trainers and the data tools print: progress lines on the "trainer" logger to
stdout, and an error as one line and its hint on stderr.

A leaf module (the standard library and ``trainer.errors`` only), so that every entry point
(the trainers' ``trainer.cli``, ``trainer.data.plan``, ``make_shards``, ``reindex``) takes it
from below without importing another's plumbing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, List, Optional

from trainer.errors import EX_USAGE, TrainerError


class _CurrentStdout(logging.StreamHandler):
    """Writes to ``sys.stdout`` as it is at each line, not as it was when configured: a
    caller that redirects stdout later (pytest's capture, a notebook) gets the lines, and a
    stream closed since is never written to ("--- Logging error ---" on stderr)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging() -> None:
    """Progress lines to stdout. Configured on the "trainer" logger itself, because torch_xla
    may have configured the root logger already (and basicConfig(force=) needs 3.8)."""
    logger = logging.getLogger("trainer")
    if not logger.handlers:
        handler = _CurrentStdout()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def report(error: TrainerError) -> int:
    """Print ``error`` as one line and its hint; returns its exit code."""
    sys.stdout.flush()
    print("{}: {}".format(type(error).__name__, error.message), file=sys.stderr)
    if error.hint:
        print("HINT: {}".format(error.hint), file=sys.stderr)
    return error.exit_code


def run_tool(parser: argparse.ArgumentParser, argv: Optional[List[str]],
             body: Callable[[argparse.Namespace], None]) -> int:
    """A data tool's ``main``: its log lines configured, ``argv`` parsed (a bad option:
    argparse's usage line, exit 64; ``--help``: 0), then ``body(args)``, whose
    ``TrainerError`` becomes its one line and exit code."""
    configure_logging()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse printed its usage line and the error
        return EX_USAGE if exit_.code else 0
    try:
        body(args)
    except TrainerError as error:
        return report(error)
    return 0
