"""trainer.data.make_token_shards: text and JSONL into byte-token shards that read back as
the documents' bytes, each followed by EOS; the same val split on every run; a rerun makes
only the shards still missing; damaged lines are named and skipped; a changed shard is one
line naming it when read."""

import json

import numpy
import pytest

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
