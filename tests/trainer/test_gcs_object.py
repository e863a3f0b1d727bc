"""trainer.gcs_object: an object's bytes in one read, checked, retried, through a proxy in
front of fake-gcs-server that breaks the reads."""

import os

import pytest
from gcs_fault_proxy import Rule

from trainer import storage
from trainer.errors import StorageError

BIG = os.urandom(5_000_003)  # several of urllib3's and the server's buffers, an odd length


@pytest.fixture
def shards(faulty_gcs, monkeypatch):
    """(directory, proxy): ``gs://BUCKET/shards`` holding ``big`` and ``empty``, read through
    the fault proxy, with a 3 s retry deadline."""
    bucket, proxy = faulty_gcs
    bucket.blob("shards/big").upload_from_string(BIG)
    bucket.blob("shards/empty").upload_from_string(b"")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    monkeypatch.setattr(storage, "RETRY_DEADLINE_S", 3.0)
    return storage.open_dir("gs://{}/shards".format(bucket.name)), proxy


def test_the_bytes_are_the_objects(shards):
    directory, _ = shards
    assert directory.read_bytes("big") == BIG
    assert directory.read_bytes("empty") == b""


@pytest.mark.parametrize("mangle", ["corrupt", "truncated"])
def test_a_corrupt_or_cut_body_is_read_again(shards, mangle):
    directory, proxy = shards
    rule = proxy.add(Rule("shards/big", methods=("GET",), mangle=mangle, every=2))
    assert directory.read_bytes("big") == BIG
    assert rule.broken == 1 and rule.matched == 2


@pytest.mark.parametrize("mangle, cause", [("corrupt", "CRC32C mismatch"),
                                           ("truncated", "")])
def test_a_body_that_never_arrives_whole_is_a_storage_error(shards, mangle, cause):
    directory, proxy = shards
    proxy.add(Rule("shards/big", methods=("GET",), mangle=mangle))
    with pytest.raises(StorageError, match="GCS kept failing for gs://.*/shards/big") as error:
        directory.read_bytes("big")
    assert cause in str(error.value)


@pytest.mark.parametrize("mangle", ["truncated", "corrupt"])
def test_a_range_is_its_bytes_and_a_cut_one_is_read_again(shards, mangle):
    # A range has no checksum of its own (the object's hash is of the whole object): a cut
    # body is read again here; a corrupt one is the caller's to notice (the shard reader
    # checks each example against its index).
    directory, proxy = shards
    rule = proxy.add(Rule("shards/big", methods=("GET",), mangle=mangle, every=2))
    data = directory.read_range("big", 1000, 100_001)
    assert len(data) == 100_001 and rule.broken == 1
    assert (data == BIG[1000:101_001]) == (mangle == "truncated")
    assert directory.read_range("big", len(BIG) - 3, 10) == BIG[-3:]


def test_a_missing_object_is_not_found(shards):
    directory, _ = shards
    with pytest.raises(FileNotFoundError, match="shards/missing"):
        directory.read_bytes("missing")

