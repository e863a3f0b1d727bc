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
A worker decodes each image of its unit straight into its final row in a ring of step
buffers in shared memory (``step_ring``; a slot holds a mixing group, or as many unmixed
steps, ``StreamSpec.block``): the row of the trained step it goes to is arithmetic
(``epoch_order.Mixing``, inverted by ``destinations``), as is its step's padding in an
evaluation's last step. The workers hand over only a notice per
unit, checked in order, and the trainer's side hands each trained step out as the slot's
step buffer: no image copied, nothing concatenated. So a batch holds the same examples in
the same order with any worker count, and a resumed run (any ``--num_workers``) continues
exactly. A run resumed in the middle of a group reads the whole group again and trains its
steps from the resumed one on: up to ``MIXING_STEPS - 1`` steps read twice, on resuming
only. Without workers (``--num_workers=0``) the trainer decodes each unit itself and puts
the steps together as before the ring: each image copied once (``_joined``, ``_mixed``).

Memory: each worker holds at most ``RUNS_AHEAD + 1`` units' encoded bytes, and the decoded
images live in the ring, allocated once when the workers start (a new one at each start):
``plan.ring_slots`` groups, enough for those the trainer's side and the device loader may
hold and for the workers to build the next group and a step more meanwhile; its slots are
sized by the larger local batch of training and evaluation, whose units follow each other.
A slot is reused only once every batch handed out of it is gone (``step_ring``): a consumer
that holds more than the ring has room for (a script that keeps a whole epoch) gets the
groups whose slot it holds built in the workers' own memory and copied into place, as
before the ring (``Stream.copied`` counts them); the trainer never does.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch.utils.data import IterableDataset, get_worker_info

from trainer.batches import IGNORE_LABEL, Batch, DataSource, RunSchedule, pad_batch
from trainer.data import damage, epoch_order, images, loader, plan, step_ring
from trainer.data.shard_reads import prefetched

TRAIN, EVAL = "train", "eval"
# Where the stream is: (TRAIN, epoch, step) or (EVAL, epoch that follows it, step); an
# evaluation that no epoch precedes has epoch None, and nothing follows it.
Position = Tuple[str, Optional[int], int]
# How long ``close`` waits for a reader to let go of the stream before ending it regardless.
CLOSE_WAIT_S = 1.0
# A stream on its own (no run told it its schedule): every epoch evaluated, no end.
ENDLESS = RunSchedule()
# What a worker hands over: (unit number, step, part, parts, images, labels, group number,
# rows, the unit's damaged examples: ``damage.Damaged``, their rows masked); images and labels
# None: the unit is in the step ring (``step_ring``).
Item = Tuple[int, int, int, int, Optional[torch.Tensor], Optional[torch.Tensor], int, int,
             Tuple[damage.Damaged, ...]]
# A unit with where it goes: (kind, epoch, unit, group number, first row in its step, the
# steps of its group: ``StreamSpec.block``).
Placed = Tuple[str, Optional[int], epoch_order.Unit, int, int, range]


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

    @property
    def block_steps(self) -> int:
        """Steps a slot of the step ring holds: the larger split's mixing group."""
        return max(self.train.mixing_steps, self.val.mixing_steps)

    def block(self, kind: str, epoch: Optional[int], step: int, first: int) -> range:
        """The steps put together with ``step`` (one slot of the step ring) in a segment
        that starts at ``first``: its mixing group, or, unmixed, ``block_steps`` consecutive
        steps (so an evaluation's steps fill the slots as training's do)."""
        mixing = self.mixing(kind, epoch)
        if mixing.size > 1:
            return mixing.group(step)
        start = step - step % self.block_steps
        return range(max(first, start), min(start + self.block_steps, self.steps(kind)))


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


def placed_units(spec: StreamSpec, start: Position) -> Iterator[Placed]:
    """``work_units`` with where each goes: its group's number from ``start`` on (the step
    ring's count, ``step_ring``) and its first row in its original step."""
    number, last, offset, first = -1, None, 0, 0
    for kind, epoch, unit in work_units(spec, start):
        step, part, _, pieces = unit
        first = step if last is None or last[:2] != (kind, epoch) else first
        group = (kind, epoch, spec.block(kind, epoch, step, first))
        if group != last:
            number, last = number + 1, group
        offset = 0 if part == 0 else offset
        yield kind, epoch, unit, number, offset, group[2]
        offset += sum(end - first for _, first, end in pieces)


