"""trainer.data.make_token_shards: text and JSONL into byte-token shards that read back as
the documents' bytes, each followed by EOS; the same val split on every run; a rerun makes
only the shards still missing; damaged lines are named and skipped; a changed shard is one
line naming it when read. With --tokenizer (a tokenizers file made here by the library itself):
each document's tokens decode back to it and end in the tokenizer's EOS, the index records the
tokenizer, a vocabulary above 65,536 is stored as uint32, another tokenizer into the same
--dest is refused, and a bad tokenizer is one line and an exit code."""

import hashlib
import json
import sys

import numpy
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from trainer import storage
from trainer.data.make_token_shards import main, to_val
from trainer.data.tokens.shards import BYTES_EOS, read_index, read_split
from trainer.errors import DataError


def write_source(folder):
    folder.mkdir()
    (folder / "a.txt").write_text("héllo world")
    rows = [{"text": "doc {}".format(number)} for number in range(40)]
    lines = [json.dumps(row) for row in rows[:20]] + ["{not json", json.dumps({"body": "x"})] + [
        json.dumps(row) for row in rows[20:]]
    (folder / "b.jsonl").write_text("\n".join(lines) + "\n")
    return rows


def expected_tokens(parts):
    tokens = []
    for part in parts:
        tokens += list(part.encode("utf-8")) + [BYTES_EOS]
    return tokens


def test_text_and_jsonl_read_back_as_bytes_and_eos_and_damage_is_named(tmp_path, capsys):
    rows = write_source(tmp_path / "text")
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "shards"),
                 "--val_every", "4"]) == 0
    folder = storage.open_dir(str(tmp_path / "shards"))
    index = read_index(folder)
    assert (index["vocab_size"], index["eos"], index["tokenizer"]) == (257, 256, "bytes")
    lines = [number for number in range(1, 43) if number not in (21, 22)]  # 2 damaged
    val = [row["text"] for row, line in zip(rows, lines) if to_val("b.jsonl", line, 4)]
    train = [row["text"] for row, line in zip(rows, lines) if not to_val("b.jsonl", line, 4)]
    doc_a = [] if to_val("a.txt", 0, 4) else ["héllo world"]
    assert read_split(folder, index, "train").tolist() == expected_tokens(doc_a + train)
    assert read_split(folder, index, "val").tolist() == expected_tokens(
        ([] if doc_a else ["héllo world"]) + val)
    assert 0 < len(val) < len(rows)
    logged = capsys.readouterr().out  # the tool's log lines go to stdout
    assert "skipping b.jsonl line 21: not JSON" in logged
    assert "skipping b.jsonl line 22: no string 'text' in it" in logged
    assert "2 damaged lines skipped" in logged


def test_a_rerun_makes_only_the_shards_still_missing(tmp_path, capsys):
    write_source(tmp_path / "text")
    args = ["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "shards")]
    assert main(args) == 0
    first = (tmp_path / "shards" / "train-000001.bin").read_bytes()
    (tmp_path / "shards" / "val-000001.json").unlink()  # killed before its record
    capsys.readouterr()
    assert main(args) == 0
    assert "from 2 files (1 made now, the rest done before)" in capsys.readouterr().out
    assert (tmp_path / "shards" / "train-000001.bin").read_bytes() == first
    assert main(args + ["--val_every", "2"]) == 0  # another split: every shard made again
    assert "from 2 files (2 made now" in capsys.readouterr().out


def test_a_changed_shard_is_named_when_read(tmp_path):
    write_source(tmp_path / "text")
    assert main(["--source", str(tmp_path / "text" / "b.jsonl"),
                 "--dest", str(tmp_path / "shards")]) == 0
    shard = tmp_path / "shards" / "train-000000.bin"
    data = bytearray(shard.read_bytes())
    data[3] ^= 1
    shard.write_bytes(bytes(data))
    folder = storage.open_dir(str(tmp_path / "shards"))
    with pytest.raises(DataError, match="token shard .*train-000000.bin does not match its "
                                        "digest"):
        read_split(folder, read_index(folder), "train")


@pytest.mark.parametrize("args, code", [
    (["--source", "{src}/none", "--dest", "{out}"], 65),
    (["--source", "{src}", "--dest", "{out}", "--val_every", "-1"], 64),
    (["--dest", "{out}"], 64),
])
def test_bad_input_is_one_line_and_an_exit_code(tmp_path, args, code):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "empty.txt").write_text("")
    filled = [arg.format(src=tmp_path / "src", out=tmp_path / "out") for arg in args]
    assert main(filled) == code
    assert not numpy.any([path.name == "index.json" for path in tmp_path.rglob("*")])


WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
         "héllo world doc document token shard vocabulary").split()


