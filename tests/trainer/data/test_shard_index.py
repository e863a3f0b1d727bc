"""trainer.data.shard_index: the index round-trips, and anything else is a DataError naming
the file."""

import json

import pytest

from trainer.data.shard_index import ShardIndex
from trainer.errors import DataError


def test_round_trip():
    index = ShardIndex(["a", "b"], {"train": [("train-000000.tar", 5)], "val": []}, ["x.JPEG"])
    again = ShardIndex.from_json(index.to_json(), "here")
    assert again == index and again.examples("train") == 5 and again.shards("test") == []


@pytest.mark.parametrize("data, message", [
    (b"not json", "gs://b/index.json is not a shard index"),
    (json.dumps({"format": "other"}).encode(), "not a tpu-xla-shards index"),
    (json.dumps({"format": "tpu-xla-shards", "version": 9}).encode(), "format version 9"),
    (json.dumps({"format": "tpu-xla-shards", "version": 1, "classes": []}).encode(),
     "'splits'"),
])
def test_what_is_not_an_index_is_a_data_error_naming_the_file(data, message):
    with pytest.raises(DataError, match=message) as raised:
        ShardIndex.from_json(data, "gs://b/index.json")
    assert "gs://b/index.json" in raised.value.message and raised.value.hint
