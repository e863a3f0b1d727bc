"""The ImageNet trainer's data from shards (``trainer.data.make_shards``), local or streamed from
``gs://`` through the project's storage layer (its one retry policy).

What each step holds is ``trainer.data.epoch_order``'s: an epoch is the training split's
blocks of consecutive examples of a shard (their boundaries moved by (seed, epoch)),
shuffled by (seed, epoch), cut into global batches (``N // global batch`` steps: every
example once, fewer than one global batch left out), mixed position by position in groups
of ``MIXING_STEPS`` steps; each host loads its part of every global batch from a few ranged reads
(``trainer.data.shard_reads``, located and checked by the index's example tables), built by
its data workers as one stream for the whole run (``trainer.data.stream``: the workers start
once, split each step into work units of whole pieces, and build the evaluation and the next
epoch while an epoch ends). So the order depends on the seed and the
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

import logging
from typing import Dict, List

from trainer import storage
from trainer.batches import WHOLE, HostPart
from trainer.data import epoch_order, images, jpeg_decode, plan, shared_memory, stream
from trainer.data.shard_index import Shard, load_index, split_identity
from trainer.data.shard_reads import ShardReader
from trainer.errors import DataError, TrainerError

log = logging.getLogger("trainer")


class ShardSource(stream.StreamSource):
    """Random-resized-crop + flip for training, 256/224 centre crop for evaluation, uint8."""

    from_shards = True

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
        self.layout = {"seed": seed, "block_examples": epoch_order.BLOCK_EXAMPLES,
                       "block_boundaries": epoch_order.BOUNDARY_SCHEME,
                       "mixing_steps": epoch_order.MIXING_STEPS}
        warn_if_stored_small(self.index.max_side, image_size, self.root.uri)
        self.plan = plan.make_plan(self.index, plan.SliceShape(
            host.count, devices or host.count, batch_size, self.eval_batch_size, num_workers,
            image_size), seed)
        # The step ring's size does not depend on the workers: none are a worker's own share.
        shared_memory.check(self.plan.shared_memory, num_workers, 0)
        self.stream = stream.Stream(stream.StreamSpec(
            stream.Split(self.train, _order(train, shuffled=True), self.cut,
                         epoch_order.MIXING_STEPS),
            stream.Split(self.val, _order(val, shuffled=False), self.eval_cut),
            host.index, seed, image_size, num_workers))

    def describe(self) -> str:
        return "{} shards ({} train, {} val examples{}), {} data worker(s) per host, {}".format(
            self.root.uri, self.index.examples("train"), self.index.examples("val"),
            ", stored at most {} px on the shorter side".format(self.index.max_side)
            if self.index.max_side else "", self.workers, jpeg_decode.described())

    def identity(self) -> Dict[str, object]:
        return split_identity(self.index, "train")

    def plan_lines(self) -> List[str]:
        return plan.plan_lines(self.plan)


def warn_if_stored_small(max_side: int, image_size: int, uri: str) -> None:
    """Log a warning, with the command that fixes it, when shards stored with their shorter
    side at most ``max_side`` px (``make_shards --max_shorter_side``; 0: as they came) are
    smaller than a run at ``image_size`` needs (``images.least_shorter_side``): every
    evaluation image, and every large training crop, would be upsampled."""
    needed = images.least_shorter_side(image_size)
    if not max_side or max_side >= needed:
        return
    log.warning("data: %s stores images with their shorter side at most %d px (make_shards "
                "--max_shorter_side=%d), but --image_size=%d needs %d px (the evaluation's "
                "256/224 centre crop): every evaluation image and every large training crop is "
                "upsampled. HINT: write the shards again with python -m "
                "trainer.data.make_shards --source=SOURCE --dest=NEW_DIR "
                "--max_shorter_side=%d (or without it), or run at --image_size=%d or less",
                uri, max_side, max_side, image_size, needed, needed,
                max_side * 224 // 256)


def _order(shards: List[Shard], shuffled: bool) -> epoch_order.ShardOrder:
    return epoch_order.ShardOrder(tuple(shard.count for shard in shards), shuffled)
