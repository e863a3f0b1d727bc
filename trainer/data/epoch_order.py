"""Which examples every step of an epoch holds, and which host and data worker reads them:
arithmetic on the split's shard sizes, without reading any data. The reader, the plan
(``trainer.data.plan``) and the tests all call these functions, so what the plan counts is
what is read.

**Training.** The split's examples are cut into *blocks* of ``BLOCK_EXAMPLES`` consecutive
examples of one shard (a shard's last block may be shorter). The blocks are shuffled by
(seed, epoch) and laid end to end; cut into global batches, that sequence is the epoch:
``N // global_batch`` steps, every example at most once, and the last ``N % global_batch``
(fewer than one global batch) sit the epoch out, different ones each epoch. Shards are
random samples of their split (``make_shards`` shuffles before cutting), so a block is one
too, and a global batch of B examples holds about B / 32 blocks from all over the split.

**Evaluation.** The split's examples in shard order (in blocks, unshuffled), cut into global
batches; the last one is completed with padding (``ceil(N / batch)`` steps).

**Hosts and workers.** Host ``h`` of ``H`` loads positions ``[h * L, (h + 1) * L)`` of every
global batch (``L = batch // H``, the devices of a host being consecutive), a stretch of
consecutive positions: a few *pieces*, one per block it touches, each a run of consecutive
examples of one shard (one ranged read). Each of a host's steps is cut into *work units* of
whole pieces (``units``: at most one per data worker), which ``trainer.data.stream`` deals to
the workers in turn and puts back together in order. So what a step holds depends on the
seed, the epoch and the global batch only: neither the hosts nor the workers change it, and
a resumed run (any worker count) continues with the same examples. (``runs`` enumerates
whole steps dealt to workers in turn: the tests' and benchmarks' view of an epoch.)
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass
from typing import Iterator, List, Sequence, Tuple

# Examples per block: small enough that a global batch mixes examples from all over the split,
# large enough that a ranged read (about 3.5 MB of ImageNet) costs little more than its bytes.
BLOCK_EXAMPLES = 32

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


def train_order(counts: Sequence[int], seed: int, epoch: int,
                size: int = BLOCK_EXAMPLES) -> ExampleOrder:
    """The training order of ``epoch``: the blocks shuffled by (seed, epoch)."""
    shuffled = blocks(counts, size)
    random.Random("blocks/{}/{}".format(seed, epoch)).shuffle(shuffled)
    return ExampleOrder(shuffled)


def eval_order(counts: Sequence[int], size: int = BLOCK_EXAMPLES) -> ExampleOrder:
    """Every example in shard order, in blocks of ``size`` as in training (the order is the
    shards', the blocks only let a step be cut into work units that several data workers
    build at once, and bound what one of them holds)."""
    return ExampleOrder(blocks(counts, size))


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


def parts_of(pieces: Sequence[Piece], parts: int) -> List[List[Piece]]:
    """``pieces`` (one host's part of a step) as at most ``parts`` groups of consecutive whole
    pieces, about equal in examples: work units that several data workers build at once, so
    that no step waits for one worker to decode a whole local batch. Pieces are never cut, so
    the reads are those of the whole step. No pieces (a padded evaluation step past the end of
    the split): one empty group."""
    pieces = list(pieces)
    if not pieces:
        return [[]]
    parts = max(1, min(parts, len(pieces)))
    total = sum(end - first for _, first, end in pieces)
    groups: List[List[Piece]] = [[]]
    done = 0
    for number, piece in enumerate(pieces):
        behind = len(pieces) - number  # pieces left, this one included
        if groups[-1] and len(groups) < parts and (
                done * parts >= total * len(groups) or behind <= parts - len(groups)):
            groups.append([])
        groups[-1].append(piece)
        done += piece[2] - piece[1]
    return groups


def units(order: ExampleOrder, cut: Cut, host: int, first_step: int,
          parts: int) -> Iterator[Unit]:
    """The work units of host ``host``'s steps ``first_step`` on, in order: each step's pieces
    in at most ``parts`` groups (``parts_of``). Put together in order, a step's units are its
    local batch, whatever ``parts`` is."""
    for step in range(first_step, cut.steps):
        groups = parts_of(order.take(*cut.host_range(step, host)), parts)
        for part, pieces in enumerate(groups):
            yield step, part, len(groups), pieces
