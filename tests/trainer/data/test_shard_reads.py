"""trainer.data.shard_reads: ranged reads of pieces from fake-gcs-server behind a proxy that
corrupts or cuts bodies (a corrupt range is read again, a shard that differs from its index
is a DataError naming it), and the look-ahead that keeps the order, raises where a fetch
failed, and stops fetching once its consumer is gone."""

import threading

import pytest
from gcs_fault_proxy import Rule

from conftest import upload_folder
from trainer import storage
from trainer.data.shard_index import ShardIndex
from trainer.data.shard_reads import ShardReader, prefetched
from trainer.errors import DataError


@pytest.fixture
def remote(faulty_gcs, photo_shards, monkeypatch):
    """(reader of the train split through the fault proxy, the proxy)."""
    bucket, proxy = faulty_gcs
    uri = upload_folder(photo_shards, bucket, "shards")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    monkeypatch.setattr(storage, "RETRY_DEADLINE_S", 3.0)
    root = storage.open_dir(uri)
    index = ShardIndex.from_json(root.read_bytes("index.json"), "index.json")
    return ShardReader(root, index.entries("train")), proxy


PIECE = (1, 3, 11)  # examples 3 to 10 of the second shard


def test_a_piece_is_exactly_its_examples(remote):
    reader, _ = remote
    data = reader.read_piece(PIECE)
    assert len(data) == reader.piece_bytes(PIECE)
    examples = reader.unpacked([PIECE], [data])
    assert len(examples) == 8 and all(label in range(8) for _, _, label in examples)


def test_a_corrupt_range_is_read_again(remote):
    reader, proxy = remote
    expected = reader.read_piece(PIECE)
    rule = proxy.add(Rule("train-000001.tar", methods=("GET",), mangle="corrupt", every=2))
    assert reader.read_piece(PIECE) == expected
    assert rule.matched == 2 and rule.broken == 1


def test_a_cut_range_is_retried_by_the_storage_layer(remote):
    reader, proxy = remote
    expected = reader.read_piece(PIECE)
    rule = proxy.add(Rule("train-000001.tar", methods=("GET",), mangle="truncated", every=2))
    assert reader.read_piece(PIECE) == expected
    assert rule.broken == 1


def test_bytes_that_never_match_the_index_are_a_data_error_naming_the_shard(remote):
    reader, proxy = remote
    proxy.add(Rule("train-000001.tar", methods=("GET",), mangle="corrupt"))
    with pytest.raises(DataError, match=r"gs://.*/shards/train-000001.tar: example 10 of 24 "
                                        "does not match index.json's checksum") as raised:
        reader.read_piece(PIECE)
    assert "changed after the index was written" in raised.value.hint


def test_prefetch_keeps_the_order_fetches_ahead_and_raises_where_a_fetch_failed():
    fetched, b_fetched = [], threading.Event()

    def fetch(name, stop):
        fetched.append(name)
        if name == "a":
            b_fetched.wait(5)  # "a" ends after "b": the order must not follow completion
        if name == "b":
            b_fetched.set()
        if name == "d":
            raise DataError("d is broken", "")
        return name.upper()

    shards = prefetched(["a", "b", "c", "d", "e"], fetch, ahead=2)
    assert next(shards) == "A"
    # "a" and "b" were started first; "c" only when "a" was taken.
    assert set(fetched) <= {"a", "b", "c"}
    assert [next(shards), next(shards)] == ["B", "C"]
    with pytest.raises(DataError, match="d is broken"):
        next(shards)


def test_a_closed_prefetch_tells_the_fetches_under_way_to_stop():
    stops, release = [], threading.Event()

    def fetch(item, stop):
        stops.append(stop)
        if item:  # the first arrives at once, the others are under way when it is closed
            release.wait(5)
        return item

    items = prefetched(range(10), fetch, ahead=2)
    assert next(items) == 0
    items.close()
    release.set()
    assert len(stops) == 3 and all(stop.is_set() for stop in stops)
