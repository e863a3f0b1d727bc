"""The token shard format (``trainer.data.tokens``): writing a shard with its record, the
index, and reading a split back, digest-checked."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List

import numpy

from trainer.errors import DataError

INDEX_NAME = "index.json"
SPLITS = ("train", "val")
FORMAT = 1
TOKEN_DTYPE = numpy.dtype("<u2")  # little-endian uint16: vocabularies up to 65,536
# The raw-bytes tokenizer: each byte its own token, and one more for the end of a document.
BYTES_VOCABULARY = 257
BYTES_EOS = 256


def shard_name(split: str, number: int) -> str:
    return "{}-{:06d}.bin".format(split, number)


def write_shard(directory: Any, name: str, tokens: numpy.ndarray, source: str,
                made_with: Any = None) -> Dict[str, Any]:
    """``tokens`` as shard ``name`` in ``directory`` (atomically), then its record
    ``NAME.json`` (what marks it done; ``made_with``: the options that decide its tokens);
    returns the record."""
    data = tokens.astype(TOKEN_DTYPE).tobytes()
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
                eos: int, tokenizer: str) -> None:
    index = {"format": FORMAT, "vocab_size": vocab_size, "eos": eos, "tokenizer": tokenizer,
             "splits": records}
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
    if (not isinstance(index, dict) or index.get("format") != FORMAT
            or not isinstance(index.get("vocab_size"), int) or not isinstance(index.get("eos"), int)
            or not isinstance(splits, dict) or not all(
                isinstance(records, list) and all(isinstance(record, dict) and "name" in record
                                                  and "sha256" in record for record in records)
                for records in splits.values())):
        raise DataError("{} is no token index of format {} (its vocabulary, end token and "
                        "shards)".format(directory.join(INDEX_NAME), FORMAT),
                        "make the shards with this version's make_token_shards")
    return index


def read_split(directory: Any, index: Dict[str, Any], split: str) -> numpy.ndarray:
    """Every token of ``split``, its shards in the index's order, each checked against its
    record (a shard whose bytes differ is a data error naming it)."""
    parts = []
    for record in index["splits"].get(split, []):
        data = directory.read_bytes(record["name"])
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise DataError("token shard {} does not match its digest in {}".format(
                directory.join(record["name"]), INDEX_NAME),
                "it was changed or cut short: make the shards again into a new folder")
        parts.append(numpy.frombuffer(data, dtype=TOKEN_DTYPE))
    return numpy.concatenate(parts) if parts else numpy.zeros(0, TOKEN_DTYPE)