def destinations(spec: StreamSpec, kind: str, epoch: Optional[int], block: range, rows: int
                 ) -> List[int]:
    """For each row of the original steps ``block`` (``StreamSpec.block``: their local
    batches end to end), its row in the trained steps, each ``rows`` apart (a slot of the
    step ring): ``Mixing.rows`` inverted; unmixed, every row where it is."""
    cut, mixing = spec.split(kind).cut, spec.mixing(kind, epoch)
    local = cut.local_batch
    placed = [0] * (len(block) * local)
    for trained in block:
        at = (trained - block.start) * local
        sources = (mixing.rows(trained, cut, spec.host) if mixing.size > 1
                   else range(at, at + local))
        for row, source in enumerate(sources):
            placed[source] = (trained - block.start) * rows + row
    return placed


def worker_items(spec: StreamSpec, start: Position, position: int, workers: int,
                 ring: Optional[step_ring.StepRing] = None) -> Iterator[Item]:
    """The items worker ``position`` of ``workers`` builds: units ``position``,
    ``position + workers``, ... of the stream, each read ``RUNS_AHEAD`` units ahead. With a
    ``ring``, each image goes straight to its row there (the item then carries no tensors),
    unless the consumer holds the unit's slot while it waits for it (``StepRing.claim``)."""
    mine = itertools.islice(placed_units(spec, start), position, None, max(1, workers))
    mine, ahead = itertools.tee(mine)
    fetched = prefetched(ahead, lambda placed, stop: spec.split(placed[0]).reader
                         .read_run(placed[2][3], stop))
    number = position
    placing: Tuple[Any, List[int]] = (None, [])  # the last group's destinations
    try:
        for kind, epoch, (step, part, parts, pieces), group, offset, block in mine:
            split = spec.split(kind)
            examples = split.reader.unpacked(pieces, next(fetched))
            decode = _decoder(kind, epoch, spec, split.reader.root)
            if ring is not None and ring.claim(group, position):
                x, y = ring.destination(group)
                if placing[0] != (kind, epoch, block):
                    placing = ((kind, epoch, block),
                               destinations(spec, kind, epoch, block, ring.rows))
                first = (step - block.start) * split.cut.local_batch + offset
                damaged = _decode_into(x, y, placing[1][first:first + len(examples)],
                                       examples, decode)
                end = offset + len(examples)
                if part + 1 == parts and end < split.cut.local_batch:  # padded, as pad_batch
                    padding = slice((step - block.start) * ring.rows + end,
                                    (step - block.start) * ring.rows + split.cut.local_batch)
                    x[padding].zero_()
                    y[padding] = IGNORE_LABEL
                yield (number, step, part, parts, None, None, group, len(examples),
                       tuple(damaged or ()))
            else:
                x = _batch_tensor(len(examples), spec.image_size)
                y = torch.empty(len(examples), dtype=torch.int64)
                damaged = _decode_into(x, y, range(len(examples)), examples, decode)
                yield number, step, part, parts, x, y, group, len(x), tuple(damaged or ())
            number += max(1, workers)
    finally:
        fetched.close()


def _decode_into(x: torch.Tensor, y: torch.Tensor, rows: Sequence[int], examples: List[Any],
                 decode: Callable[[str, bytes], torch.Tensor]) -> List[damage.Damaged]:
    """Each of ``examples`` decoded into row ``rows[i]`` of ``x``, its label into ``y``; those
    that do not decode masked there as padding is (``damage``), and returned."""
    damaged: List[damage.Damaged] = []
    for index, (name, data, label) in enumerate(examples):
        try:
            x[rows[index]] = decode(name, data)
            y[rows[index]] = label
        except images.DamagedImage as error:
            x[rows[index]].zero_()
            y[rows[index]] = IGNORE_LABEL
            damaged.append((error.name, error.reason))
        examples[index] = None  # its bytes go once decoded
    return damaged


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

    def __init__(self, spec: StreamSpec, start: Position, workers: int,
                 ring: Optional[step_ring.StepRing]) -> None:
        self.spec, self.start, self.workers, self.ring = spec, start, workers, ring

    def __iter__(self) -> Iterator[Item]:
        info = get_worker_info()
        return worker_items(self.spec, self.start, info.id if info else 0, self.workers,
                            self.ring)


