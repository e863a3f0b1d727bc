"""Which examples every step of an epoch holds, and which host and data worker reads them:
arithmetic on the split's shard sizes, without reading any data. The reader, the plan
(``trainer.data.plan``) and the tests all call these functions, so what the plan counts is
what is read.

**Training.** The split's examples are cut into *blocks* of consecutive examples of one
shard: a shard of ``n`` examples has ``k = ceil(n / BLOCK_EXAMPLES)`` blocks, the first of a
length drawn by (seed, epoch, shard) from ``n - 32 (k - 1)`` to 32, the others 32 long but
the last (``moved_blocks``). So the boundaries move from epoch to epoch by up to 31 positions
while every shard keeps its ``k`` blocks (the same reads); a shard whose size is a multiple
of 32 keeps fixed ones. The blocks are shuffled by (seed, epoch) and laid end to end; cut
into global batches, that sequence is the epoch's *original steps*: ``N // global_batch``
of them, every example at most once, and the last ``N % global_batch`` (fewer than one
global batch) sit the epoch out, different ones each epoch. Shards are random samples of
their split (``make_shards`` shuffles before cutting), so a block is one too, and a global
batch of B examples holds about B / 32 blocks from all over the split.

The steps trained are the original steps mixed in *groups* of ``MIXING_STEPS`` consecutive
steps (``Mixing``; an epoch's last group may be shorter): at each position ``o`` of the
global batch, the examples of the group's steps at that position rotate by an offset drawn
from (seed, epoch, group, o). An example moves only between steps, never between positions,
so a host reads exactly what it would without mixing, over the group's steps. Moving
boundaries and mixing together make a block's examples part company: of an example's
batch-mates at batch 512 on ImageNet, 0.3 % are its batch-mates again the next epoch
(5.8 % with fixed blocks and no mixing; independent shuffles: 0.04 %).

**Evaluation.** The split's examples in shard order (in fixed blocks, unshuffled, unmixed),
cut into global batches; the last one is completed with padding (``ceil(N / batch)`` steps).

**Hosts and workers.** Host ``h`` of ``H`` loads positions ``[h * L, (h + 1) * L)`` of every
global batch (``L = batch // H``, the devices of a host being consecutive), a stretch of
consecutive positions: a few *pieces*, one per block it touches, each a run of consecutive
examples of one shard (one ranged read). Each of a host's original steps is cut into *work
units* of whole pieces (``units``: at most one per data worker), which
``trainer.data.stream`` deals to the workers in turn; the trainer's side puts the units of a
group's original steps back together in order and takes each trained step's rows from them
(``Mixing.rows``). So what a step holds depends on the seed, the epoch and the global batch
only: neither the hosts nor the workers change it, and a resumed run (any worker count)
continues with the same examples. (``runs`` enumerates whole original steps dealt to workers
in turn: the tests' and benchmarks' view of the reads of an epoch.)
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import random
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

# Examples per block: small enough that a global batch mixes examples from all over the split,
# large enough that a ranged read (about 3.5 MB of ImageNet) costs little more than its bytes.
BLOCK_EXAMPLES = 32
# Which blocks an epoch has (recorded by a checkpoint, so that a run resumed on another scheme
# is refused): 1, fixed ranges of a shard; 2, the first block's length drawn per (seed,
# epoch, shard) (``moved_blocks``).
BOUNDARY_SCHEME = 2
# Consecutive steps mixed position by position (``Mixing``). The trainer holds a group's
# decoded local batches before its first step, so fewer is less memory and less re-read on
# a resume; measured at batch 512 on ImageNet's shape with moving boundaries, the share of
# an example's batch-mates that are so again the next epoch is 0.48 % with 3 (too close to
# the 0.5 % it must stay under), 0.29 % with 4.
MIXING_STEPS = 4

Piece = Tuple[int, int, int]  # (shard number in the split, first example, end example)
Run = Tuple[int, List[Piece]]  # (step, the pieces of one host's part of that step)


class ExampleOrder:
    """A split's examples in one order, as consecutive pieces of shards: position ``p`` is
    the ``p``-th example of the order."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = list(pieces)
        self.starts = list(itertools.accumulate(
            itertools.chain((0,), (end - first for _, first, end in self.pieces))))
        self.examples = self.starts[-1]

    def take(self, begin: int, end: int) -> List[Piece]:
        """The examples at positions ``begin`` to ``end`` (exclusive) as pieces: the whole
        pieces between, and the parts of those the range starts or ends in."""
        taken: List[Piece] = []
        index = bisect.bisect_right(self.starts, begin) - 1
        while begin < end:
            shard, first, _ = self.pieces[index]
            skip = begin - self.starts[index]
            count = min(end, self.starts[index + 1]) - begin
            taken.append((shard, first + skip, first + skip + count))
            begin += count
            index += 1
        return taken


