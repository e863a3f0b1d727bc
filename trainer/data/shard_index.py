"""The index of a shard set: ``index.json`` next to the shards, written last, so a set
without it is incomplete. It records the format version, the class names (label i is
``classes[i]`` for every split) and, per split, each shard's file name and example count.

    {"format": "tpu-xla-shards", "version": 1, "classes": [...],
     "splits": {"train": [{"name": "train-000000.tar", "count": 1024}, ...], "val": [...]},
     "skipped": ["train/n01/bad.JPEG", ...]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from trainer.errors import DataError

INDEX_NAME = "index.json"
FORMAT, VERSION = "tpu-xla-shards", 1
SPLITS = ("train", "val")


@dataclass
class ShardIndex:
    classes: List[str]
    splits: Dict[str, List[Tuple[str, int]]]  # split -> [(shard file name, examples)]
    skipped: List[str] = field(default_factory=list)  # source files that could not be decoded

    def shards(self, split: str) -> List[Tuple[str, int]]:
        return list(self.splits.get(split, []))

    def examples(self, split: str) -> int:
        return sum(count for _, count in self.shards(split))

    def to_json(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "version": VERSION, "classes": self.classes,
            "splits": {split: [{"name": name, "count": count} for name, count in shards]
                       for split, shards in self.splits.items()},
            "skipped": self.skipped}, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "ShardIndex":
        """Parse ``data`` (the file ``where``); a DataError (65) names what is wrong."""
        try:
            raw = json.loads(data.decode())
            if raw.get("format") != FORMAT:
                raise ValueError("not a {} index".format(FORMAT))
            if raw.get("version") != VERSION:
                raise DataError("{} has format version {}; this trainer reads version {}"
                                .format(where, raw.get("version"), VERSION),
                                "write the shards again with this image's "
                                "python -m trainer.data.make_shards")
            classes = [str(name) for name in raw["classes"]]
            splits = {str(split): [(str(entry["name"]), int(entry["count"]))
                                   for entry in shards]
                      for split, shards in raw["splits"].items()}
            return cls(classes, splits, [str(name) for name in raw.get("skipped", [])])
        except DataError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise DataError("{} is not a shard index: {}".format(where, error),
                            "point --data_dir at a folder written by "
                            "python -m trainer.data.make_shards")