def new_ring(spec: StreamSpec, workers: int) -> step_ring.StepRing:
    """The step ring for ``spec``'s workers: ``plan.ring_slots`` slots of ``block_steps``
    of the larger segment's local batches."""
    rows = max(spec.train.cut.local_batch, spec.val.cut.local_batch)
    return step_ring.StepRing(plan.ring_slots(spec.block_steps), spec.block_steps, rows,
                              spec.image_size, workers)


@dataclass
class _RingGroup:
    """A group whose units are all in the step ring: its trained steps are the slot's step
    buffers, handed out as they are."""

    ring: step_ring.StepRing
    lease: step_ring.Lease


class Stream:
    """The trainer's side: ``batches(position)`` continues the stream when ``position`` is
    where it is, else starts it there; ``close`` ends the workers."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self.at: Optional[Position] = None  # where the stream is, None: not running
        self.items: Optional[Iterator[Item]] = None
        self.next_unit = 0
        self.ring: Optional[step_ring.StepRing] = None  # the workers' step buffers
        self.groups = 0  # the groups begun since the workers started (the ring's count)
        self.copied = 0  # groups put together by copying, as without the ring
        # The group being trained: ((kind, epoch, its steps), its slot in the ring, or its
        # original steps' local batches); None before the first.
        self.held: Optional[Tuple[Tuple[str, Optional[int], range],
                                  Union[_RingGroup, List[List[Batch]]]]] = None
        self.generation = 0  # a newer request makes the iterators of older ones stale
        self.reading: Tuple[str, Optional[int]] = (TRAIN, None)  # the group being read
        self.starts = 0  # how many times the workers were started
        self.damage = damage.DamageLedger()  # its policy: ``--max_bad_images``
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
            self.ring = new_ring(self.spec, workers)  # before the fork: the workers inherit it
            self.items = loader.load(_Workers(self.spec, position, workers, self.ring),
                                     workers, batch_size=None,
                                     prefetch_factor=plan.PREFETCH_BATCHES)
        else:
            self.items = worker_items(self.spec, position, 0, 1)
        self.at, self.next_unit, self.groups = position, 0, 0

    def _stop(self) -> None:
        self._let_go()
        items, self.items, self.at, self.ring = self.items, None, None, None
        if items is not None:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    def _assembled(self, position: Position, generation: int) -> Iterator[Batch]:
        kind, epoch, step = position
        cut, steps = self.spec.split(kind).cut, self.spec.steps(kind)
        mixing = self.spec.mixing(kind, epoch)
        while step < steps:
            with self.lock:
                if generation != self.generation or self.items is None:
                    return  # a newer request took the stream over
                group = (self._held_block(kind, epoch, step)
                         or self.spec.block(kind, epoch, step, position[2]))
                if self.held is None or self.held[0] != (kind, epoch, group):
                    self._let_go()  # its memory goes before the next group's comes
                    self.held = ((kind, epoch, group), self._group(kind, epoch, group))
                held = self.held[1]
                if isinstance(held, _RingGroup):
                    batch = held.ring.batch(held.lease, step - group.start, cut.local_batch)
                elif mixing.size == 1:
                    batch = _joined(held[step - group.start], cut.local_batch)
                else:
                    batch = _mixed(held, mixing.rows(step, cut, self.spec.host))
                if kind == TRAIN and epoch is not None:
                    replaced = damage.stand_in(batch[0], batch[1], self.spec.seed, epoch, step)
                    self.damage.counted(TRAIN, epoch, replaced, steps * cut.local_batch)
                step += 1
                # Where the stream is once this batch is taken: the next segment after the
                # last (a caller that takes exactly the segment's steps never asks again).
                self.at = ((kind, epoch, step) if step < steps
                           else _after(position, self.spec.schedule))
            yield batch

    def _held_block(self, kind: str, epoch: Optional[int], step: int) -> Optional[range]:
        """The steps of the group held if ``step`` of that segment is one of them (a request
        that continues within the group: it need not start where the group does)."""
        if self.held is not None and self.held[0][:2] == (kind, epoch) and step in self.held[0][2]:
            return self.held[0][2]
        return None

    def _let_go(self) -> None:
        """The group held is handed out: its slot goes once its batches have gone too."""
        held, self.held = self.held, None
        if held is not None and isinstance(held[1], _RingGroup):
            held[1].lease.release()

    def _group(self, kind: str, epoch: Optional[int], group: range
               ) -> Union[_RingGroup, List[List[Batch]]]:
        """The next group's units: its slot in the ring if every unit is there, else its
        original steps' local batches in parts (``_original_step``)."""
        number, ring = self.groups, self.ring
        self.groups += 1
        self.reading = (kind, epoch)  # what ``_next_item``'s damaged examples belong to
        if kind == EVAL and group.start == 0:
            self.damage.evaluating(epoch)
        if ring is None:
            return [self._original_step(original, number) for original in group]
        ring.want(number)
        lease = ring.lease(number)
        try:
            items = [self._original_items(original, number) for original in group]
            if all(item[4] is None for parts in items for item in parts):
                lease.hold()  # released by ``_let_go``
                return _RingGroup(ring, lease)
            self.copied += 1
            return self._from_ring(kind, epoch, group, number, items)
        finally:
            lease.release()

    def _from_ring(self, kind: str, epoch: Optional[int], group: range, number: int,
                   items: List[List[Item]]) -> List[List[Batch]]:
        """A group some of whose units are not in the ring (a consumer held their slot): the
        ring's units copied out of it, as the workers sent the others."""
        assert self.ring is not None
        local = self.spec.split(kind).cut.local_batch
        placed = destinations(self.spec, kind, epoch, group, self.ring.rows)
        ring_x, ring_y = self.ring.destination(number)
        steps = []
        for original, parts in zip(group, items):
            first, batches = (original - group.start) * local, []
            for item in parts:
                if item[4] is None:
                    rows = torch.tensor(placed[first:first + item[7]], dtype=torch.int64)
                    batches.append((ring_x.index_select(0, rows), ring_y.index_select(0, rows)))
                else:
                    batches.append((item[4], item[5]))
                first += item[7]
            steps.append(batches)
        return steps

    def _original_step(self, step: int, group: int) -> List[Batch]:
        """The units of original step ``step``, the next in the stream, in order: one local
        batch in parts (put together by ``_joined`` or ``_mixed``, each image copied once)."""
        return [(part[4], part[5]) for part in self._original_items(step, group)]

    def _original_items(self, step: int, group: int) -> List[Item]:
        """The items of original step ``step`` of group ``group``, the next in the stream."""
        parts: List[Item] = []
        while not parts or parts[-1][2] + 1 < parts[-1][3]:
            parts.append(self._next_item(step, group))
        return parts

    def _next_item(self, step: int, group: int) -> Item:
        assert self.items is not None
        item = next(self.items)
        if item[0] != self.next_unit or item[1] != step or item[6] != group:  # a bug
            raise RuntimeError("data stream out of order: unit {} of step {} (group {}) where "
                               "unit {} of step {} (group {}) belongs".format(
                                   item[0], item[1], item[6], self.next_unit, step, group))
        self.next_unit += 1
        if item[8]:
            kind, epoch = self.reading
            self.damage.named(kind, epoch, item[8])
            if kind == EVAL:  # masked, as padding: training counts what it stands in for
                self.damage.counted(EVAL, epoch, len(item[8]),
                                    self.spec.steps(EVAL) * self.spec.val.cut.local_batch)
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

    def damaged_images(self, epoch: Optional[int] = None) -> Dict[str, int]:
        return self.stream.damage.figures(epoch)

    def damaged_image_policy(self, text: str) -> None:
        self.stream.damage.policy = damage.parse_policy(text)
