"""One input stream for a whole run: the data workers start once and build, without a pause,
the training steps of an epoch, the evaluation after it (where the run evaluates), the next
epoch, and so on, to the run's last segment (``RunSchedule``, which the run gives before it
starts; then the workers end by themselves), unless the run asks for something else first or
ends (``close``). Shards and class-folder trees alike: a
``Split`` names its reader and its order (``shard_source``, ``folder_source``).

The order of everything is arithmetic (``trainer.data.epoch_order``), so the stream knows what
comes next before the trainer asks: while the last steps of epoch ``e`` train, the workers
already build the evaluation's first batches and then those of epoch ``e + 1``. A request that
is not the one anticipated (a run that stops an epoch early with ``--num_steps``, an evaluation
without the epoch before it) ends the workers and starts them again at the request, so what a
step holds never depends on what was asked before.

Each original step is cut into *work units* of whole pieces (``epoch_order.units``, at most
one per worker), dealt to the workers in turn across segment boundaries: after any boundary
the first batch is built by several workers at once, not by one decoding a whole local batch.
The trainer's side puts each original step's units back together in order and, in training,
holds the local batches of a mixing group's original steps (``epoch_order.Mixing``) to take
each trained step's rows from them; so a batch holds the same examples in the same order with
any worker count, and a resumed run (any ``--num_workers``) continues exactly. A run resumed
in the middle of a group reads the whole group again and trains its steps from the resumed
one on: up to ``MIXING_STEPS - 1`` steps read twice, on resuming only.

Memory: each worker holds at most ``RUNS_AHEAD + 1`` units' encoded bytes and hands over at
most ``plan.PREFETCH_BATCHES`` decoded units (enough for the next group and a step more,
``plan``), and the trainer's side holds one group; units may belong to the next segment,
which is why ``plan`` sizes batches by the larger of training and evaluation.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import IterableDataset, get_worker_info

from trainer.batches import IGNORE_LABEL, Batch, DataSource, RunSchedule, pad_batch
from trainer.data import epoch_order, images, loader, plan
from trainer.data.shard_reads import prefetched

TRAIN, EVAL = "train", "eval"
# Where the stream is: (TRAIN, epoch, step) or (EVAL, epoch that follows it, step); an
# evaluation that no epoch precedes has epoch None, and nothing follows it.
Position = Tuple[str, Optional[int], int]
# How long ``close`` waits for a reader to let go of the stream before ending it regardless.
CLOSE_WAIT_S = 1.0
# A stream on its own (no run told it its schedule): every epoch evaluated, no end.
ENDLESS = RunSchedule()
# What a worker hands over: (unit number, step, part, parts, images, labels).
Item = Tuple[int, int, int, int, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Split:
    """One split as the stream reads it: its reader (``ShardReader``, or a class-folder
    tree's ``folder_source.FileReader``: ``root``, ``read_run`` and ``unpacked`` of pieces),
    the order of its examples in an epoch (``order(seed, epoch)``: what ``take`` cuts into
    pieces), how that order becomes steps, and how many of those are mixed (1: none)."""

    reader: Any
    order: Callable[[int, Optional[int]], Any]
    cut: epoch_order.Cut
    mixing_steps: int = 1


@dataclass(frozen=True)
class StreamSpec:
    """Everything the workers need: the splits, this host, the seed, the image size."""

    train: Split
    val: Split
    host: int
    seed: int
    image_size: int
    workers: int
    schedule: RunSchedule = ENDLESS

    def split(self, kind: str) -> Split:
        return self.train if kind == TRAIN else self.val

    def steps(self, kind: str) -> int:
        """The steps of a segment of ``kind``: the split's, or fewer where the run says."""
        steps = self.split(kind).cut.steps
        limit = self.schedule.train_steps if kind == TRAIN else self.schedule.eval_steps
        return steps if limit is None else min(steps, limit)

    def mixing(self, kind: str, epoch: Optional[int]) -> epoch_order.Mixing:
        """How the segment's original steps become its steps (evaluation: unmixed)."""
        split = self.split(kind)
        return epoch_order.Mixing(self.seed, epoch, split.cut.steps, split.mixing_steps)


def segments(start: Position, schedule: RunSchedule = ENDLESS) -> Iterator[Position]:
    """The segments from ``start`` on, as ``schedule`` orders them: an epoch from its step,
    then its evaluation if the run evaluates there, then the next epoch from step 0, and so
    on to the run's end; an evaluation with no epoch is alone."""
    kind, epoch, step = start
    if epoch is None:
        yield start
        return
    while True:
        yield kind, epoch, step
        if kind == TRAIN and schedule.evaluates_after(epoch + 1):
            kind, epoch, step = EVAL, epoch + 1, 0
        elif schedule.trains(epoch + 1 if kind == TRAIN else epoch):
            kind, epoch, step = TRAIN, epoch + 1 if kind == TRAIN else epoch, 0
        else:
            return


def work_units(spec: StreamSpec, start: Position) -> Iterator[Tuple[str, Optional[int],
                                                                    epoch_order.Unit]]:
    """(kind, epoch, unit) of every unit from ``start`` on, in order."""
    for kind, epoch, step in segments(start, spec.schedule):
        split = spec.split(kind)
        order = split.order(spec.seed, epoch)
        for unit in epoch_order.units(order, split.cut, spec.host, step, max(1, spec.workers),
                                      spec.mixing(kind, epoch), spec.steps(kind)):
            yield kind, epoch, unit


def worker_items(spec: StreamSpec, start: Position, position: int, workers: int
                 ) -> Iterator[Item]:
    """The items worker ``position`` of ``workers`` builds: units ``position``,
    ``position + workers``, ... of the stream, each read ``RUNS_AHEAD`` units ahead."""
    mine = itertools.islice(enumerate(work_units(spec, start)), position, None,
                            max(1, workers))
    mine, ahead = itertools.tee(mine)
    fetched = prefetched(ahead, lambda numbered, stop: spec.split(numbered[1][0]).reader
                         .read_run(numbered[1][2][3], stop))
    try:
        for number, (kind, epoch, (step, part, parts, pieces)) in mine:
            split = spec.split(kind)
            examples = split.reader.unpacked(pieces, next(fetched))
            decode = _decoder(kind, epoch, spec, split.reader.root)
            x = _batch_tensor(len(examples), spec.image_size)
            labels = []
            for row, (name, data, label) in enumerate(examples):
                x[row] = decode(name, data)
                examples[row] = None  # its bytes go once decoded
                labels.append(label)
            yield number, step, part, parts, x, torch.tensor(labels, dtype=torch.int64)
    finally:
        fetched.close()


def _decoder(kind: str, epoch: Optional[int], spec: StreamSpec, root
             ) -> Callable[[str, bytes], torch.Tensor]:
    size, seed = spec.image_size, spec.seed
    if kind == TRAIN:
        return lambda name, data: images.train_image(
            data, size, images.draws(seed, epoch, name), root.join(name))
    return lambda name, data: images.eval_image(data, size, root.join(name))


def _batch_tensor(rows: int, size: int) -> torch.Tensor:
    """An empty uint8 batch; in a data worker, in shared memory already, so handing it to
    the trainer copies nothing (and the worker never holds it twice)."""
    x = torch.empty((rows, 3, size, size), dtype=torch.uint8)
    return x.share_memory_() if get_worker_info() is not None else x


class _Workers(IterableDataset):
    """Worker ``i`` of a DataLoader of ``workers`` iterates ``worker_items(..., i, ...)``."""

    def __init__(self, spec: StreamSpec, start: Position, workers: int) -> None:
        self.spec, self.start, self.workers = spec, start, workers

    def __iter__(self) -> Iterator[Item]:
        info = get_worker_info()
        return worker_items(self.spec, self.start, info.id if info else 0, self.workers)


class Stream:
    """The trainer's side: ``batches(position)`` continues the stream when ``position`` is
    where it is, else starts it there; ``close`` ends the workers."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.at: Optional[Position] = None  # where the stream is, None: not running
        self.items: Optional[Iterator[Item]] = None
        self.next_unit = 0
        # The group being trained: ((kind, epoch, its steps), its original steps' local
        # batches); None before the first.
        self.held: Optional[Tuple[Tuple[str, Optional[int], range], List[List[Batch]]]] = None
        self.generation = 0  # a newer request makes the iterators of older ones stale
        self.starts = 0  # how many times the workers were started
        self.lock = threading.Lock()

    def schedule(self, run: RunSchedule) -> None:
        """Prepare the segments of ``run`` from now on (the workers end after its last)."""
        with self.lock:
            self._stop()
            self.spec = replace(self.spec, schedule=run)

    def train(self, epoch: int, step: int) -> Iterator[Batch]:
        return self.batches((TRAIN, epoch, step))

    def evaluation(self) -> Iterator[Batch]:
        """The evaluation's batches: the one the stream has reached, or one on its own."""
        at = self.at
        anticipated = at is not None and at[0] == EVAL and at[2] == 0
        return self.batches(at if anticipated else (EVAL, None, 0))

    def batches(self, position: Position) -> Iterator[Batch]:
        """This host's batches of the segment at ``position`` (to its end); the workers are
        (re)started here, in the caller's thread, if the stream is elsewhere."""
        with self.lock:
            if position != self.at or self.items is None:
                self._start(position)
            self.generation += 1
            if position[2] >= self.spec.steps(position[0]):
                # No step left (a run stopped after an epoch's last step): the stream is at
                # what follows already, whether or not the caller iterates.
                self.at = _after(position, self.spec.schedule)
            return self._assembled(position, self.generation)

    def close(self) -> None:
        """End the workers (the stream starts again at the next request), at once: also while
        a reader waits for a stalled read holding the lock (a SIGTERM then must not wait for
        the read), whose iterator then ends in an error of its own thread."""
        locked = self.lock.acquire(timeout=CLOSE_WAIT_S)
        try:
            self._stop()
        finally:
            if locked:
                self.lock.release()

    def _start(self, position: Position) -> None:
        self._stop()
        kind, epoch, step = position
        workers = self.spec.workers
        if epoch is None:  # a finite stream: no more workers than units
            workers = min(workers, sum(1 for _ in work_units(self.spec, position)))
        self.starts += 1
        if workers:
            self.items = loader.load(_Workers(self.spec, position, workers), workers,
                                     batch_size=None, prefetch_factor=plan.PREFETCH_BATCHES)
        else:
            self.items = worker_items(self.spec, position, 0, 1)
        self.at, self.next_unit = position, 0

    def _stop(self) -> None:
        items, self.items, self.at, self.held = self.items, None, None, None
        if items is not None:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def _assembled(self, position: Position, generation: int) -> Iterator[Batch]:
        kind, epoch, step = position
        cut, steps = self.spec.split(kind).cut, self.spec.steps(kind)
        mixing = self.spec.mixing(kind, epoch)
        while step < steps:
            group = mixing.group(step)
            with self.lock:
                if generation != self.generation or self.items is None:
                    return  # a newer request took the stream over
                if self.held is None or self.held[0] != (kind, epoch, group):
                    self.held = None  # its memory goes before the next group's comes
                    self.held = ((kind, epoch, group), [
                        self._original_step(original) for original in group])
                batch = (_joined(self.held[1][0], cut.local_batch) if len(group) == 1
                         else _mixed(self.held[1], mixing.rows(step, cut, self.spec.host)))
                step += 1
                # Where the stream is once this batch is taken: the next segment after the
                # last (a caller that takes exactly the segment's steps never asks again).
                self.at = ((kind, epoch, step) if step < steps
                           else _after(position, self.spec.schedule))
            yield batch

    def _original_step(self, step: int) -> List[Batch]:
        """The units of original step ``step``, the next in the stream, in order: one local
        batch in parts (put together by ``_joined`` or ``_mixed``, each image copied once)."""
        parts: List[Item] = []
        while not parts or parts[-1][2] + 1 < parts[-1][3]:
            parts.append(self._next_item(step))
        return [(part[4], part[5]) for part in parts]

    def _next_item(self, step: int) -> Item:
        assert self.items is not None
        item = next(self.items)
        if item[0] != self.next_unit or item[1] != step:  # a bug, never bad input
            raise RuntimeError("data stream out of order: unit {} of step {} where unit {} "
                               "of step {} belongs".format(item[0], item[1], self.next_unit,
                                                           step))
        self.next_unit += 1
        return item


def _after(position: Position, schedule: RunSchedule) -> Optional[Position]:
    """Where the stream is once the segment at ``position`` has ended (None: nothing
    follows)."""
    following = segments(position, schedule)
    next(following)
    return next(following, None)


def _joined(parts: Sequence[Batch], rows: int) -> Batch:
    """A step's parts as one local batch of ``rows`` (the last evaluation step padded, as
    ``pad_batch`` pads): a single part as it is, several copied once into place."""
    if len(parts) == 1:
        return pad_batch(parts[0][0], parts[0][1], rows)
    first = parts[0][0]
    total = sum(len(x) for x, _ in parts)
    x = first.new_empty((max(rows, total),) + tuple(first.shape[1:]))
    at = 0
    for images_part, _ in parts:
        x[at:at + len(images_part)].copy_(images_part)
        at += len(images_part)
    x[total:].zero_()
    labels = [y for _, y in parts]
    if total < rows:
        labels.append(labels[0].new_full((rows - total,), IGNORE_LABEL))
    return x, torch.cat(labels)


def _mixed(held: Sequence[Sequence[Batch]], rows: List[int]) -> Batch:
    """Rows ``rows`` (``Mixing.rows``: rows of the group's original steps, each a local
    batch, end to end) as one batch, taken from each step's parts (``_original_step``) as
    they came from the workers, so each image is copied once. A row keeps its place, only
    its step changes: an image a call, straight into place (index_select and index_copy_ by
    source took 2.5 times as long, 57 against 23 ms for 512 images of 224 px here)."""
    images_at: List[torch.Tensor] = []  # each row of the group, end to end: a view
    for parts in held:
        for images_part, _ in parts:
            images_at.extend(images_part.unbind(0))
    x = images_at[0].new_empty((len(rows),) + tuple(images_at[0].shape))
    for row, source in enumerate(rows):
        x[row].copy_(images_at[source])
    labels = torch.cat([y for parts in held for _, y in parts])
    return x, labels.index_select(0, torch.tensor(rows, dtype=torch.int64))


class StreamSource(DataSource):
    """A ``DataSource`` whose batches come from its ``stream`` (shards, class folders): one
    stream for the whole run, ended by ``close``."""

    stream: Stream

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        return self.stream.train(epoch, start_step)

    def schedule(self, run: RunSchedule) -> None:
        self.stream.schedule(run)

    def eval_batches(self) -> Iterator[Batch]:
        """This host's part of every padded global evaluation batch."""
        return self.stream.evaluation()

    def close(self) -> None:
        self.stream.close()
