"""MNIST in the standard IDX format (gzipped or not), from a local folder or ``gs://``.

Files: ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``, each optionally with ``.gz``. From ``gs://`` they are downloaded
once into a local cache (re-used when the size matches). A missing, truncated or malformed file
is a ``DataError`` naming it.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from trainer.errors import DataError
from trainer.storage import open_dir

MEAN, STD = 0.1307, 0.3081
_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def default_cache_dir() -> str:
    """Where gs:// files are cached: ``~/.cache/tpu-xla-trainer`` (resolved at call time)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "tpu-xla-trainer")


def load_splits(data_dir: str, splits: Sequence[str] = ("train", "test"),
                cache_dir: Optional[str] = None) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """For each split, normalised images (N, 1, 28, 28) float32 and labels (N,) int64.

    ``data_dir`` is opened once, so a gs:// source costs one storage client for all files.
    """
    source = _Source(data_dir, cache_dir or default_cache_dir())
    return [_load_split(source, split) for split in splits]


def _load_split(source: "_Source", split: str) -> Tuple[torch.Tensor, torch.Tensor]:
    images_name, labels_name = FILES[split]
    images = read_idx(source.local_copy(images_name), _IMAGES_MAGIC)
    labels = read_idx(source.local_copy(labels_name), _LABELS_MAGIC)
    if len(images) != len(labels):
        raise DataError("{} has {} images but {} has {} labels".format(
            images_name, len(images), labels_name, len(labels)),
            "the two files of a split must come from the same data set")
    if len(images) == 0:
        raise DataError("{} holds no examples".format(images_name),
                        "check that --data_dir holds the full MNIST files")
    if labels.max() > 9:
        raise DataError("{} holds label {} (MNIST labels are 0-9)".format(labels_name,
                                                                          labels.max()),
                        "check that --data_dir holds MNIST")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).sub_(MEAN).div_(STD).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class _Source:
    """A local folder, or a gs:// prefix whose files are downloaded once into a cache."""

    def __init__(self, data_dir: str, cache_dir: str) -> None:
        self.data_dir, self.cache_dir = data_dir, cache_dir
        self.directory = open_dir(data_dir) if data_dir.startswith("gs://") else None

    def local_copy(self, name: str) -> str:
        """Path of a local file holding ``name`` or ``name.gz``."""
        for candidate in (name + ".gz", name):
            # A local --data_dir is only read: not opened as a Directory, which creates it.
            path = (self.directory.fetch(candidate, self.cache_dir) if self.directory
                    else os.path.join(self.data_dir, candidate))
            if path is not None and os.path.isfile(path):
                return path
        raise DataError("MNIST file {} (or {}.gz) not found in {}".format(
            name, name, self.data_dir),
            "--data_dir must hold the four standard MNIST IDX files; or use --fake_data")


def read_idx(path: str, magic: int) -> np.ndarray:
    """Parse an IDX file (big-endian header: magic, dimension sizes; then uint8 data)."""
    name = os.path.basename(path)
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except (OSError, EOFError, zlib.error) as error:
        raise DataError("cannot read {}: {}".format(name, error),
                        "the file is damaged: download it again")
    dims = magic & 0xFF
    header = 4 + 4 * dims
    if len(data) < header or struct.unpack(">I", data[:4])[0] != magic:
        raise DataError("{} is not an IDX file of the expected kind (magic {})".format(
            name, magic), "check that the file is the right MNIST file")
    shape = struct.unpack(">" + "I" * dims, data[4:header])
    expected = int(np.prod(shape))
    if len(data) - header != expected:
        raise DataError("{} is truncated or padded: {} data bytes for shape {}".format(
            name, len(data) - header, shape), "download the file again")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def random_shift(batch: torch.Tensor, generator: torch.Generator, pixels: int = 2
                 ) -> torch.Tensor:
    """Shift each image by up to ``pixels`` in x and y (zero padding in normalised space):
    cheap augmentation that matters with only a few thousand training digits."""
    padded = torch.nn.functional.pad(batch, (pixels,) * 4, value=-MEAN / STD)
    size = batch.shape[-1]
    offsets = torch.randint(0, 2 * pixels + 1, (len(batch), 2), generator=generator)
    rows = (offsets[:, 0:1] + torch.arange(size)).unsqueeze(2)  # (N, size, 1)
    cols = (offsets[:, 1:2] + torch.arange(size)).unsqueeze(1)  # (N, 1, size)
    index = torch.arange(len(batch)).view(-1, 1, 1)
    return padded[index, 0, rows, cols].unsqueeze(1)