def blocks(counts: Sequence[int], size: int = BLOCK_EXAMPLES) -> List[Piece]:
    """Every shard's examples (``counts[s]`` in shard ``s``) in blocks of ``size``."""
    return [(shard, first, min(first + size, count))
            for shard, count in enumerate(counts) for first in range(0, count, size)]


def moved_blocks(counts: Sequence[int], draw: random.Random,
                 size: int = BLOCK_EXAMPLES) -> List[Piece]:
    """Every shard's examples in as many blocks as ``blocks`` cuts, the first of a length
    ``draw`` picks from what the last would be to ``size``, the others ``size`` long but
    the last: the boundaries move, the number of blocks (so of reads) does not."""
    moved: List[Piece] = []
    for shard, count in enumerate(counts):
        whole = -(-count // size)
        last = count - size * (whole - 1)
        first = draw.randint(last, size) if whole > 1 and last < size else size
        moved.append((shard, 0, min(first, count)))
        moved.extend((shard, begin, min(begin + size, count))
                     for begin in range(first, count, size))
    return moved


def train_order(counts: Sequence[int], seed: int, epoch: int,
                size: int = BLOCK_EXAMPLES) -> ExampleOrder:
    """The original steps' order of ``epoch``: the blocks, their boundaries moved and then
    shuffled by (seed, epoch)."""
    draw = random.Random("blocks/{}/{}".format(seed, epoch))
    shuffled = moved_blocks(counts, draw, size)
    draw.shuffle(shuffled)
    return ExampleOrder(shuffled)


def eval_order(counts: Sequence[int], size: int = BLOCK_EXAMPLES) -> ExampleOrder:
    """Every example in shard order, in blocks of ``size`` as in training (the order is the
    shards', the blocks only let a step be cut into work units that several data workers
    build at once, and bound what one of them holds)."""
    return ExampleOrder(blocks(counts, size))


@dataclass(frozen=True)
class ShardOrder:
    """The order of a split of shards (``counts[s]`` examples in shard ``s``) in an epoch, as
    ``trainer.data.stream`` asks for it (``order(seed, epoch)``): ``train_order`` when
    ``shuffled``, else ``eval_order``."""

    counts: Tuple[int, ...]
    shuffled: bool

    def __call__(self, seed: int, epoch: Optional[int]) -> ExampleOrder:
        if self.shuffled:
            return train_order(self.counts, seed, epoch or 0)
        return eval_order(self.counts)


@dataclass(frozen=True)
class Cut:
    """How an order of ``examples`` becomes steps: global batches of ``batch``, each in
    ``hosts`` equal consecutive parts. ``padded``: the last, partial batch is a step too (the
    reader pads it: evaluation); otherwise it is left out (training)."""

    examples: int
    batch: int
    hosts: int = 1
    padded: bool = False

    @property
    def steps(self) -> int:
        return -(-self.examples // self.batch) if self.padded else self.examples // self.batch

    @property
    def local_batch(self) -> int:
        return self.batch // self.hosts

    def host_range(self, step: int, host: int) -> Tuple[int, int]:
        """The positions of host ``host``'s part of step ``step`` (fewer, or none, in a
        padded last step)."""
        begin = step * self.batch + host * self.local_batch
        return min(begin, self.examples), min(begin + self.local_batch, self.examples)


_MASK = (1 << 64) - 1


def _scrambled(value: int) -> int:
    """A 64-bit integer whose bits all depend on ``value``'s (SplitMix64's finalizer): a
    draw for any position in O(1), without drawing those before it."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK
    return value ^ (value >> 31)


@dataclass(frozen=True)
class Mixing:
    """How the original steps of an epoch of ``steps`` become the steps trained: in groups
    of ``size`` consecutive steps (the last group may be shorter), the example at position
    ``o`` of the group's ``i``-th step trains at position ``o`` of its
    ``(i + r) mod g``-th, ``r`` drawn from (seed, epoch, group, o). ``size`` 1: no mixing
    (evaluation)."""

    seed: int
    epoch: Optional[int]
    steps: int
    size: int = MIXING_STEPS

    def group(self, step: int) -> range:
        """The steps of ``step``'s group: a trained step's examples come from these original
        steps, and those hold the examples of these trained steps."""
        first = step - step % self.size
        return range(first, min(first + self.size, self.steps))

    def sources(self, step: int, positions: Iterable[int]) -> List[int]:
        """The original step that each of ``positions`` (of the global batch) of trained
        step ``step`` comes from."""
        if not 0 <= step < self.steps:
            raise IndexError("step {} of an epoch of {}".format(step, self.steps))
        group = self.group(step)
        count = len(group)
        if count == 1:
            return [step for _ in positions]
        key = int.from_bytes(hashlib.blake2b("mixing/{}/{}/{}".format(
            self.seed, self.epoch, group.start // self.size).encode(), digest_size=8).digest(),
                             "little")
        at = step - group.start
        return [group.start + (at - _scrambled(key + 0x9E3779B97F4A7C15 * (position + 1)
                                               & _MASK) % count) % count
                for position in positions]

    def rows(self, step: int, cut: Cut, host: int) -> List[int]:
        """For each row of host ``host``'s part of trained step ``step``, its row in the
        group's original steps' local batches of that host laid end to end."""
        local = cut.local_batch
        begin = host * local
        start = self.group(step).start
        return [(source - start) * local + row for row, source in
                enumerate(self.sources(step, range(begin, begin + local)))]


def trained(order: ExampleOrder, cut: Cut, mixing: Mixing, step: int, host: int
            ) -> List[Tuple[int, int]]:
    """(shard, example) of each row of host ``host``'s part of trained step ``step``: what
    the stream builds, enumerated without data (the tests' view)."""
    held: List[Tuple[int, int]] = []
    for original in mixing.group(step):
        held.extend((shard, example) for shard, first, end
                    in order.take(*cut.host_range(original, host))
                    for example in range(first, end))
    return [held[row] for row in mixing.rows(step, cut, host)]


def dealt(first_step: int, steps: int, workers: int, position: int) -> range:
    """The steps of ``first_step`` to ``steps`` that the loader's worker ``position`` of
    ``workers`` (0: the training process itself) builds."""
    return range(first_step + position, steps, max(1, workers))


def runs(order: ExampleOrder, cut: Cut, host: int, first_step: int, workers: int,
         position: int) -> Iterator[Run]:
    """(step, pieces) of each step that worker ``position`` of host ``host`` reads, in the
    order it builds them: the one function that decides what is read."""
    for step in dealt(first_step, cut.steps, workers, position):
        yield step, order.take(*cut.host_range(step, host))


Unit = Tuple[int, int, int, List[Piece]]  # (step, part, parts of the step, its pieces)


def parts_of(pieces: Sequence[Piece], parts: int, phase: int = 0) -> List[List[Piece]]:
    """``pieces`` (one host's part of a step) as at most ``parts`` groups of consecutive whole
    pieces, about equal in examples: work units that several data workers build at once, so
    that no step waits for one worker to decode a whole local batch. Pieces are never cut, so
    the reads are those of the whole step. No pieces (a padded evaluation step past the end of
    the split): one empty group.

    Where the pieces do not divide evenly, some groups take one piece more; ``phase`` (the
    step's number) decides which: the cuts fall ``shift`` examples before the equal shares'
    marks, ``shift`` turning with the phase from none to one example short of the largest
    piece (so pieces of one example, a class folder's files, are cut as without it).
    A worker builds the same part of every step (``stream.worker_items``), so without the
    turn the first part was the large one at every step and its worker set the stream's pace
    (docs/benchmarks.md#work-units-per-worker). A group holds less than a share and a piece:
    the first and the middle ones end at the first piece boundary past their mark, and the
    last starts at most ``shift`` before its mark."""
    pieces = list(pieces)
    if not pieces:
        return [[]]
    parts = max(1, min(parts, len(pieces)))
    total = sum(end - first for _, first, end in pieces)
    largest = max(end - first for _, first, end in pieces)
    shift = (phase % parts) * (largest - 1) // max(1, parts - 1)
    groups: List[List[Piece]] = [[]]
    done = 0
    for number, piece in enumerate(pieces):
        behind = len(pieces) - number  # pieces left, this one included
        if groups[-1] and len(groups) < parts and (
                (done + shift) * parts >= total * len(groups) or
                behind <= parts - len(groups)):
            groups.append([])
        groups[-1].append(piece)
        done += piece[2] - piece[1]
    return groups


def units(order: ExampleOrder, cut: Cut, host: int, first_step: int, parts: int,
          mixing: Optional[Mixing] = None, end: Optional[int] = None) -> Iterator[Unit]:
    """The work units of host ``host``'s original steps that trained steps ``first_step`` to
    ``end`` (default: the epoch's end) need, in order: under ``mixing`` a trained step needs
    its whole group, so they run from the start of ``first_step``'s group to the end of
    ``end - 1``'s; none when no step is left (a run stopped after an epoch's last step).
    Each step's pieces come in at most ``parts`` groups (``parts_of``). Put together in
    order, an original step's units are its local batch, whatever ``parts`` is;
    ``mixing.rows`` then takes each trained step's rows from its group's."""
    end = cut.steps if end is None else min(end, cut.steps)
    if first_step >= end:
        return
    if mixing is not None:
        first_step, end = mixing.group(first_step).start, mixing.group(end - 1).stop
    for step in range(first_step, end):
        groups = parts_of(order.take(*cut.host_range(step, host)), parts, step)
        for part, pieces in enumerate(groups):
            yield step, part, len(groups), pieces
