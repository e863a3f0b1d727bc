"""One function over many tasks in worker processes, where a worker that dies ends the run at
once with one line naming the task it held, instead of a hang.

``multiprocessing.Pool`` replaces a worker that dies (SIGKILL from the kernel's OOM killer, a
crash in an image decoder) but never fails the task that worker held: ``imap_unordered`` and
``map`` wait for its result forever. ``concurrent.futures.ProcessPoolExecutor`` notices
(``BrokenProcessPool``) but fails every queued task alike, so it cannot say which one was
lost. Here each worker holds one task at a time, handed over its own pipe, and the parent
waits on every busy worker's pipe and process sentinel together: the moment a worker ends
while it holds a task, the run ends with ``WorkerDied`` (exit 70) naming the task, the
worker's process id and how it ended. The other workers are stopped; what they finished
before was already handed to the caller, so a tool that keeps its finished work (make_shards'
shards) resumes from there.

An exception a task raises (a ``TrainerError`` above all) reaches the caller unchanged, as a
value sent back and raised in the parent. Workers ignore SIGINT (Ctrl-C reaches the whole
process group): the parent stops them, and only the parent reports it.
"""

from __future__ import annotations

import multiprocessing
import signal
from multiprocessing.connection import wait
from typing import Any, Callable, Collection, Iterator, List, Optional, Sequence

from trainer.errors import EX_SOFTWARE, TrainerError

# How long a dead worker's exit status may take to arrive after its pipe closed.
_REAP_TIMEOUT_S = 10.0


class WorkerDied(TrainerError):
    """A worker process ended while it held a task."""

    exit_code = EX_SOFTWARE


def results(function: Callable[[Any], Any], tasks: Sequence[Any], workers: int,
            doing: Callable[[Any], str], resume: str) -> Iterator[Any]:
    """``function(task)`` for every task, each result as soon as it is ready (in no fixed
    order): in ``min(workers, len(tasks))`` processes, or in this one when ``workers`` is 0
    (none, as a tool's ``--workers=0``) or there is one task at most.
    ``function`` must be a module-level function (it may be pickled). A worker that dies
    raises ``WorkerDied``: "worker process PID was killed by SIGKILL while {doing(task)};
    {resume}", with a hint from how it ended."""
    if workers <= 0 or len(tasks) <= 1:
        for task in tasks:
            yield function(task)
        return
    pool = _Pool(function, min(workers, len(tasks)))
    try:
        for result in pool.run(tasks, doing, resume):
            yield result
    finally:
        pool.stop()


def check_complete(planned: Sequence[str], done: Collection[str], resume: str) -> None:
    """``WorkerDied`` unless every one of ``planned`` (task names) is in ``done``: a tool's
    last guard that no task was lost on the way, whatever lost it."""
    missing = [name for name in planned if name not in done]
    if missing:
        raise WorkerDied("no result for {} of {} tasks ({}{}): a worker process was lost; "
                         "{}".format(len(missing), len(planned), ", ".join(missing[:3]),
                                     ", ..." if len(missing) > 3 else "", resume),
                         "the log above names the worker that ended, if it was seen")


class _Worker:
    def __init__(self, context, function: Callable[[Any], Any]) -> None:
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=_serve, args=(function, child_end),
                                       name="worker", daemon=True)
        self.process.start()
        child_end.close()  # so that the parent's end reads EOF once the worker is gone
        self.task: Optional[int] = None  # the number of the task it holds


class _Pool:
    def __init__(self, function: Callable[[Any], Any], size: int) -> None:
        context = multiprocessing.get_context()
        self.workers: List[_Worker] = []
        for _ in range(size):
            self.workers.append(_Worker(context, function))

    def run(self, tasks: Sequence[Any], doing: Callable[[Any], str], resume: str
            ) -> Iterator[Any]:
        queue = iter(range(len(tasks)))
        for worker in self.workers:
            self._hand(worker, queue, tasks, doing, resume)
        while True:
            busy = [worker for worker in self.workers if worker.task is not None]
            if not busy:
                return
            ready = wait([worker.conn for worker in busy]
                         + [worker.process.sentinel for worker in busy])
            for worker in busy:
                if worker.conn not in ready and worker.process.sentinel not in ready:
                    continue
                # A worker may send its result and then end: the pipe is read first.
                try:
                    if not worker.conn.poll():
                        raise EOFError
                    number, succeeded, value = worker.conn.recv()
                except (EOFError, OSError):
                    raise self._died(worker, doing(tasks[worker.task]), resume)
                worker.task = None
                self._hand(worker, queue, tasks, doing, resume)
                if not succeeded:
                    raise value
                yield value

    def _hand(self, worker: _Worker, queue: Iterator[int], tasks: Sequence[Any],
              doing: Callable[[Any], str], resume: str) -> None:
        """Give ``worker`` the next task, or tell it to end when there is none. A worker that
        died since its last result cannot take the task: that is ``WorkerDied`` naming it
        (the task is out of the queue, and no other worker would do it)."""
        number = next(queue, None)
        try:
            worker.conn.send(None if number is None else (number, tasks[number]))
        except OSError:
            if number is None:  # it died idle with nothing left to do: nothing is lost
                return
            raise self._died(worker, "waiting for its next task ({})".format(
                doing(tasks[number])), resume)
        worker.task = number

    def _died(self, worker: _Worker, doing: str, resume: str) -> WorkerDied:
        worker.process.join(_REAP_TIMEOUT_S)
        code = worker.process.exitcode
        if code is not None and code < 0:
            how = "was killed by {}".format(_signal_name(-code))
        elif code is not None:
            how = "exited with status {}".format(code)
        else:
            how = "closed its pipe"
        message = "worker process {} {} while {}; {}".format(worker.process.pid, how, doing,
                                                              resume)
        if code == -signal.SIGKILL:
            hint = ("SIGKILL that no one sent by hand is the kernel's out-of-memory killer "
                    "(dmesg names it): fewer --workers need less memory")
        else:
            hint = ("a crash in native code (an image decoder?) on this task's input: if it "
                    "ends at the same task again, run with --workers=0 to see the crash")
        return WorkerDied(message, hint)

    def stop(self) -> None:
        """End every worker: those that hold a task at once (the run has failed or its
        caller stopped reading), the idle ones after the end-of-work message."""
        for worker in self.workers:
            if worker.task is not None and worker.process.is_alive():
                worker.process.terminate()
        for worker in self.workers:
            worker.process.join(_REAP_TIMEOUT_S)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal {}".format(number)


def _serve(function: Callable[[Any], Any], conn) -> None:
    """A worker's loop: run each task it is handed and send back (number, succeeded, result
    or exception); end on the end-of-work message or when the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops the workers
    try:
        while True:
            message = conn.recv()
            if message is None:
                return
            number, task = message
            try:
                outcome = (number, True, function(task))
            except Exception as error:  # raised in the parent, where it is reported
                outcome = (number, False, error)
            try:
                conn.send(outcome)
            except OSError:
                raise
            except Exception as error:
                # A result or exception that cannot be pickled: still a one-line failure.
                conn.send((number, False, RuntimeError("{}: {!r} cannot be sent back: {}".format(
                    type(outcome[2]).__name__, outcome[2], error))))
    except (EOFError, OSError):  # the parent is gone: nothing to report to
        return
