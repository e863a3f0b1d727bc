"""trainer.data.shard_source on shards of real photographs (``photo_shards``: 8 train shards
of 24, 64 val images in 3 shards), locally and from fake-gcs-server: with injected host
indices and 0, 1 and 3 data worker processes, the union of what every host and worker trains
on in an epoch is the training set but fewer than one global batch, each example once; the
evaluation counts each image once; a resumed epoch continues with the same examples whatever
the worker count, reading nothing before it; bytes read per epoch are the split's at most."""

from collections import Counter

import pytest
import torch

from conftest import upload_folder
from trainer import storage
from trainer.batches import IGNORE_LABEL, WHOLE, HostPart
from trainer.data import images
from trainer.data.epoch_order import BLOCK_EXAMPLES
from trainer.data.shard_examples import labelled
from trainer.data.shard_index import Shard, ShardIndex
from trainer.data.shard_source import ShardSource
from trainer.data.tar_members import tar_bytes
from trainer.errors import DataError, TrainerError

SIZE = 32  # pixels: the decode is what is tested, not the image size
SEED = 5


def source(data_dir, batch=8, workers=0, seed=SEED, host=WHOLE, eval_batch=0):
    return ShardSource(str(data_dir), SIZE, batch, workers, seed, eval_batch, host)


def flat(batches):
    return [(x.clone(), y.clone()) for x, y in batches]


def same(first, second):
    return len(first) == len(second) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))


def split_examples(data_dir, split):
    """(name SHARD#KEY, image bytes, label) of every example of ``split``, read whole from
    the files."""
    root = storage.open_dir(str(data_dir))
    index = ShardIndex.from_json(root.read_bytes("index.json"), "index.json")
    return [example for name, count in index.shards(split)
            for example in labelled(root.read_bytes(name), root.join(name), count)]


def identities(rows, table):
    """The key of each image row, found in ``table`` (image bytes -> key)."""
    return [table[bytes(row.numpy())] for row in rows]


class CountingReads:
    """A directory that records the reads made through it: (name, start, length)."""

    def __init__(self, directory):
        self.directory, self.reads = directory, []
        self.uri = directory.uri
        self.join = directory.join

    def read_range(self, name, start, length):
        self.reads.append((name, start, length))
        return self.directory.read_range(name, start, length)

    def join(self, name):
        return self.directory.join(name)


def test_an_epoch_is_whole_batches_of_distinct_examples_in_a_seeded_order(photo_shards):
    data = source(photo_shards, batch=8)
    assert data.steps_per_epoch == 24 and data.layout == {
        "seed": SEED, "block_examples": BLOCK_EXAMPLES, "block_boundaries": 2,
        "mixing_steps": 4}
    epoch = flat(data.train_batches(0))
    assert len(epoch) == 24
    assert all(x.shape == (8, 3, SIZE, SIZE) and x.dtype == torch.uint8 for x, _ in epoch)
    labels = torch.cat([y for _, y in epoch])
    assert Counter(labels.tolist()) == Counter({label: 24 for label in range(8)})
    assert same(epoch, flat(source(photo_shards, batch=8).train_batches(0)))
    assert not same(epoch, flat(data.train_batches(1)))
    assert not same(epoch, flat(source(photo_shards, batch=8, seed=6).train_batches(0)))


