"""The token shard format (``trainer.data.tokens``): writing a shard with its record, the
index, and reading a split back: whole into memory (``read_split``) or mapped from local files
(``map_split``), each digest-checked, or read from Cloud Storage a window at a time where it is
(``stream_split``), each shard's size checked: the three ways ``trainer.lm`` reads it."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List

import numpy

from trainer.errors import DataError

INDEX_NAME = "index.json"
SPLITS = ("train", "val")
# Format 1: uint16 tokens (an index without "dtype"); 2: the index names its "dtype". An index
# of uint16 tokens is written as format 1, which readers from before uint32 read too; one of
# uint32 tokens as 2, which they refuse instead of misreading.
FORMATS = (1, 2)
# Tokens are little-endian unsigned integers, the narrowest that holds the vocabulary.
DTYPES = {"uint16": numpy.dtype("<u2"), "uint32": numpy.dtype("<u4")}
DEFAULT_DTYPE = "uint16"
# The raw-bytes tokenizer: each byte its own token, and one more for the end of a document.
BYTES_VOCABULARY = 257
BYTES_EOS = 256


def shard_name(split: str, number: int) -> str:
    return "{}-{:06d}.bin".format(split, number)


def dtype_for(vocab_size: int) -> str:
    """The name of the narrowest token type that holds ids ``0 .. vocab_size - 1``."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def write_shard(directory: Any, name: str, tokens: numpy.ndarray, source: str,
                made_with: Any = None, dtype: str = DEFAULT_DTYPE) -> Dict[str, Any]:
    """``tokens`` as shard ``name`` in ``directory`` (atomically), as ``dtype``, then its
    record ``NAME.json`` (what marks it done; ``made_with``: the options that decide its
    tokens); returns the record."""
    data = tokens.astype(DTYPES[dtype]).tobytes()
    directory.write_bytes(name, data)
    record = {"name": name, "tokens": int(len(tokens)), "sha256": hashlib.sha256(data)
              .hexdigest(), "source": source, "made_with": made_with}
    directory.write_bytes(name[:-len(".bin")] + ".json",
                          (json.dumps(record, sort_keys=True) + "\n").encode())
    return record


def read_record(directory: Any, name: str) -> Any:
    """Shard ``name``'s record, None where it is not done (no record, or an unreadable one)."""
    record_name = name[:-len(".bin")] + ".json"
    if not directory.exists(record_name):
        return None
    try:
        record = json.loads(directory.read_bytes(record_name).decode())
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def write_index(directory: Any, records: Dict[str, List[Dict[str, Any]]], vocab_size: int,
                eos: int, tokenizer: Any, dtype: str = DEFAULT_DTYPE) -> None:
    """``index.json``: the shards' ``records`` of each split, the vocabulary's size, its end
    token, the ``tokenizer`` that made them (``"bytes"`` or what identifies a tokenizer file)
    and the tokens' ``dtype``."""
    index = {"format": 1 if dtype == DEFAULT_DTYPE else 2, "vocab_size": vocab_size, "eos": eos,
             "tokenizer": tokenizer, "dtype": dtype, "splits": records}
    directory.write_bytes(INDEX_NAME, (json.dumps(index, indent=1, sort_keys=True) + "\n")
                          .encode())


def read_index(directory: Any) -> Dict[str, Any]:
    """The folder's ``index.json``; a data error naming the folder where there is none or it
    is not one."""
    if not directory.exists(INDEX_NAME):
        raise DataError("{} holds no {}: no token shards there".format(
            directory.join(""), INDEX_NAME), "make them: python -m "
            "trainer.data.make_token_shards --source=TEXT --dest=" + directory.join(""))
    try:
        index = json.loads(directory.read_bytes(INDEX_NAME).decode())
    except ValueError as error:
        raise DataError("{} is not JSON: {}".format(directory.join(INDEX_NAME), error),
                        "make the shards again (the same command resumes)")
    splits = index.get("splits") if isinstance(index, dict) else None
    dtype = index.get("dtype", DEFAULT_DTYPE) if isinstance(index, dict) else None
    if (not isinstance(index, dict) or index.get("format") not in FORMATS
            or not isinstance(index.get("vocab_size"), int) or not isinstance(index.get("eos"), int)
            or dtype not in DTYPES or index["vocab_size"] > 1 << 8 * DTYPES[dtype].itemsize
            or not isinstance(splits, dict) or not all(
                isinstance(records, list) and all(isinstance(record, dict) and "name" in record
                                                  and "sha256" in record for record in records)
                for records in splits.values())):
        raise DataError("{} is no token index of format {} (its vocabulary, end token, token "
                        "type and shards)".format(directory.join(INDEX_NAME),
                                                  " or ".join(map(str, FORMATS))),
                        "make the shards with this version's make_token_shards")
    return index


