"""The ImageNet trainer's data from shards (``trainer.data.make_shards``), local or streamed from
``gs://`` through the project's storage layer (its one retry policy).

What each step holds is ``trainer.data.epoch_order``'s: an epoch is the training split's
blocks of consecutive examples of a shard, shuffled by (seed, epoch), cut into global
batches (``N // global batch`` steps: every example once, fewer than one global batch left
out); each host loads its part of every global batch, and its data workers take its steps in
turn, each building a whole local batch from a few ranged reads (``trainer.data.shard_reads``,
located and checked by the index's example tables). So the order depends on the seed and the
global batch only: resuming at step ``s`` (with any worker count, on any slice with the same
global batch) continues with the same examples, reading nothing before step ``s``.

Each training example is augmented with draws from (seed, epoch, its key), whichever worker
decodes it. Evaluation reads the ``val`` split in shard order in global batches, the last
one padded (``IGNORE_LABEL``): every example counted once, in ``ceil(N / batch)`` steps.

Before the first worker starts, ``/dev/shm`` is checked against what the batches in flight
need (``trainer.data.shared_memory``), and the plan's figures are logged
(``trainer.data.plan``).
"""

from __future__ import annotations

from typing import Callable, Iterator, List

import torch
from torch.utils.data import IterableDataset, get_worker_info

from trainer import storage
from trainer.batches import WHOLE, Batch, DataSource, HostPart, pad_batch
from trainer.data import epoch_order, images, loader, plan, shared_memory
from trainer.data.shard_index import load_index
from trainer.data.shard_reads import ShardReader
from trainer.errors import DataError, TrainerError

# (example name SHARD#KEY, image bytes) -> uint8 image; a DataError names the example.
Decode = Callable[[str, bytes], torch.Tensor]


class ShardSource(DataSource):
    """Random-resized-crop + flip for training, 256/224 centre crop for evaluation, uint8."""

    def __init__(self, data_dir: str, image_size: int, batch_size: int, num_workers: int,
                 seed: int, eval_batch_size: int = 0, host: HostPart = WHOLE,
                 devices: int = 0) -> None:
        self.root = storage.open_dir(data_dir)
        self.index = load_index(self.root)
        self.num_classes = len(self.index.classes)
        self.image_size, self.seed, self.host, self.workers = image_size, seed, host, num_workers
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        train, val = self.index.entries("train"), self.index.entries("val")
        if not self.index.examples("train") or not self.index.examples("val"):
            raise DataError("{} has {} train and {} val examples".format(
                self.root.uri, self.index.examples("train"), self.index.examples("val")),
                "write the shards of a tree with both splits (make_shards)")
        self.train = ShardReader(self.root, train)
        self.val = ShardReader(self.root, val)
        self.cut = epoch_order.Cut(self.index.examples("train"), batch_size, host.count)
        if not self.cut.steps:
            raise TrainerError("--batch_size is too large for {}: a global batch of {} is more "
                               "than its {} training examples".format(
                                   self.root.uri, batch_size, self.cut.examples),
                               "lower --batch_size")
        self.eval_cut = epoch_order.Cut(self.index.examples("val"), self.eval_batch_size,
                                        host.count, padded=True)
        self.steps_per_epoch, self.eval_steps = self.cut.steps, self.eval_cut.steps
        # The order depends on these besides the global batch (checked when a run resumes).
        self.layout = {"seed": seed, "block_examples": epoch_order.BLOCK_EXAMPLES}
        self.plan = plan.make_plan(self.index, plan.SliceShape(
            host.count, devices or host.count, batch_size, self.eval_batch_size, num_workers,
            image_size), seed)
        shared_memory.check(self.plan.shared_memory, num_workers,
                            plan.PREFETCH_BATCHES * self.plan.batch_bytes)

    def describe(self) -> str:
        return "{} shards ({} train, {} val examples), {} data worker(s) per host".format(
            self.root.uri, self.index.examples("train"), self.index.examples("val"),
            self.workers)

    def plan_lines(self) -> List[str]:
        return plan.plan_lines(self.plan)

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        size, seed = self.image_size, self.seed
        order = epoch_order.train_order([shard.count for shard in self.train.shards], seed,
                                        epoch)
        root = self.root
        return self._load(self.train, order, self.cut, start_step, lambda name, data: (
            images.train_image(data, size, images.draws(seed, epoch, name), root.join(name))))

    def eval_batches(self) -> Iterator[Batch]:
        size, root = self.image_size, self.root
        order = epoch_order.eval_order([shard.count for shard in self.val.shards])
        return self._load(self.val, order, self.eval_cut, 0,
                          lambda name, data: images.eval_image(data, size, root.join(name)))

    def _load(self, reader: ShardReader, order: epoch_order.ExampleOrder,
              cut: epoch_order.Cut, first_step: int, decode: Decode) -> Iterator[Batch]:
        """This host's batches of steps ``first_step`` on: each loader worker builds the
        steps ``epoch_order.runs`` deals it, the loader takes them in turn."""
        workers = epoch_order.loader_workers(self.workers, first_step, cut.steps)

        def stream(position: int) -> Callable[[], Iterator[Batch]]:
            return lambda: _batches(reader, list(epoch_order.runs(
                order, cut, self.host.index, first_step, workers, position)), decode,
                cut.local_batch, self.image_size)

        streams = [stream(position) for position in range(max(1, workers))]
        if not workers:
            return streams[0]()
        return loader.load(_Streams(streams), workers, batch_size=None,
                           prefetch_factor=plan.PREFETCH_BATCHES)


def _batches(reader: ShardReader, runs: List[epoch_order.Run], decode: Decode, rows: int,
             size: int) -> Iterator[Batch]:
    """A batch of ``rows`` (the last padded, in evaluation) per run, each example decoded
    by ``decode(name, bytes)`` and its bytes dropped once decoded."""
    for examples in reader.examples_of(runs):
        x = _batch_tensor(len(examples), size)
        labels = []
        for row, (name, data, label) in enumerate(examples):
            x[row] = decode(name, data)
            examples[row] = None
            labels.append(label)
        yield pad_batch(x, torch.tensor(labels, dtype=torch.int64), rows)


def _batch_tensor(rows: int, size: int) -> torch.Tensor:
    """An empty uint8 batch; in a data worker, in shared memory already, so handing it to
    the trainer copies nothing (and the worker never holds it twice)."""
    x = torch.empty((rows, 3, size, size), dtype=torch.uint8)
    return x.share_memory_() if get_worker_info() is not None else x


class _Streams(IterableDataset):
    """Worker ``i`` of a DataLoader iterates ``plans[i]()``."""

    def __init__(self, plans: List[Callable[[], Iterator[Batch]]]) -> None:
        self.plans = plans

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        return self.plans[info.id if info else 0]()
