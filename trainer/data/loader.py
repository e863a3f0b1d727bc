"""A torch ``DataLoader`` whose data workers' ``TrainerError`` reaches the trainer as itself: the
same one-line message, ``HINT:`` and exit code as with no worker processes.

torch re-raises an exception from a worker as a new one of its type built from the worker's
formatted traceback alone: the message becomes that traceback squashed into one line, and the
hint and exit code are lost. Here the worker hands the error over as a value instead (the
error pickles whole: its hint and exit code are attributes), and the trainer's side raises it,
after stopping the workers. Any other exception is left to torch: it is a bug, whose traceback
is what is wanted.

A worker that dies (the kernel's out-of-memory killer, a crash in native code) is found by
torch, which raises a ``RuntimeError`` in the trainer wherever it happens to be (its SIGCHLD
handler, or the next batch); ``worker_death`` turns that into one line and exit 70.

The workers ignore SIGINT, and SIGTERM from anyone but the trainer: a signal sent to the whole
process group (systemd, ``timeout``, Slurm, ``kill -- -PGID``, Ctrl-C) reaches them too, and a
worker it ended would take the run down from inside a step with no checkpoint. Only the
trainer decides when to stop; it ends its workers itself (torch and multiprocessing do that
with SIGTERM). The signals are blocked from before the workers are forked, so none that
arrives before a worker has set this up can end it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data.dataloader import default_collate, default_convert

from trainer.errors import EX_SOFTWARE, TrainerError


def load(dataset: Dataset, num_workers: int, **options: Any) -> Iterator[Any]:
    """``iter(DataLoader(dataset, num_workers=num_workers, **options))``, except that a
    ``TrainerError`` raised in a worker process is raised here as it was raised there, and
    that its ``close()`` ends the workers at once. With no workers the loader runs in this
    process and its errors need no help."""
    if not num_workers:
        return iter(DataLoader(dataset, num_workers=0, **options))
    batched = options.get("batch_size", 1) is not None or "batch_sampler" in options
    collate = options.pop("collate_fn", None) or (default_collate if batched else
                                                  default_convert)
    guarded = (_GuardedStream(dataset) if isinstance(dataset, IterableDataset)
               else _GuardedItems(dataset))
    loader = DataLoader(guarded, num_workers=num_workers, collate_fn=_guarded(collate),
                        worker_init_fn=_deaf_to_stops(options.pop("worker_init_fn", None)),
                        **options)
    with _stops_blocked():  # iter() forks the workers (and persistent ones only then)
        return _Raising(iter(loader))


STOPS = (signal.SIGTERM, signal.SIGINT)  # the trainer's to act on, never a data worker's


@contextlib.contextmanager
def _stops_blocked() -> Iterator[None]:
    """``STOPS`` blocked in this thread while inside (a worker forked here inherits the
    mask); one that arrives meanwhile is delivered to this process on the way out."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _deaf_to_stops(then: Optional[Callable[[int], None]]) -> Callable[[int], None]:
    """A worker_init_fn: ignore SIGINT, and take SIGTERM from the parent only (torch and
    multiprocessing end their workers with it: ignoring theirs too would hang the trainer's
    exit); then ``then(worker_id)``. SIGTERM stays blocked, as it was forked, and a thread
    takes each one with its sender (torch's own handler tells them apart the same way, but
    lets any other sender end the worker)."""

    def init(worker_id: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        threading.Thread(target=_sigterm_from_parent_only, args=(os.getppid(),),
                         name="sigterm", daemon=True).start()
        if then is not None:
            then(worker_id)

    return init


def _sigterm_from_parent_only(parent: int) -> None:
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)


class _Failed:
    """A ``TrainerError`` a worker raised, on its way to the trainer as a loaded item."""

    def __init__(self, error: TrainerError) -> None:
        self.error = error


class _GuardedStream(IterableDataset):
    """The items of an iterable dataset, then a ``_Failed`` if iterating it raised one."""

    def __init__(self, dataset: IterableDataset) -> None:
        self.dataset = dataset

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.dataset:
                yield item
        except TrainerError as error:
            yield _Failed(error)


