"""Turn text into token shards for ``python -m trainer.lm``: ``python -m
trainer.data.make_token_shards --source=FILE_DIR_OR_GS --dest=DIR_OR_GS``.

The source is a ``.txt``, ``.md`` or ``.jsonl`` file, or a folder (local or ``gs://``) of
them: a ``.txt`` or ``.md`` file is one document, each line of a ``.jsonl`` file one (its
``--text_field``, ``text`` by default). Tokens are the documents' UTF-8 bytes (a vocabulary
of 256, and 256 itself ends each document: 257 in all). Every ``--val_every``-th document,
chosen by a hash of its file and line (the same on every run), goes to ``val``, the rest to
``train`` (``trainer.data.tokens`` has the format).

- Each input file becomes one ``train`` and one ``val`` shard, written whole and atomically,
  each marked done by its record. Run the same command again after an interruption and it
  makes only the shards still missing; ``index.json`` is written last.
- A ``.jsonl`` line that is no JSON object with a string ``--text_field`` is damaged: named
  (the first 5, file and line) and skipped, and counted in the final line.

Exit codes: 0 done; 64 bad option; 65 no document at all; 74 the source or destination cannot
be read or written.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy

from trainer import storage
from trainer.data.tokens.shards import (
    BYTES_EOS,
    BYTES_VOCABULARY,
    SPLITS,
    read_record,
    shard_name,
    write_index,
    write_shard,
)
from trainer.errors import EX_USAGE, DataError, TrainerError

log = logging.getLogger("trainer")

SUFFIXES = (".txt", ".md", ".jsonl")
JSON_LINES = ".jsonl"
NAMED_DAMAGE = 5  # damaged lines named in the log; the rest counted


def inputs(source: str) -> Tuple[Any, List[str]]:
    """(the folder, the input files' names in it, sorted) of ``--source``: a file or a
    folder."""
    if source.endswith(SUFFIXES):
        folder, _, name = source.rstrip("/").rpartition("/")
        directory = storage.open_dir(folder or ".")
        if not directory.exists(name):
            raise DataError("--source={} does not exist".format(source),
                            "name a .txt, .md or .jsonl file, or a folder of them")
        return directory, [name]
    directory = storage.open_dir(source)
    names = sorted(name for name in directory.walk() if name.endswith(SUFFIXES))
    if not names:
        raise DataError("--source={} holds no .txt, .md or .jsonl file".format(source),
                        "name a folder of text files, or one file")
    return directory, names


class Damage:
    """Damaged lines: the first ``NAMED_DAMAGE`` named, all counted."""

    def __init__(self) -> None:
        self.count = 0

    def saw(self, where: str, why: str) -> None:
        self.count += 1
        if self.count <= NAMED_DAMAGE:
            log.warning("skipping %s: %s", where, why)


def documents(name: str, data: bytes, text_field: str, damage: Damage
              ) -> List[Tuple[int, bytes]]:
    """(line, UTF-8 bytes) of each document of input ``name``: the whole file for ``.txt``
    and ``.md`` (line 0), each line's ``text_field`` for ``.jsonl``."""
    if not name.endswith(JSON_LINES):
        return [(0, data)] if data else []
    found = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as error:
            damage.saw("{} line {}".format(name, number), "not JSON ({})".format(error))
            continue
        text = row.get(text_field) if isinstance(row, dict) else None
        if not isinstance(text, str):
            damage.saw("{} line {}".format(name, number),
                       "no string {!r} in it".format(text_field))
            continue
        found.append((number, text.encode("utf-8", "surrogatepass")))
    return found


def to_val(name: str, line: int, every: int) -> bool:
    """Whether document ``line`` of ``name`` goes to val: one in ``every``, by a hash."""
    return bool(every) and zlib.crc32("{}:{}".format(name, line).encode()) % every == 0


def tokens_of(docs: List[bytes]) -> numpy.ndarray:
    """The documents' bytes as tokens, each followed by the end-of-sequence token."""
    parts = []
    for doc in docs:
        parts.append(numpy.frombuffer(doc, dtype=numpy.uint8).astype(numpy.uint16))
        parts.append(numpy.array([BYTES_EOS], dtype=numpy.uint16))
    return numpy.concatenate(parts) if parts else numpy.zeros(0, numpy.uint16)


def convert(source: str, dest: str, val_every: int, text_field: str) -> Dict[str, int]:
    """Make the missing shards and the index; returns the tokens of each split."""
    folder, names = inputs(source)
    out = storage.open_dir(dest)
    out.remove_stale_temporaries()
    damage = Damage()
    records: Dict[str, List[Dict[str, Any]]] = {split: [] for split in SPLITS}
    made = 0
    # What decides a shard's tokens besides its input: another value makes it again.
    made_with = {"val_every": val_every, "text_field": text_field}
    for number, name in enumerate(names):
        wanted = {split: shard_name(split, number) for split in SPLITS}
        done = {split: read_record(out, wanted[split]) for split in SPLITS}
        if all(record is not None and record.get("source") == name
               and record.get("made_with") == made_with for record in done.values()):
            for split in SPLITS:
                records[split].append(done[split])
            continue
        docs = documents(name, folder.read_bytes(name), text_field, damage)
        for split in SPLITS:
            chosen = [doc for line, doc in docs if to_val(name, line, val_every) == (
                split == "val")]
            records[split].append(write_shard(out, wanted[split], tokens_of(chosen), name,
                                              made_with))
        made += 1
    totals = {split: sum(record["tokens"] for record in records[split]) for split in SPLITS}
    if not totals["train"]:
        raise DataError("--source={} gave no training token".format(source),
                        "check the files' contents (and --text_field for .jsonl)")
    write_index(out, records, BYTES_VOCABULARY, BYTES_EOS, "bytes")
    log.info("token shards in %s: %d train and %d val tokens from %d files (%d made now, the "
             "rest done before)%s", dest, totals["train"], totals["val"], len(names), made,
             "; {} damaged lines skipped".format(damage.count) if damage.count else "")
    return totals


def main(argv: Optional[List[str]] = None) -> int:
    from trainer.console import run_tool

    parser = argparse.ArgumentParser(prog="python -m trainer.data.make_token_shards",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True,
                        help="a .txt, .md or .jsonl file, or a folder of them: DIR or gs://...")
    parser.add_argument("--dest", required=True, help="where the shards go, DIR or gs://...")
    parser.add_argument("--val_every", type=int, default=100,
                        help="one document in this many goes to val (0: none)")
    parser.add_argument("--text_field", default="text",
                        help="the field of each .jsonl line that holds its text")

    def run(args: argparse.Namespace) -> None:
        if args.val_every < 0:
            raise TrainerError("--val_every={} is negative".format(args.val_every),
                               "e.g. --val_every=100, or 0 for no val split", EX_USAGE)
        convert(args.source, args.dest, args.val_every, args.text_field)

    return run_tool(parser, argv, run)


if __name__ == "__main__":
    sys.exit(main())
