"""Turn text into token shards for ``python -m trainer.lm``: ``python -m
trainer.data.make_token_shards --source=FILE_DIR_OR_GS --dest=DIR_OR_GS``.

The source is a ``.txt``, ``.md`` or ``.jsonl`` file, or a folder (local or ``gs://``) of
them: a ``.txt`` or ``.md`` file is one document, each line of a ``.jsonl`` file one (its
``--text_field``, ``text`` by default). Every ``--val_every``-th document, chosen by a hash of
its file and line (the same on every run), goes to ``val``, the rest to ``train``
(``trainer.data.tokens`` has the format).

- Tokens: by default the documents' UTF-8 bytes (a vocabulary of 256, and 256 itself ends each
  document: 257 in all). ``--tokenizer=PATH`` names a Hugging Face ``tokenizers`` file instead
  (a model's ``tokenizer.json``, local or ``gs://``, or a folder holding one): each document is
  encoded without the special tokens its post-processor would add (no BOS), then ended by
  ``--eos_token`` (by default the first of ``<|endoftext|>``, ``<|end_of_text|>``, ``</s>``,
  ``<eos>``, ``[SEP]`` that the vocabulary has). Bytes that are not UTF-8 (and a JSON string's
  lone surrogates) are encoded as U+FFFD. The vocabulary's size counts its added tokens; above
  65,536 tokens are stored as uint32, else uint16. The index records the tokenizer (path,
  sha256, end token). Needs the ``tokenizers`` package (in the pjrt image, not the xrt one).
- Each input file becomes one ``train`` and one ``val`` shard, written whole and atomically,
  each marked done by its record. Run the same command again after an interruption and it
  makes only the shards still missing; ``index.json`` is written last. Another
  ``--val_every`` or ``--text_field`` makes every shard again; another tokenizer (or end token)
  is refused: make its shards into a new ``--dest``.
- A ``.jsonl`` line that is no JSON object with a string ``--text_field`` is damaged: named
  (the first 5, file and line) and skipped, and counted in the final line.

Exit codes: 0 done; 64 bad option (also a ``--tokenizer`` that is missing or not a tokenizers
file, an ``--eos_token`` not in its vocabulary, a ``--dest`` of another tokenizer's shards); 65
no document at all; 74 the source, destination or tokenizer cannot be read or written; 78 no
``tokenizers`` package for ``--tokenizer``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy

from trainer import storage
from trainer.data.tokens.shards import (
    BYTES_EOS,
    BYTES_VOCABULARY,
    DTYPES,
    SPLITS,
    dtype_for,
    read_record,
    shard_name,
    write_index,
    write_shard,
)
from trainer.errors import EX_CONFIG, EX_IOERR, EX_USAGE, DataError, StorageError, TrainerError

log = logging.getLogger("trainer")

SUFFIXES = (".txt", ".md", ".jsonl")
JSON_LINES = ".jsonl"
NAMED_DAMAGE = 5  # damaged lines named in the log; the rest counted
TOKENIZER_FILE = "tokenizer.json"  # what --tokenizer=FOLDER reads
# The end-of-document tokens --eos_token defaults to, the first the vocabulary has: GPT-2's
# (and Qwen's), Llama 3's, Llama 2's, Mistral's and T5's, Gemma's, BERT's.
EOS_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "[SEP]")
ENCODE_BATCH = 256  # documents a tokenizer encodes at a time (its encodings held only so long)


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


class Bytes:
    """The raw-bytes vocabulary: each byte its own token, ``BYTES_EOS`` after each document."""

    size, eos, dtype = BYTES_VOCABULARY, BYTES_EOS, dtype_for(BYTES_VOCABULARY)
    identity: Any = None  # what a shard's record holds of it (None: no tokenizer, as before)
    recorded: Any = "bytes"  # what the index holds of it

    def tokens(self, docs: List[bytes]) -> numpy.ndarray:
        """The documents' tokens, each followed by the end-of-sequence token."""
        parts = []
        for doc in docs:
            parts.append(numpy.frombuffer(doc, dtype=numpy.uint8).astype(DTYPES[self.dtype]))
            parts.append(numpy.array([self.eos], dtype=DTYPES[self.dtype]))
        return numpy.concatenate(parts) if parts else numpy.zeros(0, DTYPES[self.dtype])


