"""Shard indexes without shards: an index shaped like ImageNet-1k's (1,281 train shards of
1,000 examples and one of 167; 50 val shards of 1,000), with example sizes drawn like its
JPEGs', for plans and order arithmetic that read no data."""

from __future__ import annotations

import numpy as np

from trainer.data.shard_index import Shard, ShardIndex

IMAGENET_TRAIN, IMAGENET_VAL = 1_281_167, 50_000
# make_shards' three members (image, label, source record): three 512-byte tar headers, the
# label's and the record's blocks and, on average, half a block of the image's padding.
EXAMPLE_OVERHEAD = 5 * 512 + 256


def split_shards(split: str, examples: int, per_shard: int, rng: np.random.Generator,
                 median_bytes: float) -> list:
    """Shards of ``per_shard`` examples (the last one the rest) whose example sizes are
    log-normal around ``median_bytes`` with a long tail of large photographs, padded to tar
    blocks."""
    shards = []
    for number, first in enumerate(range(0, examples, per_shard)):
        count = min(per_shard, examples - first)
        sizes = rng.lognormal(np.log(median_bytes), 0.55, count).astype(np.int64)
        sizes = (sizes + EXAMPLE_OVERHEAD + 511) // 512 * 512
        crcs = rng.integers(0, 2 ** 32, count, dtype=np.uint64)
        total = int(sizes.sum()) + 10240  # the end-of-archive blocks and record padding
        shards.append(Shard("{}-{:06d}.tar".format(split, number), count, total, 0,
                            sizes.astype("<u4").tobytes(), crcs.astype("<u4").tobytes()))
    return shards


def imagenet_index(seed: int = 0) -> ShardIndex:
    """An index shaped like ImageNet-1k's as ``make_shards`` writes it (1,000 per shard)."""
    rng = np.random.default_rng(seed)
    return ShardIndex(["n{:08d}".format(label) for label in range(1000)], {
        # ImageNet's JPEGs average about 108 KB (train, 138 GB) and 128 KB (val, 6.4 GB).
        "train": split_shards("train", IMAGENET_TRAIN, 1000, rng, 93e3),
        "val": split_shards("val", IMAGENET_VAL, 1000, rng, 110e3)})