@pytest.mark.parametrize("hosts", [2, 4])
@pytest.mark.parametrize("workers", [0, 1, 3])
def test_every_host_and_worker_together_see_each_example_once(photo_shards, gcs, hosts,
                                                              workers):
    shards = upload_folder(photo_shards, gcs, "shards")
    epoch, per_host, eval_per_host = 1, 10, 6  # 192 train examples: some are left out
    train = {bytes(images.train_image(data, SIZE, images.draws(SEED, epoch, key)).numpy()): key
             for key, data, _ in split_examples(photo_shards, "train")}
    val = {bytes(images.eval_image(data, SIZE).numpy()): key
           for key, data, _ in split_examples(photo_shards, "val")}
    assert len(train) == 192 and len(val) == 64  # every image tells its example apart
    parts = [source(shards, per_host * hosts, workers, host=HostPart(index, hosts),
                    eval_batch=eval_per_host * hosts) for index in range(hosts)]
    trained = [flat(part.train_batches(epoch)) for part in parts]
    batch = per_host * hosts
    assert all(len(batches) == parts[0].steps_per_epoch == 192 // batch for batches in trained)
    keys = [key for batches in trained for x, _ in batches for key in identities(x, train)]
    assert len(set(keys)) == len(keys) == 192 // batch * batch and 192 - len(keys) < batch
    # The hosts' parts of a step, side by side, are the step one host trains.
    alone = flat(source(shards, batch, workers).train_batches(epoch))
    assert same([(torch.cat([batches[step][0] for batches in trained]),
                  torch.cat([batches[step][1] for batches in trained]))
                 for step in range(len(alone))], alone)

    evaluated = [flat(part.eval_batches()) for part in parts]
    assert all(len(batches) == parts[0].eval_steps <= -(-64 // (eval_per_host * hosts)) + 1
               for batches in evaluated)
    assert all(x.shape[0] == eval_per_host for batches in evaluated for x, _ in batches)
    rows = [(x[y != IGNORE_LABEL], y) for batches in evaluated for x, y in batches]
    val_keys = [key for x, _ in rows for key in identities(x, val)]
    assert sorted(val_keys) == sorted(val.values())

    # Host 1 resumed at step 3 with another worker count: the same batches from there.
    resumed = source(shards, batch, (workers + 1) % 4, host=HostPart(1, hosts))
    assert same(flat(resumed.train_batches(epoch, 3)), trained[1][3:])


@pytest.mark.parametrize("hosts", [1, 2])
def test_each_step_holds_what_epoch_order_says_mixed_in_groups_of_4(photo_shards, hosts):
    # The stream's steps, example by example, are ``epoch_order.trained``'s; and mixing took
    # examples from one of a group's steps to another.
    from trainer.data import epoch_order

    epoch, batch = 3, 8
    examples = split_examples(photo_shards, "train")
    table = {bytes(images.train_image(data, SIZE, images.draws(SEED, epoch, key)).numpy()): key
             for key, data, _ in examples}
    counts = [shard.count for shard in source(photo_shards).train.shards]
    keys = {}
    for number, count in enumerate(counts):
        for row in range(count):
            keys[number, row] = examples[sum(counts[:number]) + row][0]
    order = epoch_order.train_order(counts, SEED, epoch)
    for host in range(hosts):
        data = source(photo_shards, batch, host=HostPart(host, hosts))
        mixing = epoch_order.Mixing(SEED, epoch, data.steps_per_epoch)
        unmixed = epoch_order.Mixing(SEED, epoch, data.steps_per_epoch, 1)
        trained = [identities(x, table) for x, _ in flat(data.train_batches(epoch))]
        assert trained == [[keys[row] for row in epoch_order.trained(order, data.cut, mixing,
                                                                     step, host)]
                           for step in range(data.steps_per_epoch)]
        originals = [[keys[row] for row in epoch_order.trained(order, data.cut, unmixed, step,
                                                               host)]
                     for step in range(data.steps_per_epoch)]
        assert trained != originals
        assert sorted(map(sorted, trained[:4])) != sorted(map(sorted, originals[:4]))


def test_resuming_reads_nothing_before_the_steps_group_and_an_epoch_reads_each_byte_once(
        photo_shards):
    data = source(photo_shards, batch=8)
    data.train.root = counting = CountingReads(data.root)
    assert len(flat(data.train_batches(0, 22))) == 2
    # Steps 22 and 23 are mixed with 20 and 21 (a group of 4): the reads are exactly the
    # group's original steps'.
    assert sum(length for _, _, length in counting.reads) == sum(
        data.train.piece_bytes(piece) for step, pieces in _steps(data, 0) if step >= 20
        for piece in pieces)
    counting.reads.clear()
    flat(data.train_batches(1))
    read = sum(length for _, _, length in counting.reads)
    assert read <= data.index.size("train")  # (the tar's end blocks are never read)
    ranges = sorted((name, start, start + length) for name, start, length in counting.reads)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(ranges, ranges[1:]))


def _steps(data, epoch):
    from trainer.data import epoch_order

    order = epoch_order.train_order([shard.count for shard in data.train.shards], SEED, epoch)
    return list(epoch_order.runs(order, data.cut, 0, 0, 0, 0))


@pytest.mark.parametrize("workers", [0, 3])
def test_a_resumed_epoch_is_the_rest_of_the_same_epoch(photo_shards, workers):
    data = source(photo_shards, batch=8, workers=workers)
    whole = flat(data.train_batches(2))
    assert len(whole) == data.steps_per_epoch == 24
    # 24 steps in 6 mixing groups of 4: resumed at a group's first, second and last step
    # and the epoch's last.
    for start in (1, 3, 4, 5, data.steps_per_epoch - 1):
        assert same(flat(data.train_batches(2, start)), whole[start:]), start


def test_the_same_batches_from_cloud_storage(photo_shards, gcs):
    remote = source(upload_folder(photo_shards, gcs, "shards"), batch=8, workers=2)
    local = source(photo_shards, batch=8, workers=2)
    assert same(flat(remote.train_batches(1, 3)), flat(local.train_batches(1, 3)))
    assert same(flat(remote.eval_batches()), flat(local.eval_batches()))


def write_set(folder, train, val=None):
    """A shard set of the tar shards ``train`` (and ``val``, default the same), indexed."""
    splits = {}
    for split, shards in (("train", train), ("val", val or train)):
        splits[split] = []
        for number, data in enumerate(shards):
            name = "{}-{:06d}.tar".format(split, number)
            (folder / name).write_bytes(data)
            splits[split].append(Shard.of_bytes(name, data))
    (folder / "index.json").write_bytes(ShardIndex(["a", "b"], splits).to_json())
    return folder


def test_what_cannot_be_read_is_a_clear_error(photo_shards, tmp_path):
    with pytest.raises(DataError, match="has no index.json"):
        source(tmp_path)
    with pytest.raises(TrainerError, match="--batch_size is too large"):
        source(photo_shards, batch=400)
    # More hosts than shards is fine now: 9 hosts of 8 examples each, 2 steps.
    assert source(photo_shards, batch=72, host=HostPart(8, 9)).steps_per_epoch == 2
    # A shard the index lists that is missing, shorter than the index says, or changed.
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "index.json").write_bytes((photo_shards / "index.json").read_bytes())
    with pytest.raises(DataError, match=r"lists shard train-\d{6}.tar but there is no such file"):
        flat(source(broken).train_batches(0))
    for path in photo_shards.glob("*.tar"):
        (broken / path.name).write_bytes(path.read_bytes()[:5000])
    with pytest.raises(DataError, match=r"train-\d{6}.tar ends at byte 5000, before"):
        flat(source(broken).train_batches(0))
    for path in photo_shards.glob("*.tar"):
        data = bytearray(path.read_bytes())
        data[2000] ^= 0xFF  # inside the first example's image
        (broken / path.name).write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"train-\d{6}.tar: example 0 of 24 does not match "
                                        "index.json's checksum"):
        flat(source(broken).train_batches(0))
    # An indexed example without a label.
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    write_set(unlabelled, [tar_bytes([("a.jpg", b"x"), ("b.jpg", b"y")])])
    with pytest.raises(DataError, match="example 'a' lacks an image or a .cls label"):
        flat(source(unlabelled, batch=2).train_batches(0))
