"""SIGTERM and SIGINT (Ctrl-C) as a flag that the training loop reads between steps.

The handler goes in as the trainer process starts, before torch is imported: in a container
the trainer is PID 1, and the kernel drops signals PID 1 has no handler for, so a SIGTERM
during the seconds of start-up would otherwise be lost and the job would run to the end (or
be SIGKILLed). The launcher execs the trainer with SIGTERM and SIGINT blocked, so one that
arrives before the handler is in waits; ``catch_sigterm`` unblocks them once it is, and a
pending one is then delivered to it. ``catch_sigterm`` is idempotent; ``caught()`` also
hands the previous handlers back afterwards (for callers that train in-process); ``received``
never touches the device.

Ctrl-C is a stop like SIGTERM (a checkpoint at the step reached), reported with exit 130
instead of 143; a second Ctrl-C ends the process at once (the default action is back after
the first).

Between steps the loop may wait for its next batch for as long as a storage outage lasts.
While it does, it waits inside ``interruptible(grace)``: a stop signal then raises
``Stopped`` in the waiting (main) thread, at once for ``grace`` 0, or once ``grace`` seconds
have passed since the signal while it still waits (a slice's hosts need the next step to
agree on where they stop: ``devices.BoundaryVote.input_wait``). The kernel may deliver the
signal to any thread (torch_xla's loader threads, say), and Python runs its handler in the
main thread only once that thread runs again: a main thread blocked in a wait would not. So
the handlers also write to a wakeup pipe (``signal.set_wakeup_fd``), whose reader thread
wakes a waiting main thread with a SIGALRM of its own (``pthread_kill``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Iterator, Optional

STOPS = (signal.SIGTERM, signal.SIGINT)
EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal, as shells report

_received: Optional[int] = None  # the first stop signal's number
_received_at = 0.0  # when (time.monotonic())
_waiting: Optional[float] = None  # inside ``interruptible``: its grace in seconds


class Stopped(Exception):
    """A stop signal ended a wait inside ``interruptible``."""


def _on_stop(signum: int, frame: object) -> None:
    global _received, _received_at
    if _received is None:
        _received, _received_at = signum, time.monotonic()
        # Logging may not be configured yet; one plain line, like the trainer's others.
        sys.stderr.write("{}: stopping at the next step boundary, then checkpointing{}\n".format(
            name(), " (Ctrl-C again to stop at once, without one)"
            if signum == signal.SIGINT else ""))
        sys.stderr.flush()
    if signum == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the second Ctrl-C ends it at once
    if _waiting is not None:
        _stop_waiting(_waiting)


def _on_alarm(signum: int, frame: object) -> None:
    """The grace of a wait has passed, or the wakeup reader woke the waiting thread."""
    if _waiting is not None and _received is not None:
        _stop_waiting(_waiting)


def _stop_waiting(grace: float) -> None:
    """Raise ``Stopped`` now if ``grace`` has passed since the signal, else set an alarm for
    when it will have. A wait raises once: it is marked over first, so that an alarm still
    on its way finds no wait (and cannot raise again, in the wait's cleanup or later)."""
    global _waiting
    left = _received_at + grace - time.monotonic()
    if left <= 0:
        _waiting = None
        raise Stopped()
    signal.setitimer(signal.ITIMER_REAL, left)


_wakeups: Optional[int] = None  # the wakeup pipe's read end, once set up


def _wake_the_main_thread() -> None:
    """Set up the wakeup pipe and its reader (once; main thread only)."""
    global _wakeups
    if _wakeups is not None:
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write)
    _wakeups = read
    main = threading.main_thread().ident
    threading.Thread(target=_read_wakeups, args=(read, main), name="stop-signal-wakeups",
                     daemon=True).start()


def _read_wakeups(read: int, main: int) -> None:
    """Wake a waiting main thread: at once for a stop signal; for an alarm only once the
    wait's grace has passed (the grace timer's alarm, which the kernel may have given to
    another thread). Every alarm writes to the pipe too, this thread's own included:
    answering each of those with another alarm kept some 10,000 a second going for as long as
    the wait lasted."""
    stops = {int(number) for number in STOPS}
    while True:
        numbers = os.read(read, 64)  # one byte per signal: its number
        if not numbers:
            return
        grace = _waiting
        if grace is None:  # the main thread runs the handler itself, soon
            continue
        if stops.intersection(numbers) or (
                _received is not None and time.monotonic() >= _received_at + grace):
            signal.pthread_kill(main, signal.SIGALRM)


def _install() -> None:
    signal.signal(signal.SIGALRM, _on_alarm)
    _wake_the_main_thread()


def catch_sigterm() -> None:
    """From now on SIGTERM and SIGINT set the flag instead of ending the process; one that
    was pending (blocked by the launcher across its exec) is delivered now."""
    for number in STOPS:
        signal.signal(number, _on_stop)
    _install()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPS))


@contextlib.contextmanager
def caught() -> Iterator[None]:
    """The stop signals set the flag while inside; the previous handlers are restored on the
    way out."""
    previous = {number: signal.signal(number, _on_stop) for number in STOPS}
    _install()
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextlib.contextmanager
def interruptible(grace: float = 0.0) -> Iterator[None]:
    """A wait (main thread only) that a stop signal ends with ``Stopped``: once ``grace``
    seconds have passed since the signal (0: at once), counting one that arrived before
    the wait began."""
    global _waiting
    if _received is not None:
        _stop_waiting(grace)
    _waiting = grace
    try:
        yield
    finally:
        _waiting = None
        if grace > 0 and _received is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)


def received() -> bool:
    return _received is not None


def name() -> str:
    """The stop signal received ("SIGTERM", "SIGINT"), "SIGTERM" if none was."""
    return signal.Signals(_received or signal.SIGTERM).name


def exit_code() -> int:
    """What a run stopped by the signal received exits with: 143 (SIGTERM), 130 (SIGINT)."""
    return EXIT_CODES.get(_received or signal.SIGTERM, 143)
