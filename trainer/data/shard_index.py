"""The index of a shard set: ``index.json`` next to the shards, written last, so a set
without it is incomplete. It records the format version, the class names (label i is
``classes[i]`` for every split) and, per split, each shard's file name, example count, size
and *example table*: where each example's bytes are in the file, so that a reader can fetch
any run of consecutive examples with one ranged read, and check what arrived.

    {"format": "tpu-xla-shards", "version": 2, "classes": [...],
     "splits": {"train": [{"name": "train-000000.tar", "count": 1000, "bytes": 112640000,
                           "start": 0, "sizes": "BASE64", "crc32": "BASE64"}, ...],
                "val": [...]},
     "skipped": ["train/n01/bad.JPEG", ...]}

An example is the run of tar members that share its key (its files, e.g. ``KEY.jpg`` and
``KEY.cls``), headers and padding included: example ``i`` of a shard starts at ``start`` plus
the sizes of the examples before it. ``sizes`` and ``crc32`` are base64 of little-endian
uint32 arrays, one entry per example: its byte count and the CRC-32 (zlib's) of those bytes.
Packed, they cost 8 bytes an example (about 14 MB of JSON for ImageNet's 1.33 million), parse
in milliseconds and stay one bytes object per shard in memory, which forked data workers
share.

Version 1 (no example tables) is refused with a hint: ``python -m trainer.data.reindex``
writes the tables of existing shards (reading each once) without converting anything again.
"""

from __future__ import annotations

import array
import base64
import hashlib
import io
import itertools
import json
import sys
import tarfile
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from trainer.data.tar_members import key_and_extension
from trainer.errors import DataError

INDEX_NAME = "index.json"
FORMAT, VERSION = "tpu-xla-shards", 2
SPLITS = ("train", "val")


def _packed(values: List[int]) -> bytes:
    table = array.array("I", values)
    if sys.byteorder != "little":
        table.byteswap()
    return table.tobytes()


def _unpacked(data: bytes) -> "array.array":
    table = array.array("I")
    table.frombytes(data)
    if sys.byteorder != "little":
        table.byteswap()
    return table


