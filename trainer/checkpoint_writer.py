"""``BackgroundWriter``: checkpoints serialised and uploaded off the training loop's path.

The loop copies the state to host memory (``checkpoints.to_cpu``) and hands the write to this
writer, which runs it in a thread of its own; training goes on meanwhile. At most one write is
in flight: handing over the next one first waits for the one before, so host memory holds at
most two copies of the state and checkpoints land in step order.

A failed write never prints a thread's traceback: its error is kept and raised in the
training thread (a ``TrainerError`` as it is, anything else as a ``StorageError``, exit 74),
where ``main`` turns it into one line and an exit code. The loop asks ``failed()`` after
every step, so a failure stops the run within a step rather than a checkpoint interval
later; the state it stops at is still handed to ``submit``, which writes it (the newest
durable state) before raising the earlier failure. A ``kill -9`` during a write leaves the
previous checkpoint whole: ``CheckpointStore`` writes atomically (a local rename, a GCS
object that appears only when its upload completes).

``RunOutputs`` uploads metrics and TensorBoard files with a writer of its own, the same way.

The writing thread runs at a lower CPU priority (``WRITER_NICENESS``): on a host whose cores
are busy, the data workers feeding the next steps come first and the write takes what is
left; nothing waits for it until the next checkpoint, the end of the run or a SIGTERM, and
then the workers are idle. (On this project's 2-core machine the effect was below the
noise of ``bench/epoch_boundary.py``: docs/benchmarks.md.) On Python 3.7 a thread has no
native id, so there the writer runs at the trainer's priority.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Optional

from trainer.errors import StorageError, TrainerError

# How much nicer than the trainer the writing thread runs (Linux thread niceness, 0-19): 10
# gives it about a tenth of a core the workers want (CFS weights 110 against 1024).
WRITER_NICENESS = 10


class BackgroundWriter:
    """One write at a time in a background thread; ``waited_seconds`` is how long the caller
    was held up waiting for a write before it (the part of checkpointing on the critical
    path besides copying the state to the host)."""

    def __init__(self, name: str = "checkpoint-writer",
                 hint: str = "check the job dir (free space, permissions); the previous "
                             "checkpoint is intact") -> None:
        self.name, self.hint = name, hint
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._what = ""
        self.waited_seconds = 0.0

    def submit(self, write: Callable[[], None], what: str) -> None:
        """Run ``write()`` in the background once the write before it has finished; ``what``
        (e.g. "checkpoint URI") names it in an error message. If the write before failed,
        this one is still made and waited for (the newest state is then durable, if it can
        be), and the earlier failure is raised, its hint naming what was written since."""
        earlier = self._finish()
        self._what = what
        self._thread = threading.Thread(target=self._run, args=(write,),
                                         name=self.name, daemon=True)
        self._thread.start()
        if earlier is not None:
            later = self._finish()
            earlier.hint = ("{} failed too ({})".format(what, later.message) if later
                            else "{} was written since".format(what)) + "; " + earlier.hint
            raise earlier

    def settle(self) -> None:
        """Block until the write in flight (if any) has ended, from any thread; its error is
        left for ``wait``. (A stop that ends the process lets the write land first, for as long
        as its deadline allows: ``stop_signal.before_ending``, ``stop_signal.ENDING_S``.)"""
        thread = self._thread
        if thread is not None:
            thread.join()

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def failed(self) -> bool:
        """Whether the last write has ended in an error not yet raised (never blocks)."""
        return self._error is not None and not self.busy()

    def wait(self) -> None:
        """Block until the write in flight (if any) has finished; raise its error, if it
        failed."""
        error = self._finish()
        if error is not None:
            raise error

    def _finish(self) -> Optional[TrainerError]:
        """Wait for the write in flight; its error (taken: raised once), as a
        ``TrainerError``."""
        if self._thread is not None:
            started = time.perf_counter()
            self._thread.join()
            self.waited_seconds += time.perf_counter() - started
            self._thread = None
        error, self._error = self._error, None
        if error is None or isinstance(error, TrainerError):
            return error
        return StorageError("writing {} failed: {}: {}".format(
            self._what, type(error).__name__, error), self.hint)

    def drain(self) -> Optional[str]:
        """``wait()`` for a run that is failing already: its own error is the one reported, so
        a failed write is returned as a phrase (for a warning) instead of raised."""
        try:
            self.wait()
        except TrainerError as error:
            return error.message
        return None

    def _run(self, write: Callable[[], None]) -> None:
        try:
            _lower_priority(WRITER_NICENESS)
            write()
        except BaseException as error:  # raised in the training thread by wait()
            self._error = error


def _lower_priority(niceness: int) -> None:
    """Make the calling thread ``niceness`` nicer than it is, where the system allows: a
    thread's own niceness needs its native id (Python 3.8+) and Linux, whose
    ``setpriority`` takes a thread id (elsewhere it takes a process id: never passed one);
    otherwise, or when refused, nothing changes."""
    native_id = getattr(threading, "get_native_id", None)
    if native_id is None or not sys.platform.startswith("linux"):
        return
    thread = native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, current + niceness))
    except OSError:  # not allowed here (a seccomp profile, say): run at the usual priority
        pass
