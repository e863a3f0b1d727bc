"""trainer.data.shard_source on shards of real photographs (``photo_shards``: 8 train shards
of 24, 64 val images in 3 shards): disjoint shards per worker and host, a deterministic
order per (seed, epoch), exact resume without reading skipped shards, every evaluation
example once, and the same batches from fake-gcs-server as from a local folder."""

import threading
from collections import Counter

import pytest
import torch

from trainer.batches import IGNORE_LABEL, WHOLE, HostPart
from trainer.data.shard_source import ShardSource, _prefetched
from trainer.data.tar_members import tar_bytes
from trainer.errors import DataError, TrainerError

SIZE = 32  # pixels: the decode is what is tested, not the image size


def source(data_dir, batch=8, workers=0, seed=5, host=WHOLE, eval_batch=0):
    return ShardSource(str(data_dir), SIZE, batch, workers, seed, eval_batch, host)


def flat(batches):
    return [(x.clone(), y.clone()) for x, y in batches]


def same(first, second):
    return len(first) == len(second) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))


class CountingReads:
    """A directory that counts what is read from it (shard names)."""

    def __init__(self, directory):
        self.directory, self.reads = directory, []
        self.uri = directory.uri

    def read_bytes(self, name):
        self.reads.append(name)
        return self.directory.read_bytes(name)

    def join(self, name):
        return self.directory.join(name)


def test_an_epoch_is_whole_batches_of_distinct_examples_in_a_seeded_order(photo_shards):
    data = source(photo_shards, batch=8)
    # One stream (no workers) reads all 8 shards of 24: 192 examples, 24 batches.
    assert data.steps_per_epoch == 24 and data.layout == {"num_workers": 0, "hosts": 1}
    epoch = flat(data.train_batches(0))
    assert len(epoch) == 24
    assert all(x.shape == (8, 3, SIZE, SIZE) and x.dtype == torch.uint8 for x, _ in epoch)
    labels = torch.cat([y for _, y in epoch])
    assert Counter(labels.tolist()) == Counter({label: 24 for label in range(8)})
    assert same(epoch, flat(source(photo_shards, batch=8).train_batches(0)))
    assert not same(epoch, flat(data.train_batches(1)))
    assert not same(epoch, flat(source(photo_shards, batch=8, seed=6).train_batches(0)))


@pytest.mark.parametrize("workers", [0, 3])
def test_a_resumed_epoch_is_the_rest_of_the_same_epoch(photo_shards, workers):
    data = source(photo_shards, batch=8, workers=workers)
    # 3 workers: 8 shards // 3 streams = 2 shards (48 examples, 6 batches) each: 18 steps.
    assert data.steps_per_epoch == (24 if workers == 0 else 18)
    whole = flat(data.train_batches(2))
    assert len(whole) == data.steps_per_epoch
    for start in (1, 4, data.steps_per_epoch - 1):
        assert same(flat(data.train_batches(2, start)), whole[start:]), start


def test_resuming_does_not_read_the_shards_it_skips(photo_shards):
    data = source(photo_shards, batch=8)
    data.root = counting = CountingReads(data.root)
    # Step 22 of 24 is examples 176-183: the 8th shard (168-191); the first 7 are skipped.
    assert len(flat(data.train_batches(0, 22))) == 2
    assert len(counting.reads) == 1


def test_hosts_read_disjoint_shards_and_workers_disjoint_examples(photo_shards):
    hosts = [source(photo_shards, batch=8, host=HostPart(i, 2)) for i in (0, 1)]
    for host in hosts:
        host.root = CountingReads(host.root)
        assert len(flat(host.train_batches(0))) == host.steps_per_epoch == 24  # 4 x 24 / 4
    reads = [set(host.root.reads) for host in hosts]
    assert not reads[0] & reads[1] and len(reads[0] | reads[1]) == 8
    # 2 hosts x 2 workers: 4 streams of 2 shards each, so the epoch uses all 192 examples;
    # each label 24 times means no example came twice.
    hosts = [source(photo_shards, batch=8, workers=2, host=HostPart(i, 2)) for i in (0, 1)]
    labels = torch.cat([y for host in hosts for _, y in host.train_batches(3)])
    assert Counter(labels.tolist()) == Counter({label: 24 for label in range(8)})


def test_every_evaluation_example_once_over_hosts_and_workers(photo_shards):
    hosts = [source(photo_shards, batch=8, workers=2, eval_batch=16, host=HostPart(i, 2))
             for i in (0, 1)]
    evaluated = [flat(host.eval_batches()) for host in hosts]
    assert len(evaluated[0]) == len(evaluated[1]) == hosts[0].eval_steps
    labels = torch.cat([y for batches in evaluated for _, y in batches])
    assert Counter(labels[labels != IGNORE_LABEL].tolist()) == Counter(
        {label: 8 for label in range(8)})
    assert all(x.shape[0] == 8 for batches in evaluated for x, _ in batches)


def test_the_same_batches_from_cloud_storage(photo_shards, gcs):
    for path in sorted(photo_shards.iterdir()):
        gcs.blob("shards/" + path.name).upload_from_filename(str(path))
    remote = source("gs://{}/shards".format(gcs.name), batch=8, workers=2)
    local = source(photo_shards, batch=8, workers=2)
    assert same(flat(remote.train_batches(1, 3)), flat(local.train_batches(1, 3)))
    assert same(flat(remote.eval_batches()), flat(local.eval_batches()))


def test_what_cannot_be_read_is_a_clear_error(photo_shards, tmp_path):
    with pytest.raises(DataError, match="has no index.json"):
        source(tmp_path)
    with pytest.raises(TrainerError, match="--batch_size is too large"):
        source(photo_shards, batch=400)
    with pytest.raises(DataError, match="too few for 9 host"):
        source(photo_shards, batch=9, host=HostPart(0, 9))
    # More workers than shards: as many as have a shard each.
    assert source(photo_shards, workers=20).workers == 8
    # A shard the index lists that is missing, not a tar, or holds an example without a label.
    (tmp_path / "index.json").write_bytes((photo_shards / "index.json").read_bytes())
    with pytest.raises(DataError, match=r"lists shard train-\d{6}.tar but there is no such file"):
        flat(source(tmp_path).train_batches(0))
    for name in sorted(path.name for path in photo_shards.glob("*.tar")):
        (tmp_path / name).write_bytes(b"not a tar")
    with pytest.raises(DataError, match="is not a readable tar shard"):
        flat(source(tmp_path).train_batches(0))
    for name in sorted(path.name for path in photo_shards.glob("*.tar")):
        (tmp_path / name).write_bytes(tar_bytes([("a.jpg", b"x")]))
    with pytest.raises(DataError, match="example 'a' lacks an image or a .cls label"):
        flat(source(tmp_path).train_batches(0))


def test_prefetch_keeps_the_order_fetches_ahead_and_raises_where_a_fetch_failed():
    fetched, b_fetched = [], threading.Event()

    def fetch(name):
        fetched.append(name)
        if name == "a":
            b_fetched.wait(5)  # "a" ends after "b": the order must not follow completion
        if name == "b":
            b_fetched.set()
        if name == "d":
            raise DataError("d is broken", "")
        return name.upper()

    names = ["a", "b", "c", "d", "e"]
    shards = _prefetched(names, fetch, ahead=2)
    assert next(shards) == "A"
    # "a" and "b" were started first; "c" only when "a" was taken.
    assert set(fetched) <= {"a", "b", "c"}
    assert [next(shards), next(shards)] == ["B", "C"]
    with pytest.raises(DataError, match="d is broken"):
        next(shards)
