"""The ImageNet trainer's data from a class-folder tree: ``DIR/train/<class>/*.JPEG`` and
``DIR/val/<class>/*.JPEG`` (torchvision ``ImageFolder``'s layout). On Vertex AI a bucket mounted
with Cloud Storage FUSE is a local path (``/gcs/BUCKET/...``); a ``gs://`` tree is read too, one
request per image, which is slow: convert it to shards (``trainer.data.make_shards``).

The order is ``batches.epoch_order`` of the whole training set, cut into global batches and
each host taking its part, so it depends only on the seed and the global batch; images are
decoded as ``trainer.data.images`` does (uint8, normalized on the device).
"""

from __future__ import annotations

from typing import Iterator, List

import torch
from torch.utils.data import Dataset, Sampler

from trainer import storage
from trainer.batches import WHOLE, Batch, DataSource, HostPart, epoch_order, pad_batch, steps_in
from trainer.data import images, loader
from trainer.data.folder_tree import Labelled, read_tree


class _EpochSampler(Sampler):
    """The epoch's deterministic order, starting at a given global batch (resume), of whole
    global batches of ``batch``: this host's part of each."""

    def __init__(self, size: int, seed: int, epoch: int, start_step: int, batch: int,
                 host: HostPart) -> None:
        order = epoch_order(size, seed, epoch)
        mine = host.of(batch)
        self.order: List[int] = [
            index for step in range(start_step, size // batch)
            for index in order[step * batch:(step + 1) * batch][mine].tolist()]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class _Images(Dataset):
    """Item ``i``: the decoded image ``files[i]`` and its label. Training draws the crop from
    (seed, epoch, i), so the same example gets the same crop whichever worker decodes it."""

    def __init__(self, root: storage.Directory, files: Labelled, size: int,
                 train_seed=None) -> None:
        self.root, self.files, self.size, self.train_seed = root, files, size, train_seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int):
        name, label = self.files[index]
        data, where = self.root.read_bytes(name), self.root.join(name)
        if self.train_seed is None:
            return images.eval_image(data, self.size, where), label
        return images.train_image(data, self.size,
                                  images.draws(self.train_seed, self.epoch, index), where), label


class FolderSource(DataSource):
    """Random-resized-crop + flip for training, 256/224 centre crop for evaluation, uint8."""

    def __init__(self, data_dir: str, image_size: int, batch_size: int, num_workers: int,
                 seed: int, eval_batch_size: int = 0, host: HostPart = WHOLE) -> None:
        root = storage.open_dir(data_dir)
        self.classes, files = read_tree(root)
        self.num_classes = len(self.classes)
        self.train = _Images(root, files["train"], image_size, train_seed=seed)
        self.val = _Images(root, files["val"], image_size)
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.eval_batch_size = eval_batch_size or batch_size
        self.host, self.image_size = host, image_size
        self.steps_per_epoch = steps_in(len(self.train), batch_size, root.join("train"))
        self.eval_steps = -(-len(self.val) // self.eval_batch_size)

    def describe(self) -> str:
        return "{} class folders ({} train, {} val images), {} data worker(s)".format(
            self.train.root.uri, len(self.train), len(self.val), self.num_workers)

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        self.train.epoch = epoch
        sampler = _EpochSampler(len(self.train), self.seed, epoch, start_step, self.batch_size,
                                self.host)
        return loader.load(self.train, self.num_workers, batch_size=self.batch_size //
                           self.host.count, sampler=sampler, drop_last=True)

    def eval_batches(self) -> Iterator[Batch]:
        """This host's part of every padded global evaluation batch: its real examples, then
        padding (a host whose part of the last batch is all padding loads nothing for it)."""
        size, mine = self.eval_batch_size, self.host.of(self.eval_batch_size)
        parts = [list(range(len(self.val))[step * size:(step + 1) * size][mine])
                 for step in range(self.eval_steps)]
        loaded = loader.load(self.val, self.num_workers,
                             batch_sampler=[part for part in parts if part])
        empty = (torch.zeros((0, 3, self.image_size, self.image_size), dtype=torch.uint8),
                 torch.zeros((0,), dtype=torch.int64))
        for part in parts:
            x, y = next(loaded) if part else empty
            yield pad_batch(x, y, mine.stop - mine.start)
