"""The ImageNet trainer's data from a class-folder tree: ``DIR/train/<class>/*.JPEG`` and
``DIR/val/<class>/*.JPEG`` (torchvision ``ImageFolder``'s layout). On Vertex AI a bucket mounted
with Cloud Storage FUSE is a local path (``/gcs/BUCKET/...``); a ``gs://`` tree is read too, one
request per image, which is slow: convert it to shards (``trainer.data.make_shards``).

The training order is ``batches.epoch_order`` of the whole split (a permutation by the seed and
the epoch), cut into global batches, each host taking its part; evaluation takes the split in
name order, its last global batch padded. So what a step holds depends only on the seed and
the global batch. The batches come from the same persistent stream as shards'
(``trainer.data.stream``: the workers start once for the whole run, build the evaluation and
the next epoch while an epoch ends, and split each step into work units); here a *piece* is
one file, ``(0, i, i + 1)`` for the split's ``i``-th, read with its neighbours of a unit a
few at a time. Training crops are drawn from (seed, epoch, file name), whichever worker
decodes the image; images are decoded as ``trainer.data.images`` does (uint8, normalized on
the device). No mixing: a permutation of single examples keeps no group together.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from trainer import storage
from trainer.batches import WHOLE, HostPart, epoch_order, steps_in
from trainer.data import jpeg_decode, plan, shared_memory, stream
from trainer.data.epoch_order import Cut, Piece
from trainer.data.folder_tree import Labelled, read_tree
from trainer.data.shard_examples import Example
from trainer.data.shard_reads import read_each
from trainer.errors import DataError


class FileOrder:
    """A split's files in the order ``positions`` (their numbers), each file its own piece."""

    def __init__(self, positions: torch.Tensor) -> None:
        self.positions = positions

    def take(self, begin: int, end: int) -> List[Piece]:
        return [(0, number, number + 1) for number in self.positions[begin:end].tolist()]


@dataclass(frozen=True)
class FolderOrder:
    """The order of a split of ``count`` files in an epoch (``stream.Split.order``): the
    epoch's permutation when ``shuffled``, else name order."""

    count: int
    shuffled: bool

    def __call__(self, seed: int, epoch: Optional[int]) -> FileOrder:
        if self.shuffled:
            return FileOrder(epoch_order(self.count, seed, epoch or 0))
        return FileOrder(torch.arange(self.count))


class FileReader:
    """Reads pieces of one split of a class-folder tree: file ``files[i]`` is piece
    ``(0, i, i + 1)``."""

    def __init__(self, root: storage.Directory, files: Labelled) -> None:
        self.root, self.files = root, files

    def read_run(self, pieces: List[Piece], stop: threading.Event) -> List[bytes]:
        return read_each(pieces, self._read, stop)

    def unpacked(self, pieces: List[Piece], run: List[bytes]) -> List[Example]:
        """(file name, bytes, label) of each piece; ``run`` is ``read_run``'s list."""
        found: List[Example] = []
        for (_, number, _), data in zip(pieces, run):
            name, label = self.files[number]
            found.append((name, data, label))
        return found

    def _read(self, piece: Piece) -> bytes:
        name = self.files[piece[1]][0]
        try:
            return self.root.read_bytes(name)
        except FileNotFoundError:
            raise DataError("{} is gone: it was listed when the run started".format(
                self.root.join(name)), "leave --data_dir as it is while a run reads it")


class FolderSource(stream.StreamSource):
    """Random-resized-crop + flip for training, 256/224 centre crop for evaluation, uint8."""

    def __init__(self, data_dir: str, image_size: int, batch_size: int, num_workers: int,
                 seed: int, eval_batch_size: int = 0, host: HostPart = WHOLE,
                 devices: int = 0) -> None:
        root = storage.open_dir(data_dir)
        self.classes, files = read_tree(root)
        self.num_classes = len(self.classes)
        self.train = FileReader(root, files["train"])
        self.val = FileReader(root, files["val"])
        self.batch_size, self.workers, self.seed = batch_size, num_workers, seed
        self.eval_batch_size = eval_batch_size or batch_size
        self.host, self.image_size = host, image_size
        self.steps_per_epoch = steps_in(len(self.train.files), batch_size, root.join("train"),
                                        devices or 1)
        cut = Cut(len(self.train.files), batch_size, host.count)
        eval_cut = Cut(len(self.val.files), self.eval_batch_size, host.count, padded=True)
        self.eval_steps = eval_cut.steps
        # The order depends on the seed besides the global batch (checked when a run resumes).
        self.layout = {"seed": seed}
        # Shared memory as for shards (the plan's step ring holds mixing groups of
        # MIXING_STEPS; this source's groups of one step need fewer: a margin).
        shape = plan.SliceShape(host.count, devices or host.count, batch_size,
                                self.eval_batch_size, num_workers, image_size)
        shared_memory.check(plan.shared_memory(shape), num_workers, 0)
        self.stream = stream.Stream(stream.StreamSpec(
            stream.Split(self.train, FolderOrder(len(self.train.files), True), cut),
            stream.Split(self.val, FolderOrder(len(self.val.files), False), eval_cut),
            host.index, seed, image_size, num_workers))

    def identity(self) -> Dict[str, object]:
        """The training files' names and classes (what a listing tells without reading every
        image): files added, removed or moved to another class give another digest."""
        digest = hashlib.sha256()
        for name, label in self.train.files:
            digest.update("{}\0{}\0".format(name, label).encode())
        return {"examples": len(self.train.files), "digest": digest.hexdigest()[:16]}

    def describe(self) -> str:
        return "{} class folders ({} train, {} val images), {} data worker(s), {}".format(
            self.train.root.uri, len(self.train.files), len(self.val.files), self.workers,
            jpeg_decode.described())