class TokenizerFile(Bytes):
    """A Hugging Face ``tokenizers`` vocabulary: documents encoded without added special
    tokens, each followed by ``eos``; ``size`` covers every id it has (added tokens too)."""

    def __init__(self, tokenizer: Any, path: str, sha256: str, eos_token: str, eos: int
                 ) -> None:
        self.tokenizer = tokenizer
        ids = tokenizer.get_vocab(with_added_tokens=True).values()
        self.size = max(tokenizer.get_vocab_size(with_added_tokens=True), max(ids, default=0) + 1)
        self.eos, self.dtype = eos, dtype_for(self.size)
        self.identity = {"sha256": sha256, "eos": eos}
        self.recorded = {"path": path, "sha256": sha256, "eos_token": eos_token}

    def tokens(self, docs: List[bytes]) -> numpy.ndarray:
        dtype = DTYPES[self.dtype]
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        parts = []
        for start in range(0, len(docs), ENCODE_BATCH):
            texts = [doc.decode("utf-8", "replace") for doc in docs[start:start + ENCODE_BATCH]]
            for encoding in encode(texts, add_special_tokens=False):
                parts.append(numpy.array(encoding.ids, dtype=dtype))
                parts.append(numpy.array([self.eos], dtype=dtype))
        return numpy.concatenate(parts) if parts else numpy.zeros(0, dtype)


def read_tokenizer(path: str) -> bytes:
    """The bytes of ``--tokenizer``: a tokenizers JSON file, or a folder holding
    ``tokenizer.json``; local or ``gs://``."""
    if path.startswith("gs://"):
        bucket, _, key = path[len("gs://"):].strip("/").partition("/")
        parent, _, name = key.rpartition("/")
        folder = "gs://" + bucket + ("/" + parent if parent else "")
        names = [name + "/" + TOKENIZER_FILE, name] if name else [TOKENIZER_FILE]
        is_folder = not name  # a bucket
    elif os.path.isdir(path):  # a folder: its tokenizer.json
        folder, names, is_folder = path, [TOKENIZER_FILE], True
    else:
        folder, name = os.path.split(os.path.abspath(path))
        names, is_folder = [name], False
    hint = ("name a tokenizer.json file or a folder holding one, local or gs:// (e.g. hf download "
            "MODEL tokenizer.json --local-dir DIR)")
    try:
        # storage.open_dir makes a missing local folder: a wrong path makes none.
        if folder.startswith("gs://") or os.path.isdir(folder):
            directory = storage.open_dir(folder)
            for name in names:
                if directory.exists(name):
                    return directory.read_bytes(name)
    except StorageError as error:
        raise TrainerError("cannot read --tokenizer={}: {}".format(path, error.message),
                           error.hint or hint, error.exit_code)
    except OSError as error:  # gone since, a device error
        raise TrainerError("cannot read --tokenizer={}: {}".format(path, error.strerror or error),
                           hint, EX_IOERR)
    raise TrainerError("--tokenizer={} {}".format(path, "holds no " + TOKENIZER_FILE if is_folder
                                                  else "does not exist"), hint, EX_USAGE)


def vocabulary(path: str, eos_token: str) -> Bytes:
    """The vocabulary of ``--tokenizer`` and ``--eos_token``: the raw bytes without them."""
    if not path:
        if eos_token:
            raise TrainerError("--eos_token={} needs --tokenizer".format(eos_token),
                               "the raw bytes end each document with token 256; name a "
                               "tokenizer.json with --tokenizer", EX_USAGE)
        return Bytes()
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TrainerError("--tokenizer={}: the tokenizers package is not installed".format(
            path), "pip install tokenizers, or leave --tokenizer out for raw bytes", EX_CONFIG)
    data = read_tokenizer(path)
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # tokenizers raises a bare Exception; a file not UTF-8 too
        why = " ".join(str(error).split())[:200] or type(error).__name__
        raise TrainerError("--tokenizer={} is not a Hugging Face tokenizers file: {}".format(
            path, why), "give a model's tokenizer.json (not tokenizer_config.json, vocab.txt "
            "or a SentencePiece .model)", EX_USAGE)
    if not eos_token:
        found = [token for token in EOS_TOKENS if tokenizer.token_to_id(token) is not None]
        if not found:
            raise TrainerError("--tokenizer={} has none of the end tokens {}: name its end-of-"
                               "document token with --eos_token".format(path, " ".join(EOS_TOKENS)),
                               special_tokens_hint(tokenizer), EX_USAGE)
        eos_token = found[0]
    eos = tokenizer.token_to_id(eos_token)
    if eos is None:
        raise TrainerError("--eos_token={} is not in the vocabulary of --tokenizer={}".format(
            eos_token, path), special_tokens_hint(tokenizer), EX_USAGE)
    found_vocabulary = TokenizerFile(tokenizer, path, hashlib.sha256(data).hexdigest(),
                                     eos_token, eos)
    log.info("tokenizer %s: a vocabulary of %d, each document ended by %s (%d), %s tokens",
             path, found_vocabulary.size, eos_token, eos, found_vocabulary.dtype)
    return found_vocabulary