def read_split(directory: Any, index: Dict[str, Any], split: str) -> numpy.ndarray:
    """Every token of ``split``, its shards in the index's order, each checked against its
    record (a shard whose bytes differ is a data error naming it), as the index's ``dtype``
    (uint16 where it names none)."""
    dtype = DTYPES[index.get("dtype", DEFAULT_DTYPE)]
    parts = []
    for record in index["splits"].get(split, []):
        data = directory.read_bytes(record["name"])
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise DataError("token shard {} does not match its digest in {}".format(
                directory.join(record["name"]), INDEX_NAME),
                "it was changed or cut short: make the shards again into a new folder")
        parts.append(numpy.frombuffer(data, dtype=dtype))
    return numpy.concatenate(parts) if parts else numpy.zeros(0, dtype)


DIGEST_CHUNK = 8 << 20  # bytes hashed at a time: a shard is checked without holding it


def map_split(directory: Any, index: Dict[str, Any], split: str, cache_dir: str
              ) -> List[numpy.ndarray]:
    """The shards of ``split`` in the index's order, each a read-only memory map of a local
    file (a ``gs://`` shard downloaded into ``cache_dir`` first, again only when its size
    changed), checked against its record as ``read_split`` checks it, without holding it: the
    tokens stay in the page cache, not in the process, so a split larger than the host's
    memory trains, and forked data workers share the same pages."""
    dtype = DTYPES[index.get("dtype", DEFAULT_DTYPE)]
    records = index["splits"].get(split, [])
    _allow_open_files(len(records), directory.join(INDEX_NAME))
    parts = []
    for record in records:
        path = directory.fetch(record["name"], cache_dir)
        if path is None or _file_digest(path) != record["sha256"]:
            raise DataError("token shard {} {}".format(
                directory.join(record["name"]), "is missing" if path is None else
                "does not match its digest in " + INDEX_NAME),
                "it was changed, cut short or deleted: make the shards again into a new folder")
        if os.path.getsize(path):
            parts.append(numpy.memmap(path, dtype=dtype, mode="r"))
    return parts


SPARE_FILES = 256  # open files left to the rest of the process beside the mapped shards


def _allow_open_files(shards: int, index_name: str) -> None:
    """Raise this process's limit of open files (its soft limit, up to the hard one) to hold
    ``shards`` more: each memory map keeps its file open. A data error where the hard limit is
    too low."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = shards + SPARE_FILES
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise DataError("{} lists {} shards, each mapped with its file open, over this "
                        "process's limit of {} open files".format(index_name, shards, hard),
                        "make fewer, larger shards (make_token_shards makes one per input "
                        "file: join the files first), or raise the limit (ulimit -n)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(DIGEST_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


class StreamedShard:
    """A shard's tokens where they are stored, read a range at a time (one ranged read of
    ``Directory.read_range`` for each slice taken): ``len`` and ``shard[start:stop]``, a numpy
    array of the index's type. Nothing is held or downloaded; a forked data worker reads
    through a client of its own (``storage.GcsDirectory.bucket``)."""

    def __init__(self, directory: Any, name: str, tokens: int, dtype: numpy.dtype) -> None:
        self.directory, self.name, self.tokens, self.dtype = directory, name, tokens, dtype

    def __len__(self) -> int:
        return self.tokens

    def __getitem__(self, where: slice) -> numpy.ndarray:
        start, stop, _ = where.indices(self.tokens)
        if stop <= start:
            return numpy.zeros(0, self.dtype)
        size = self.dtype.itemsize
        data = self.directory.read_range(self.name, start * size, (stop - start) * size)
        if len(data) != (stop - start) * size:  # the object changed since it was checked
            raise DataError("token shard {} ended at byte {}, where its record says {} tokens "
                            "of {} bytes".format(self.directory.join(self.name),
                                                 start * size + len(data), self.tokens, size),
                            "it was changed or cut short: make the shards again into a new "
                            "folder")
        return numpy.frombuffer(data, dtype=self.dtype)


def split_bytes(index: Dict[str, Any]) -> int:
    """The bytes of every shard the index lists, all splits."""
    size = DTYPES[index.get("dtype", DEFAULT_DTYPE)].itemsize
    return sum(int(record.get("tokens", 0)) * size for records in index["splits"].values()
               for record in records)


def stream_split(directory: Any, index: Dict[str, Any], split: str,
                 sizes: Dict[str, int]) -> List[StreamedShard]:
    """The shards of ``split`` in the index's order, read where they are (``StreamedShard``),
    each checked to be there with the size its record says (``sizes``: ``Directory.sizes``,
    one listing for all). Their digests are not checked: that would read the whole split,
    which streaming is for not doing (a shard changed to the same size is not found)."""
    dtype = DTYPES[index.get("dtype", DEFAULT_DTYPE)]
    parts = []
    for record in index["splits"].get(split, []):
        expected = int(record.get("tokens", -1)) * dtype.itemsize
        found = sizes.get(record["name"])
        if found != expected:
            raise DataError("token shard {} {}".format(
                directory.join(record["name"]), "is missing" if found is None else
                "holds {} bytes, its record in {} {} ({} tokens)".format(
                    found, INDEX_NAME, expected, record.get("tokens"))),
                "it was changed, cut short or deleted: make the shards again into a new folder")
        if expected:
            parts.append(StreamedShard(directory, record["name"], expected // dtype.itemsize,
                                       dtype))
    return parts

