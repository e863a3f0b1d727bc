"""SIGTERM as a flag that the training loop reads between steps.

The handler goes in as the trainer process starts, before torch is imported: in a container
the trainer is PID 1, and the kernel drops signals PID 1 has no handler for, so a SIGTERM
during the seconds of start-up would otherwise be lost and the job would run to the end (or
be SIGKILLed). The launcher execs the trainer with SIGTERM and SIGINT blocked, so one that
arrives before the handler is in waits; ``catch_sigterm`` unblocks them once it is, and a
pending SIGTERM is then delivered to it. ``catch_sigterm`` is idempotent; ``caught()`` also
hands the previous handler back afterwards (for callers that train in-process); ``received``
never touches the device.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Iterator

_received = False


def _on_sigterm(signum: int, frame: object) -> None:
    global _received
    if not _received:
        # Logging may not be configured yet; one plain line, like the trainer's others.
        sys.stderr.write("SIGTERM: stopping at the next step boundary, then checkpointing\n")
        sys.stderr.flush()
    _received = True


def catch_sigterm() -> None:
    """From now on SIGTERM sets the flag instead of ending the process; a SIGTERM that was
    pending (blocked by the launcher across its exec) is delivered now."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


@contextlib.contextmanager
def caught() -> Iterator[None]:
    """SIGTERM sets the flag while inside; the previous handler is restored on the way out."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def received() -> bool:
    return _received