@dataclass
class Shard:
    """One shard of a split: its file ``name``, ``count`` examples, ``size`` bytes, and its
    example table (``start``, then per example its byte count and CRC-32, packed)."""

    name: str
    count: int
    size: int
    start: int
    sizes: bytes  # packed uint32 per example: its bytes in the file
    crcs: bytes  # packed uint32 per example: zlib.crc32 of those bytes
    _offsets: "array.array" = field(default=None, repr=False, compare=False)  # type: ignore

    def offset(self, example: int) -> int:
        """Where example ``example`` starts in the file (``count``: where the last ends)."""
        if self._offsets is None:
            self._offsets = array.array("q", itertools.accumulate(
                itertools.chain((self.start,), _unpacked(self.sizes))))
        return self._offsets[example]

    def byte_range(self, first: int, end: int) -> Tuple[int, int]:
        """(offset, length) of examples ``first`` to ``end`` (exclusive) in the file."""
        begin = self.offset(first)
        return begin, self.offset(end) - begin

    def checksums(self) -> "array.array":
        return _unpacked(self.crcs)

    def to_dict(self) -> dict:
        return {"name": self.name, "count": self.count, "bytes": self.size, "start": self.start,
                "sizes": base64.b64encode(self.sizes).decode(),
                "crc32": base64.b64encode(self.crcs).decode()}

    @classmethod
    def from_dict(cls, entry: dict) -> "Shard":
        """The shard an index entry describes; ValueError/KeyError/TypeError when it is not
        one (a table whose length is not the count, examples past the end of the file)."""
        shard = cls(str(entry["name"]), int(entry["count"]), int(entry["bytes"]),
                    int(entry["start"]), base64.b64decode(entry["sizes"], validate=True),
                    base64.b64decode(entry["crc32"], validate=True))
        if not len(shard.sizes) == len(shard.crcs) == 4 * shard.count:
            raise ValueError("{}: the example table does not have {} entries".format(
                shard.name, shard.count))
        if shard.start < 0 or shard.offset(shard.count) > shard.size:
            raise ValueError("{}: the example table runs past the end of the file".format(
                shard.name))
        return shard

    @classmethod
    def of_bytes(cls, name: str, data: bytes) -> "Shard":
        """The entry of the tar shard ``data``: each example is the run of consecutive
        members whose names share a key (``tar_members.key_and_extension``: webdataset's rule,
        as ``read_samples`` groups them), from its first member's first header block (a pax
        or GNU long-name header included) to the next example's; members of no example
        between two examples belong to the first one's bytes (the reader skips them)."""
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            members = [member for member in archive.getmembers() if member.isfile()]
        starts, key = [], None
        for member in members:
            split = key_and_extension(member.name)
            if split is None:
                continue
            if split[0] != key or not starts:
                starts.append(member.offset)
            key = split[0]
        if members:
            last = members[-1]
            starts.append(last.offset_data + -(-last.size // tarfile.BLOCKSIZE)
                          * tarfile.BLOCKSIZE)
        sizes = [end - begin for begin, end in zip(starts, starts[1:])]
        crcs = [zlib.crc32(data[begin:end]) for begin, end in zip(starts, starts[1:])]
        return cls(name, len(sizes), len(data), starts[0] if starts else 0, _packed(sizes),
                   _packed(crcs))


@dataclass
class ShardIndex:
    classes: List[str]
    splits: Dict[str, List[Shard]]
    skipped: List[str] = field(default_factory=list)  # source files that could not be decoded
    # make_shards --max_shorter_side (formerly --max_side): images were stored with their
    # shorter side at most this (0: as they came)
    max_side: int = 0

    def entries(self, split: str) -> List[Shard]:
        return list(self.splits.get(split, []))

    def shards(self, split: str) -> List[Tuple[str, int]]:
        """(file name, examples) of each shard of ``split``, in order."""
        return [(shard.name, shard.count) for shard in self.entries(split)]

    def examples(self, split: str) -> int:
        return sum(shard.count for shard in self.entries(split))

    def size(self, split: str) -> int:
        """The bytes of the split's shard files."""
        return sum(shard.size for shard in self.entries(split))

    def to_json(self) -> bytes:
        return json.dumps({
            "format": FORMAT, "version": VERSION, "classes": self.classes,
            "splits": {split: [shard.to_dict() for shard in shards]
                       for split, shards in self.splits.items()},
            "skipped": self.skipped, **({"max_side": self.max_side} if self.max_side else {})},
            indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "ShardIndex":
        """Parse ``data`` (the file ``where``); a DataError (65) names what is wrong."""
        try:
            raw = json.loads(data.decode())
            if raw.get("format") != FORMAT:
                raise ValueError("not a {} index".format(FORMAT))
            if raw.get("version") != VERSION:
                raise DataError(
                    "{} has format version {}; this trainer reads version {}, which records "
                    "where each example is in its shard".format(where, raw.get("version"),
                                                                 VERSION),
                    "python -m trainer.data.reindex --data_dir={} adds that to the index "
                    "(it reads each shard once)".format(where.rsplit("/", 1)[0])
                    if raw.get("version") == 1 else "write the shards again with this "
                    "image's python -m trainer.data.make_shards")
            classes = [str(name) for name in raw["classes"]]
            splits = {str(split): [Shard.from_dict(entry) for entry in shards]
                      for split, shards in raw["splits"].items()}
            return cls(classes, splits, [str(name) for name in raw.get("skipped", [])],
                       int(raw.get("max_side", 0)))
        except DataError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise DataError("{} is not a shard index: {}".format(where, error),
                            "point --data_dir at a folder written by "
                            "python -m trainer.data.make_shards")


def split_identity(index: ShardIndex, split: str) -> Dict[str, object]:
    """What identifies the examples of ``split``, for a checkpoint to record: its shard count,
    example count, and a digest of every shard's name, count and example checksums (the same
    images re-made with another ``make_shards --seed`` land in other shards: another digest)."""
    digest = hashlib.sha256()
    for shard in index.entries(split):
        digest.update("{}\0{}\0".format(shard.name, shard.count).encode())
        digest.update(shard.crcs)
    return {"shards": len(index.entries(split)), "examples": index.examples(split),
            "digest": digest.hexdigest()[:16]}


def load_index(root) -> ShardIndex:
    """The index of the shard set in ``root`` (a ``storage.Directory``); a DataError (65) when
    there is none or it is not one."""
    try:
        data = root.read_bytes(INDEX_NAME)
    except FileNotFoundError:
        raise DataError("{} has no {}".format(root.uri, INDEX_NAME),
                        "write shards with python -m trainer.data.make_shards, or point "
                        "--data_dir at a train/ val/ class-folder tree")
    return ShardIndex.from_json(data, root.join(INDEX_NAME))