def bpe_tokenizer(path):
    """A byte-level BPE (GPT-2's kind: every text round-trips) trained here on a few hundred
    words, with <|endoftext|> among its special tokens; saved as ``path``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [" ".join(WORDS[(start + step) % len(WORDS)] for step in range(7))
              for start in range(60)] + ["doc {}".format(number) for number in range(40)]
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(path))
    return tokenizer


def word_tokenizer(path, words):
    """A word-level vocabulary of ``words`` words (w0, w1, ...) and </s>, saved as ``path``."""
    vocabulary = {"w{}".format(number): number for number in range(words)}
    vocabulary.update({"<unk>": words, "</s>": words + 1})
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<unk>", "</s>"])
    tokenizer.save(str(path))
    return tokenizer


def documents_of(tokens, eos):
    """The token lists between the end tokens; every one ended by one."""
    assert tokens and tokens[-1] == eos
    found, current = [], []
    for token in tokens:
        if token == eos:
            found.append(current)
            current = []
        else:
            current.append(token)
    return found


def test_a_tokenizer_file_encodes_each_document_ended_by_its_end_token(tmp_path):
    rows = write_source(tmp_path / "text")
    tokenizer = bpe_tokenizer(tmp_path / "tokenizer.json")
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "shards"),
                 "--val_every", "4", "--tokenizer", str(tmp_path / "tokenizer.json")]) == 0
    folder = storage.open_dir(str(tmp_path / "shards"))
    index = read_index(folder)
    eos = tokenizer.token_to_id("<|endoftext|>")
    assert (index["vocab_size"], index["eos"], index["dtype"], index["format"]) == (
        tokenizer.get_vocab_size(with_added_tokens=True), eos, "uint16", 1)
    assert index["tokenizer"] == {
        "path": str(tmp_path / "tokenizer.json"), "eos_token": "<|endoftext|>",
        "sha256": hashlib.sha256((tmp_path / "tokenizer.json").read_bytes()).hexdigest()}
    lines = [number for number in range(1, 43) if number not in (21, 22)]  # 2 damaged
    texts = {split: [row["text"] for row, line in zip(rows, lines)
                     if to_val("b.jsonl", line, 4) == (split == "val")] for split in ("train",
                                                                                       "val")}
    texts["val" if to_val("a.txt", 0, 4) else "train"].insert(0, "héllo world")
    for split in ("train", "val"):
        tokens = read_split(folder, index, split)
        assert tokens.dtype == numpy.dtype("<u2")
        docs = documents_of(tokens.tolist(), eos)
        assert [tokenizer.decode(doc) for doc in docs] == texts[split]
        assert docs == [tokenizer.encode(text, add_special_tokens=False).ids
                        for text in texts[split]]
    assert len(docs[0]) < len("doc 0".encode())  # merges learnt: not one token a byte


def test_a_vocabulary_above_65536_is_stored_as_uint32(tmp_path):
    (tmp_path / "text").mkdir()
    texts = ["w65540 w3 w69999", "w0 w65535 w65536", "w12 w70001"]  # w70001: unknown
    (tmp_path / "text" / "a.jsonl").write_text(
        "".join(json.dumps({"text": text}) + "\n" for text in texts))
    tokenizer = word_tokenizer(tmp_path / "tokenizer.json", 70000)
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "shards"),
                 "--val_every", "0", "--tokenizer", str(tmp_path / "tokenizer.json")]) == 0
    folder = storage.open_dir(str(tmp_path / "shards"))
    index = read_index(folder)
    assert (index["vocab_size"], index["eos"], index["dtype"], index["format"]) == (
        70002, 70001, "uint32", 2)
    assert index["tokenizer"]["eos_token"] == "</s>"  # the first end token it has
    tokens = read_split(folder, index, "train")
    assert tokens.dtype == numpy.dtype("<u4")
    assert tokens.tolist() == [65540, 3, 69999, 70001, 0, 65535, 65536, 70001, 12, 70000, 70001]
    assert (tmp_path / "shards" / "train-000000.bin").stat().st_size == 4 * len(tokens)
    assert tokenizer.decode(tokens[:3].tolist()) == texts[0]


def test_another_tokenizer_into_the_same_dest_is_refused(tmp_path, capsys):
    write_source(tmp_path / "text")
    (tmp_path / "bpe").mkdir()
    bpe_tokenizer(tmp_path / "bpe" / "tokenizer.json")
    word_tokenizer(tmp_path / "words.json", 10)
    args = ["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "shards")]
    assert main(args + ["--tokenizer", str(tmp_path / "bpe" / "tokenizer.json")]) == 0
    made = {path.name: path.read_bytes() for path in (tmp_path / "shards").iterdir()}
    capsys.readouterr()
    for other in (["--tokenizer", str(tmp_path / "words.json")], [],
                  ["--tokenizer", str(tmp_path / "bpe"), "--eos_token", "<pad>"]):
        assert main(args + other) == 64
        error = capsys.readouterr().err.splitlines()
        assert len(error) == 2 and error[0].startswith(
            "TrainerError: --dest={} holds shards of another vocabulary".format(
                tmp_path / "shards")) and error[1].startswith("HINT: make these into a new")
    assert {path.name: path.read_bytes() for path in (tmp_path / "shards").iterdir()} == made
    # The same tokenizer, named by its folder: the same file, so the run resumes.
    assert main(args + ["--tokenizer", str(tmp_path / "bpe")]) == 0
    assert "from 2 files (0 made now" in capsys.readouterr().out
    # Raw-byte shards refuse a tokenizer the same way.
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "bytes")]) == 0
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "bytes"),
                 "--tokenizer", str(tmp_path / "words.json")]) == 64


@pytest.mark.parametrize("flags, code, says", [
    (["--tokenizer", "{tmp}/none.json"], 64, "--tokenizer={tmp}/none.json does not exist"),
    (["--tokenizer", "{tmp}/config.json"], 64,
     "--tokenizer={tmp}/config.json is not a Hugging Face tokenizers file: "),
    (["--tokenizer", "{tmp}/src/a.txt"], 64, "is not a Hugging Face tokenizers file"),
    (["--tokenizer", "{tmp}/src"], 64, "--tokenizer={tmp}/src holds no tokenizer.json"),
    (["--tokenizer", "{tmp}/no/such/tokenizer.json"], 64, "does not exist"),
    (["--tokenizer", "{tmp}/words.json"], 64, "--tokenizer={tmp}/words.json has none of the "
                                              "end tokens <|endoftext|>"),
    (["--tokenizer", "{tmp}/bpe.json", "--eos_token", "</s>"], 64,
     "--eos_token=</s> is not in the vocabulary of --tokenizer={tmp}/bpe.json"),
    (["--eos_token", "</s>"], 64, "--eos_token=</s> needs --tokenizer"),
])
def test_a_bad_tokenizer_is_one_line_and_an_exit_code(tmp_path, capsys, flags, code, says):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("some text")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    bpe_tokenizer(tmp_path / "bpe.json")
    vocabulary = {"w{}".format(number): number for number in range(5)}
    Tokenizer(models.WordLevel(dict(vocabulary, unk=5), unk_token="unk")).save(
        str(tmp_path / "words.json"))
    filled = [flag.format(tmp=tmp_path) for flag in flags]
    assert main(["--source", str(tmp_path / "src"), "--dest", str(tmp_path / "out")]
                + filled) == code
    error = capsys.readouterr().err.splitlines()
    assert len(error) == 2 and error[1].startswith("HINT: "), error
    assert error[0].startswith("TrainerError: ") and says.format(tmp=tmp_path) in error[0]
    assert not (tmp_path / "out" / "index.json").exists() and not (tmp_path / "no").exists()


def test_without_the_tokenizers_package_a_tokenizer_is_one_line(tmp_path, capsys,
                                                                 monkeypatch):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("some text")
    bpe_tokenizer(tmp_path / "tokenizer.json")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers: ImportError
    assert main(["--source", str(tmp_path / "src"), "--dest", str(tmp_path / "out"),
                 "--tokenizer", str(tmp_path / "tokenizer.json")]) == 78
    assert capsys.readouterr().err.splitlines() == [
        "TrainerError: --tokenizer={}: the tokenizers package is not installed".format(
            tmp_path / "tokenizer.json"),
        "HINT: pip install tokenizers, or leave --tokenizer out for raw bytes"]


def test_a_tokenizer_on_gcs_is_read_by_its_file_or_its_folder(tmp_path, gcs, capsys):
    write_source(tmp_path / "text")
    tokenizer = bpe_tokenizer(tmp_path / "tokenizer.json")
    gcs.blob("models/m/tokenizer.json").upload_from_filename(str(tmp_path / "tokenizer.json"))
    folder = "gs://{}/models/m".format(gcs.name)
    for number, path in enumerate((folder, folder + "/tokenizer.json")):
        assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / str(number)),
                     "--tokenizer", path]) == 0
        index = read_index(storage.open_dir(str(tmp_path / str(number))))
        assert (index["vocab_size"], index["tokenizer"]["path"]) == (
            tokenizer.get_vocab_size(with_added_tokens=True), path)
    capsys.readouterr()
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "out"),
                 "--tokenizer", folder + "/none.json"]) == 64
    assert "--tokenizer={}/none.json does not exist".format(folder) in capsys.readouterr().err


def test_an_index_without_a_dtype_reads_as_uint16_and_a_wrong_one_is_refused(tmp_path):
    write_source(tmp_path / "text")
    assert main(["--source", str(tmp_path / "text"), "--dest", str(tmp_path / "shards")]) == 0
    folder = storage.open_dir(str(tmp_path / "shards"))
    index = read_index(folder)
    before = read_split(folder, index, "train")
    written = json.loads((tmp_path / "shards" / "index.json").read_text())
    del written["dtype"]  # as written before uint32
    (tmp_path / "shards" / "index.json").write_text(json.dumps(written))
    assert read_split(folder, read_index(folder), "train").tolist() == before.tolist()
    for wrong in ({"dtype": "int8"}, {"format": 3}, {"vocab_size": 70000, "dtype": "uint16"}):
        (tmp_path / "shards" / "index.json").write_text(json.dumps(dict(written, **wrong)))
        with pytest.raises(DataError, match="is no token index of format 1 or 2"):
            read_index(folder)
