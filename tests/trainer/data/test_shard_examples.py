"""trainer.data.shard_examples: the labelled examples of a shard, make_shards' and other
tools' in webdataset's layout (keys holding folders), or one line naming the shard and the
example."""

import io
import tarfile
from collections import Counter

import pytest
from PIL import Image

from trainer.batches import IGNORE_LABEL
from trainer.data.shard_examples import labelled
from trainer.data.shard_index import INDEX_NAME, Shard, ShardIndex
from trainer.data.shard_source import ShardSource
from trainer.data.tar_members import tar_bytes
from trainer.errors import DataError

URI = "gs://bucket/shards/train-000003.tar"


def jpeg(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (48, 40), (shade, 255 - shade, 90)).save(buffer, "JPEG")
    return buffer.getvalue()


def other_tools_shard(examples, format_=tarfile.PAX_FORMAT) -> bytes:
    """A shard as webdataset's writers make them (tarfile, here in pax format): each example
    under its class folder, named by its file's name (folders and dots in the key)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format_) as archive:
        for key, image, label in examples:
            for extension, data in (("jpg", image), ("cls", str(label).encode())):
                info = tarfile.TarInfo("{}.{}".format(key, extension))
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_examples_are_named_shard_and_key_in_order():
    data = tar_bytes([("train-000003_000000.jpg", b"1"), ("train-000003_000000.cls", b"4"),
                      ("train-000003_000000.json", b"{}"), ("train-000003_000001.png", b"2"),
                      ("train-000003_000001.cls", b" 0\n")])
    assert labelled(data, URI, 2) == [("train-000003.tar#train-000003_000000", b"1", 4),
                                      ("train-000003.tar#train-000003_000001", b"2", 0)]


def test_other_tools_keys_with_folders_are_read_as_webdataset_reads_them():
    # Two classes' files with one base name, adjacent: two examples, not one.
    examples = [("train/n01440764/n01440764_10026", b"a", 0),
                ("train/n01443537/n01440764_10026", b"b", 1),
                ("train/n01443537/x.y/" + "z" * 120, b"c", 1)]
    names = [(name, image, label) for name, image, label in
             labelled(other_tools_shard(examples), URI, 3)]
    assert names == [("train-000003.tar#" + key, image, label)
                     for key, image, label in examples]


@pytest.mark.parametrize("members, message", [
    ([("a.jpg", b"1"), ("a.txt", b"2")], "example 'a' lacks an image or a .cls label (its "
                                        "files: jpg, txt)"),
    ([("a.cls", b"2")], "example 'a' lacks an image"),
    ([("a.jpg", b"1"), ("a.cls", b"two")], "example 'a' lacks an image or a .cls label"),
    ([("d/a.jpg", b"1"), ("d/a.jpg", b"2")], "not a readable tar shard: example 'd/a' has two "
                                             ".jpg files"),
    ([("a.jpg", b"1"), ("a.cls", b"2"), ("b.jpg", b"1"), ("b.cls", b"2")],
     "holds 2 examples; the index says 3"),
])
def test_what_is_not_an_example_is_one_line_naming_the_shard_and_the_example(members,
                                                                             message):
    with pytest.raises(DataError) as raised:
        labelled(tar_bytes(members), URI, 3)
    assert raised.value.message.startswith(URI) and message in raised.value.message
    assert raised.value.exit_code == 65 and "make_shards" in raised.value.hint


def test_a_cut_shard_is_one_line_naming_it():
    data = tar_bytes([("a.jpg", b"1" * 3000), ("a.cls", b"2")])
    with pytest.raises(DataError, match="^gs://bucket/shards/train-000003.tar is not a readable "
                                        "tar shard: the archive ends inside a member$"):
        labelled(data[:2000], URI)


def test_the_trainer_reads_other_tools_shards(tmp_path):
    # GNU and pax archives with folder keys, and an index written for them (the example
    # table groups their members by the reader's rule: folders are part of the key).
    train = [[("train/c{}/img_{}".format(label, n), jpeg(20 * n + label), label)
              for n in range(4) for label in range(2)] for _ in range(2)]
    val = [("val/c{}/img".format(label), jpeg(label * 100), label) for label in range(2)]
    shards = {"train": [], "val": []}
    for split, name, data in [("train", "train-{}.tar".format(number),
                               other_tools_shard(examples, format_))
                              for number, (examples, format_) in enumerate(zip(
                                  train, (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT)))] + [
            ("val", "val-0.tar", other_tools_shard(val))]:
        (tmp_path / name).write_bytes(data)
        shards[split].append(Shard.of_bytes(name, data))
    assert [shard.count for shard in shards["train"] + shards["val"]] == [8, 8, 2]
    (tmp_path / INDEX_NAME).write_bytes(ShardIndex(["c0", "c1"], shards).to_json())
    source = ShardSource(str(tmp_path), 16, 4, 0, seed=1)
    labels = [label for _, y in source.train_batches(0) for label in y.tolist()]
    assert Counter(labels) == {0: 8, 1: 8}
    evaluated = [label for _, y in source.eval_batches() for label in y.tolist()]
    assert sorted(label for label in evaluated if label != IGNORE_LABEL) == [0, 1]
