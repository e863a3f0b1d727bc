"""trainer.data.shard_index: the index round-trips, its example table finds every example of
a tar shard (whatever tar format wrote it), and anything else is a DataError naming the
file."""

import io
import json
import tarfile
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from trainer.data.shard_index import Shard, ShardIndex, split_identity
from trainer.data.tar_members import read_samples, tar_bytes
from trainer.errors import DataError

END = bytes(1024)


def shard_of(members, format_=tarfile.USTAR_FORMAT):
    """A tar of ``(name, data)`` members written by the standard library in ``format_``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format_) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_round_trip():
    data = tar_bytes([("a.jpg", b"x" * 700), ("a.cls", b"1"), ("b.jpg", b"y"), ("b.cls", b"0")])
    shard = Shard.of_bytes("train-000000.tar", data)
    index = ShardIndex(["a", "b"], {"train": [shard], "val": []}, ["x.JPEG"])
    again = ShardIndex.from_json(index.to_json(), "here")
    assert again == index and again.examples("train") == 2 and again.shards("test") == []
    assert again.shards("train") == [("train-000000.tar", 2)]
    assert again.size("train") == len(data)


keys = st.from_regex(r"[a-z0-9_]{1,150}", fullmatch=True)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(keys, st.binary(max_size=2000), st.integers(0, 999)),
                unique_by=lambda item: item[0], max_size=8),
       st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
def test_each_example_is_its_own_run_of_bytes(items, format_):
    # Long keys make GNU long-name and pax headers (and fail in ustar: skipped there).
    members = [member for key, image, label in items
               for member in ((key + ".jpg", image), (key + ".cls", str(label).encode()))]
    try:
        data = shard_of(members, format_)
    except ValueError:  # a name ustar cannot hold
        return
    shard = Shard.of_bytes("s.tar", data)
    assert shard.count == len(items) and shard.size == len(data)
    checksums = shard.checksums()
    for number, (key, image, label) in enumerate(items):
        offset, length = shard.byte_range(number, number + 1)
        piece = data[offset:offset + length]
        assert zlib.crc32(piece) == checksums[number]
        assert list(read_samples(io.BytesIO(piece + END))) == [
            (key, {"jpg": image, "cls": str(label).encode()})]
    if items:  # and any run of them
        offset, length = shard.byte_range(0, len(items))
        assert len(list(read_samples(io.BytesIO(data[offset:offset + length] + END)))) == len(
            items)


def entry(**changes):
    data = tar_bytes([("a.jpg", b"x"), ("a.cls", b"1")])
    return dict(Shard.of_bytes("train-000000.tar", data).to_dict(), **changes)


def index_json(**changes):
    return json.dumps({"format": "tpu-xla-shards", "version": 2, "classes": ["a"],
                       "splits": {"train": [entry(**changes)]}}).encode()


@pytest.mark.parametrize("data, message", [
    (b"not json", "gs://b/index.json is not a shard index"),
    (json.dumps({"format": "other"}).encode(), "not a tpu-xla-shards index"),
    (json.dumps({"format": "tpu-xla-shards", "version": 9}).encode(), "format version 9"),
    (json.dumps({"format": "tpu-xla-shards", "version": 2, "classes": []}).encode(),
     "'splits'"),
    (index_json(count=2), "the example table does not have 2 entries"),
    (index_json(bytes=100), "runs past the end of the file"),
    (index_json(sizes="not base64!"), "gs://b/index.json is not a shard index"),
])
def test_what_is_not_an_index_is_a_data_error_naming_the_file(data, message):
    with pytest.raises(DataError, match=message) as raised:
        ShardIndex.from_json(data, "gs://b/index.json")
    assert "gs://b/index.json" in raised.value.message and raised.value.hint


def test_a_version_1_index_names_the_command_that_upgrades_it():
    old = json.dumps({"format": "tpu-xla-shards", "version": 1, "classes": ["a"],
                      "splits": {"train": [{"name": "train-000000.tar", "count": 1}]}})
    with pytest.raises(DataError) as raised:
        ShardIndex.from_json(old.encode(), "gs://b/shards/index.json")
    assert "format version 1; this trainer reads version 2" in raised.value.message
    assert raised.value.hint.startswith(
        "python -m trainer.data.reindex --data_dir=gs://b/shards adds that")


def test_the_split_identity_changes_with_the_examples_in_each_shard_only():
    members = [("k{}.jpg".format(i), bytes([i]) * 50) for i in range(6)]

    def index(order):
        shards = [Shard.of_bytes("train-{:06d}.tar".format(n), shard_of(
            [members[i] for i in order[n * 3:(n + 1) * 3]])) for n in range(2)]
        return ShardIndex(["a"], {"train": shards, "val": []})

    made = index([0, 1, 2, 3, 4, 5])
    identity = split_identity(made, "train")
    assert identity["shards"] == 2 and identity["examples"] == 6
    # The same set, read back from its index.json: the same identity.
    assert split_identity(ShardIndex.from_json(made.to_json(), "index.json"),
                          "train") == identity
    # The same images shuffled into the shards otherwise (make_shards --seed): another one.
    remade = split_identity(index([3, 1, 2, 0, 4, 5]), "train")
    assert remade["examples"] == 6 and remade["digest"] != identity["digest"]
