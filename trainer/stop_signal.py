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
instead of 143; a second Ctrl-C ends the trainer process at once, without that checkpoint
(the wakeup reader counts them, so it does so inside a compile too, and as PID 1, which the
kernel shields from a signal's default action); an in-process caller gets the default
action back after the first.

Between steps the loop may wait for its next batch for as long as a storage outage lasts.
While it does, it waits inside ``interruptible(grace)``: a stop signal then raises
``Stopped`` in the waiting (main) thread, at once for ``grace`` 0, or once ``grace`` seconds
have passed since the signal while it still waits (a slice's hosts need the next step to
agree on where they stop: ``devices.BoundaryVote.input_wait``). The kernel may deliver the
signal to any thread (torch_xla's loader threads, say), and Python runs its handler in the
main thread only once that thread runs again: a main thread blocked in a wait would not. So
the handlers also write to a wakeup pipe (``signal.set_wakeup_fd``), whose reader thread
wakes a waiting main thread with a SIGALRM of its own (``pthread_kill``).

**The trainer process ends at once when a stop has nothing to save.** Until the first step
since the start (or the restore) has been trained (``step_trained``), a checkpoint would only
repeat the one the run started from, so a stop ends the trainer process (``catch_sigterm``'s,
never an in-process caller's) at once: exit 143 (130), no checkpoint, whatever the main thread
is doing. That includes the first step's compile, one C++ call of seconds to minutes in which
Python runs no handler on the main thread: XLA releases the GIL while it compiles, so the
wakeup reader thread, which gets every signal's number through the pipe, ends the process
itself. Once a step has trained, the loop stops at its next step boundary and checkpoints; if
the main thread has neither begun that stop (``stopping``) nor is writing a checkpoint
(``saving``) ``DEADLINE_S`` after the signal (still inside a later compile, say the first
evaluation's), the reader's deadline thread ends the process without a checkpoint at this
step, after the background write in flight (if any) has landed, or ``ENDING_S`` later still
without it (abandoned: the checkpoint before it stays whole): a GKE Spot node kills the pod
about 15 s after its SIGTERM, mid-write otherwise. ``TRAINER_STOP_DEADLINE`` sets
``DEADLINE_S`` (``trainer.cli``) for a platform whose notice is longer. A run that ends on an
error calls ``stopping`` too, so a stop then cannot replace its error's exit code. The hints
name what restarts the run (``resume_with``: ``trainer.restart``).
Either way ``before_ending``'s callbacks run first; the data workers are sent SIGTERM (they
exit at their parent's) and the run's working folders in ``$TMPDIR`` are deleted (what is
left, the next start removes, as after a kill: ``scratch``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator, List, Optional

from trainer import restart

STOPS = (signal.SIGTERM, signal.SIGINT)
EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}  # 128 + the signal, as shells report
# Seconds from a stop signal to the end of a trainer process whose main thread has not begun
# its stop by then (inside a long compile): 2 s less than the 10 s promised (docs/trainers.md),
# for the write in flight to land and the workers to end. ``TRAINER_STOP_DEADLINE`` overrides it.
DEADLINE_S = 8.0
# Seconds past ``DEADLINE_S`` that ending may take: the ``before_ending`` callbacks (the
# background checkpoint write in flight landing) get until then, and one still running is
# abandoned. An abandoned write costs only itself: writes are atomic (``storage``: a local
# rename; a gs:// object appears only once its upload completes), so the checkpoint before it
# stays the newest whole one. DEADLINE_S + ENDING_S is within the 10 s promised.
ENDING_S = 1.5

_received: Optional[int] = None  # the first stop signal's number
_received_at = 0.0  # when (time.monotonic())
_waiting: Optional[float] = None  # inside ``interruptible``: its grace in seconds
_noted = threading.RLock()  # the main thread's handler and the wakeup reader both note a stop
_ends_process = False  # this is the trainer process (``catch_sigterm``): a stop may end it
_trained = False  # a step has been trained since the start (or the restore)
_stopping = False  # the main thread has begun its stop (its checkpoint, or its error)
_saving = False  # the main thread is writing a checkpoint (``saving``)
_interrupts = 0  # SIGINTs the wakeup reader has seen: the second ends the process
# What restarts the run, for the hints of the exits below (``restart.resume_command``):
# until ``resume_with`` names the job dir, the platform's restart or "the same command".
_resume: Optional[str] = restart.resume_command(None, os.environ)
_deadline_set = False
_ending = threading.Lock()  # held by the thread that ends the process
_before_ending: List[Callable[[], None]] = []


class Stopped(Exception):
    """A stop signal ended a wait inside ``interruptible``."""


def _on_stop(signum: int, frame: object) -> None:
    _note(signum)
    if signum == signal.SIGINT and not _ends_process:
        # In-process callers: the second Ctrl-C ends it at once (the trainer process: the
        # wakeup reader, ``_read_wakeups``).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if _waiting is not None:
        _stop_waiting(_waiting)


def _note(signum: int) -> None:
    """Record the first stop signal (in whichever thread sees it first) and act on it: end
    the trainer process at once while nothing has trained, else say where it stops and set
    its deadline."""
    global _received, _received_at
    with _noted:
        first = _received is None
        if first:
            _received, _received_at = signum, time.monotonic()
    if _ends_process and not _trained and not _stopping:
        _end_process("before training resumed: no step had trained since the start, so "
                     "there was nothing to checkpoint",
                     restart.stop_hint(_resume, checkpointed=False))
    if first:
        # Logging may not be configured yet; one plain line, like the trainer's others.
        _write("{}: stopping at the next step boundary, then checkpointing{}\n".format(
            name(), " (Ctrl-C again to stop at once, without one)"
            if signum == signal.SIGINT else ""))
    if _ends_process:
        _set_deadline()


def _set_deadline() -> None:
    """Once: a thread that ends the process ``DEADLINE_S`` after the signal unless the main
    thread has begun its stop by then."""
    global _deadline_set
    with _noted:
        if _deadline_set:
            return
        _deadline_set = True
    threading.Thread(target=_end_at_deadline, name="stop-signal-deadline", daemon=True).start()


def _end_at_deadline() -> None:
    time.sleep(max(0.0, _received_at + DEADLINE_S - time.monotonic()))
    # Writing a checkpoint, the main thread stops at the step boundary right after it.
    if not _stopping and not _saving:
        _end_process("while the trainer was still inside one call (a compile) {:g} s after "
                     "it: no new checkpoint".format(DEADLINE_S),
                     "{}; a Spot VM's notice (about 15 s) leaves no time to wait for the "
                     "call to end (TRAINER_STOP_DEADLINE sets the wait)".format(
                         restart.stop_hint(_resume)))


def _end_process(why: str, hint: str) -> None:
    """End the process now with the stop's exit code, after ``before_ending``'s callbacks,
    the data workers and the working folders; in any thread. A second caller (the main
    thread's handler and the reader at once) waits for the first to end it."""
    if not _ending.acquire(blocking=False):
        threading.Event().wait()
    end_by = _received_at + DEADLINE_S + ENDING_S
    for callback in list(_before_ending):
        _run_until(callback, end_by)
    _end_workers_and_folders()
    _write("Preempted: stopped by {} {}\nHINT: {}\n".format(name(), why, hint))
    os._exit(exit_code())


def _run_until(callback: Callable[[], None], end_by: float) -> None:
    """Run ``callback`` in a thread of its own and wait for it until ``end_by``
    (``time.monotonic()``), no longer: a write retrying against a storage outage must not
    keep a stop past its deadline (the process ends, and the thread with it). Its errors are
    ignored: a cleanup that fails must not keep the process either."""
    def run() -> None:
        try:
            callback()
        except Exception:  # noqa: BLE001 - see above
            pass

    thread = threading.Thread(target=run, name="stop-signal-before-ending", daemon=True)
    thread.start()
    thread.join(max(0.0, end_by - time.monotonic()))


def _end_workers_and_folders() -> None:
    """SIGTERM to every child process this one started (data workers exit at their parent's
    SIGTERM), and the run's working folders in ``$TMPDIR`` deleted. Nothing is imported
    here: the main thread may be halfway through importing these very modules (a stop
    during start-up), and a module that was not imported has started nothing."""
    multiprocessing = sys.modules.get("multiprocessing")
    scratch = sys.modules.get("trainer.scratch")
    try:
        for child in multiprocessing.active_children() if multiprocessing else ():
            try:
                child.terminate()
            except OSError:
                pass
        if scratch is not None:
            scratch.release_all()
            scratch.remove_library_folders()  # torch's own, as ``cli.exit_process`` does
    except Exception:  # noqa: BLE001 - half-imported, say: the next start cleans up instead
        pass


def _write(text: str) -> None:
    """``text`` to stderr in one write, without the lock of ``sys.stderr`` (which the main
    thread may hold while it waits)."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass


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
        stopped = [number for number in numbers if number in stops]
        if stopped:
            # The main thread may be inside a long call (a compile) that runs no handler.
            _note(stopped[0])
        _count_interrupts(numbers.count(int(signal.SIGINT)))
        grace = _waiting
        if grace is None:  # the main thread runs the handler itself, soon
            continue
        if stops.intersection(numbers) or (
                _received is not None and time.monotonic() >= _received_at + grace):
            signal.pthread_kill(main, signal.SIGALRM)


def _count_interrupts(count: int) -> None:
    """The trainer process ends at once at its second Ctrl-C, without a checkpoint."""
    global _interrupts
    _interrupts += count
    if _ends_process and _interrupts >= 2:
        _end_process("twice (Ctrl-C again): at once, without a checkpoint at this step",
                     restart.stop_hint(_resume))


def _install() -> None:
    signal.signal(signal.SIGALRM, _on_alarm)
    _wake_the_main_thread()


def catch_sigterm() -> None:
    """From now on SIGTERM and SIGINT set the flag instead of ending the process (except
    while nothing has trained, or past the deadline: above); one that was pending (blocked by
    the launcher across its exec) is delivered now."""
    global _ends_process
    _ends_process = True
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


def step_trained() -> None:
    """A step has been trained since the start (or the restore): a stop now checkpoints."""
    global _trained
    _trained = True


def stopping() -> None:
    """The main thread has begun its stop (it checkpoints, or raises the stop's error), or
    the run is ending otherwise (an error, its last step trained): neither the deadline nor
    a stop before training ends the process any more (a second Ctrl-C still does)."""
    global _stopping
    _stopping = True


@contextlib.contextmanager
def saving() -> Iterator[None]:
    """While inside, the main thread writes a checkpoint: the deadline does not end the
    process (the loop stops at the step boundary right after it)."""
    global _saving
    _saving = True
    try:
        yield
    finally:
        _saving = False


def resume_with(resume: Optional[str]) -> None:
    """``resume``: what restarts this run (``restart.resume_command``), for the hints."""
    global _resume
    _resume = resume


@contextlib.contextmanager
def before_ending(callback: Callable[[], None]) -> Iterator[None]:
    """While inside, ``callback()`` (any thread; its error is ignored) runs before a stop
    ends the process from the reader or the deadline thread: to let a checkpoint write in
    flight land, say."""
    _before_ending.append(callback)
    try:
        yield
    finally:
        _before_ending.remove(callback)


def name() -> str:
    """The stop signal received ("SIGTERM", "SIGINT"), "SIGTERM" if none was."""
    return signal.Signals(_received or signal.SIGTERM).name


def exit_code() -> int:
    """What a run stopped by the signal received exits with: 143 (SIGTERM), 130 (SIGINT)."""
    return EXIT_CODES.get(_received or signal.SIGTERM, 143)