def special_tokens_hint(tokenizer: Any) -> str:
    """A hint naming (some of) the tokenizer's special tokens, the likely end tokens."""
    try:
        special = [token.content for _, token in sorted(
            tokenizer.get_added_tokens_decoder().items()) if token.special]
    except AttributeError:  # a tokenizers before 0.14
        special = []
    if not special:
        return "name the token that ends a document with --eos_token"
    return "e.g. --eos_token='{}'; its special tokens: {}".format(
        special[0], " ".join(special[:10]) + (" ..." if len(special) > 10 else ""))


def describe(identity: Any) -> str:
    """A shard record's tokenizer, in words."""
    if not isinstance(identity, dict):
        return "the raw bytes"
    return "a tokenizer of sha256 {}, end token {}".format(
        str(identity.get("sha256"))[:12], identity.get("eos"))


def convert(source: str, dest: str, val_every: int, text_field: str,
            vocab: Optional[Bytes] = None) -> Dict[str, int]:
    """Make the missing shards and the index; returns the tokens of each split."""
    vocab = vocab or Bytes()
    folder, names = inputs(source)
    out = storage.open_dir(dest)
    out.remove_stale_temporaries()
    damage = Damage()
    records: Dict[str, List[Dict[str, Any]]] = {split: [] for split in SPLITS}
    made = 0
    # What decides a shard's tokens besides its input: another value makes it again. The
    # raw bytes' is what it was before tokenizers, so that their earlier shards resume.
    made_with: Dict[str, Any] = {"val_every": val_every, "text_field": text_field}
    if vocab.identity is not None:
        made_with["tokenizer"] = vocab.identity
    done = [{split: read_record(out, shard_name(split, number)) for split in SPLITS}
            for number in range(len(names))]
    # Another tokenizer's shards are refused, not made again: their index may be in use, and
    # a reader must never see two vocabularies' tokens under one index.
    for record in (record for shards in done for record in shards.values() if record):
        theirs = (record.get("made_with") or {}).get("tokenizer")
        if theirs != vocab.identity:
            raise TrainerError("--dest={} holds shards of another vocabulary ({}; now {})".format(
                dest, describe(theirs), describe(vocab.identity)), "make these into a new "
                "--dest, or give the --tokenizer and --eos_token that made those", EX_USAGE)
    for number, name in enumerate(names):
        wanted = {split: shard_name(split, number) for split in SPLITS}
        if all(record is not None and record.get("source") == name
               and record.get("made_with") == made_with for record in done[number].values()):
            for split in SPLITS:
                records[split].append(done[number][split])
            continue
        docs = documents(name, folder.read_bytes(name), text_field, damage)
        for split in SPLITS:
            chosen = [doc for line, doc in docs if to_val(name, line, val_every) == (
                split == "val")]
            records[split].append(write_shard(out, wanted[split], vocab.tokens(chosen), name,
                                              made_with, vocab.dtype))
        made += 1
    totals = {split: sum(record["tokens"] for record in records[split]) for split in SPLITS}
    if not totals["train"]:
        raise DataError("--source={} gave no training token".format(source),
                        "check the files' contents (and --text_field for .jsonl)")
    write_index(out, records, vocab.size, vocab.eos, vocab.recorded, vocab.dtype)
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
    parser.add_argument("--tokenizer", default="",
                        help="a Hugging Face tokenizers file (a model's tokenizer.json, or a "
                        "folder holding one), DIR or gs://... (default: none, the raw UTF-8 "
                        "bytes)")
    parser.add_argument("--eos_token", default="",
                        help="the --tokenizer's token that ends each document (default: the "
                        "first of {} it has)".format(", ".join(EOS_TOKENS)))

    def run(args: argparse.Namespace) -> None:
        if args.val_every < 0:
            raise TrainerError("--val_every={} is negative".format(args.val_every),
                               "e.g. --val_every=100, or 0 for no val split", EX_USAGE)
        convert(args.source, args.dest, args.val_every, args.text_field,
                vocabulary(args.tokenizer, args.eos_token))

    return run_tool(parser, argv, run)


if __name__ == "__main__":
    sys.exit(main())