class _GuardedItems(Dataset):
    """Item ``i`` of a map-style dataset, or a ``_Failed`` if getting it raised one."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore

    def __getitem__(self, index: Any) -> Any:
        try:
            return self.dataset[index]
        except TrainerError as error:
            return _Failed(error)


def _guarded(collate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``collate``, but a batch with a failed item is that failure (the first)."""

    def collate_or_fail(items: Any) -> Any:
        if isinstance(items, _Failed):
            return items
        if isinstance(items, list):
            for item in items:
                if isinstance(item, _Failed):
                    return item
        return collate(items)

    return collate_or_fail


class _Raising:
    """The loaded items until a ``_Failed`` one, whose error is raised instead; ``close``
    ends the workers."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self.batches = batches

    def __iter__(self) -> "_Raising":
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self.batches)
        except (ConnectionError, EOFError) as error:
            # A worker killed while handing a batch over: its tensors' memory comes through
            # a connection to that worker, which the kill resets (torch reports no death
            # then). Told as torch tells a death, so that ``worker_death`` makes it one line.
            dead = self._dead_worker()
            if dead is None:
                raise
            self.close()
            raise RuntimeError("{} (pid {}) {} while handing over a batch ({}: {})".format(
                _DEATH_NOTICE[:-len(" (pid")], dead.pid, _ending(dead.exitcode),
                type(error).__name__, error)) from None
        if isinstance(batch, _Failed):
            # Stop the workers now rather than when the iterator is collected: the error may
            # end the process, and a worker left running would still be fetching and decoding.
            self.close()
            raise batch.error
        return batch

    def _dead_worker(self, wait_s: float = 2.0) -> Any:
        """A worker process that has ended, waiting up to ``wait_s`` for the kernel to
        report it (the connection resets as the process exits, a moment before it is
        reaped); None when all live."""
        deadline = time.monotonic() + wait_s
        while True:
            workers = getattr(self.batches, "_workers", [])
            ended = [worker for worker in workers if not worker.is_alive()]
            if ended or not workers or time.monotonic() >= deadline:
                return ended[0] if ended else None
            time.sleep(0.05)

    def close(self) -> None:
        # The workers end first (SIGTERM from their parent: ``_deaf_to_stops``): torch's
        # shutdown would otherwise wait seconds for a worker stalled in a read.
        for worker in getattr(self.batches, "_workers", []):
            if worker.is_alive():
                worker.terminate()
        shutdown = getattr(self.batches, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


# What torch's messages for a dead worker start with, in 1.11 and 2.x alike: "DataLoader worker
# (pid 123) is killed by signal: Killed." (its SIGCHLD handler) and "DataLoader worker (pid(s)
# 123) exited unexpectedly" (a batch that never came).
_DEATH_NOTICE = "DataLoader worker (pid"


def _ending(exitcode: Optional[int]) -> str:
    """How a worker's end reads in torch's words: "is killed by signal: Killed"."""
    if exitcode is not None and exitcode < 0:
        name = getattr(signal, "strsignal", None)  # Python 3.8+
        return "is killed by signal: {}".format(name(-exitcode) if name else -exitcode)
    return "exited with status {}".format(exitcode)


def worker_death(error: BaseException) -> Optional[TrainerError]:
    """The one-line error (exit 70) for torch's notice that a data worker died, else None (any
    other error is a bug, whose traceback is what is wanted)."""
    text = " ".join(str(error).split())
    if not isinstance(error, RuntimeError) or not text.startswith(_DEATH_NOTICE):
        return None
    return TrainerError(
        "a data worker died: {}".format(text.split(". ", 1)[0].rstrip(".")),
        "'Killed' is most often the kernel's out-of-memory killer: compare the host's memory "
        "with what `python -m trainer.data.plan` says the data needs, and lower --num_workers "
        "or --batch_size; restarted, the run resumes from its last checkpoint",
        exit_code=EX_SOFTWARE)
