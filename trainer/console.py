"""What the trainers and the data tools print: progress lines on the "trainer" logger to
stdout, and an error as one line and its hint on stderr.

A leaf module (the standard library and ``trainer.errors`` only), so that every entry point
(the trainers' ``trainer.cli``, ``trainer.data.plan``, ``make_shards``, ``reindex``) takes it
from below without importing another's plumbing.
"""

from __future__ import annotations

import logging
import sys

from trainer.errors import TrainerError


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
