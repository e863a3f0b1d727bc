"""ImageNet-style data from a local folder: ``DIR/train/<class>/*.JPEG`` and
``DIR/val/<class>/*.JPEG`` (torchvision ``ImageFolder``). On Vertex AI a bucket mounted with
Cloud Storage FUSE is a local path (``/gcs/BUCKET/...``)."""

from __future__ import annotations

import os
from typing import Iterator, List

import torch
from torch.utils.data import DataLoader, Sampler

from trainer.batches import WHOLE, Batch, DataSource, HostPart, epoch_order, pad_batch, steps_in
from trainer.errors import DataError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


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


class ImageFolderSource(DataSource):
    """Random-resized-crop + flip for training, resize + centre crop for evaluation."""

    def __init__(self, data_dir: str, image_size: int, batch_size: int, num_workers: int,
                 seed: int, eval_batch_size: int = 0, host: HostPart = WHOLE) -> None:
        from torchvision import datasets, transforms

        if data_dir.startswith("gs://"):
            raise DataError("ImageNet --data_dir must be a local folder, got {}".format(data_dir),
                            "on Vertex AI use the Cloud Storage FUSE path /gcs/BUCKET/...")
        normalize = transforms.Normalize(MEAN, STD)
        self.train = _image_folder(datasets, os.path.join(data_dir, "train"), transforms.Compose([
            transforms.RandomResizedCrop(image_size), transforms.RandomHorizontalFlip(),
            transforms.ToTensor(), normalize]))
        self.val = _image_folder(datasets, os.path.join(data_dir, "val"), transforms.Compose([
            transforms.Resize(int(image_size * 256 / 224)), transforms.CenterCrop(image_size),
            transforms.ToTensor(), normalize]))
        _same_classes(self.train, self.val, data_dir)
        self.batch_size, self.num_workers, self.seed = batch_size, num_workers, seed
        self.eval_batch_size = eval_batch_size or batch_size
        self.host, self.image_size = host, image_size
        self.num_classes = len(self.train.classes)
        self.steps_per_epoch = steps_in(len(self.train), batch_size,
                                        os.path.join(data_dir, "train"))
        self.eval_steps = -(-len(self.val) // self.eval_batch_size)

    def train_batches(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        sampler = _EpochSampler(len(self.train), self.seed, epoch, start_step, self.batch_size,
                                self.host)
        return iter(DataLoader(self.train, self.batch_size // self.host.count, sampler=sampler,
                               drop_last=True, num_workers=self.num_workers))

    def eval_batches(self) -> Iterator[Batch]:
        """This host's part of every padded global evaluation batch: its real examples, then
        padding (a host whose part of the last batch is all padding loads nothing for it)."""
        size, mine = self.eval_batch_size, self.host.of(self.eval_batch_size)
        parts = [list(range(len(self.val))[step * size:(step + 1) * size][mine])
                 for step in range(self.eval_steps)]
        loaded = iter(DataLoader(self.val, batch_sampler=[part for part in parts if part],
                                 num_workers=self.num_workers))
        empty = (torch.zeros((0, 3, self.image_size, self.image_size)),
                 torch.zeros((0,), dtype=torch.int64))
        for part in parts:
            x, y = next(loaded) if part else empty
            yield pad_batch(x, y, mine.stop - mine.start)


def _same_classes(train, val, data_dir: str) -> None:
    """DataError (65) unless train/ and val/ hold the same class folders: each ImageFolder
    numbers its own folders in sorted order, so one missing or extra folder in val/ would
    shift every label after it, silently."""
    if train.class_to_idx == val.class_to_idx:
        return
    only_train = sorted(set(train.classes) - set(val.classes))
    only_val = sorted(set(val.classes) - set(train.classes))
    raise DataError(
        "{}/train and {}/val have different class folders: {} only in train/, {} only in "
        "val/".format(data_dir, data_dir, _some(only_train), _some(only_val)),
        "give val/ exactly the class folders of train/ (labels are the folders' sorted order)")


def _some(names: List[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:3])
    return shown + (" and {} more".format(len(names) - 3) if len(names) > 3 else "")


def _image_folder(datasets, path: str, transform):
    if not os.path.isdir(path):
        raise DataError("ImageNet folder {} not found".format(path),
                        "--data_dir must contain train/ and val/ with one folder per class; "
                        "or use --fake_data")
    try:
        return datasets.ImageFolder(path, transform=transform)
    except (FileNotFoundError, RuntimeError) as error:
        raise DataError("cannot read {}: {}".format(path, error),
                        "each class needs a folder with .jpg/.png images")
