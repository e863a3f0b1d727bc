"""trainer.data.folder_source: a class-folder tree, in the order of the seed and the global
batch, each host of a slice loading its part, through the persistent stream (its tests run
on class folders too: test_stream.py); a file gone mid-run is one data error."""

from collections import defaultdict

import pytest
import torch

from conftest import make_image_folder
from trainer.batches import HostPart, epoch_order
from trainer.data.epoch_order import Cut
from trainer.data.folder_source import FolderOrder, FolderSource
from trainer.errors import DataError


def test_hosts_of_a_slice_load_their_parts_of_the_same_image_batches(tmp_path):
    """Each of 2 hosts decodes only its half of every global batch (train, resumed part-way,
    and evaluation), and the halves join to what one host loads: every evaluation example
    once, the padding never counted."""

    # 14 images a split: the last evaluation batch is 2 images and 2 padding, so host 2's
    # part of it is all padding (it loads nothing for it).
    data = make_image_folder(tmp_path / "images", classes=2, per_class=7)

    def source(part):
        return FolderSource(str(data), 16, 4, 0, seed=3, eval_batch_size=4, host=part)

    whole, halves = source(HostPart()), [source(HostPart(index, 2)) for index in (0, 1)]
    for start in (0, 1):
        joined = zip(*(half.train_batches(1, start) for half in halves))
        for (x, y), pieces in zip(whole.train_batches(1, start), joined):
            assert torch.equal(torch.cat([piece[0] for piece in pieces]), x)
            assert torch.equal(torch.cat([piece[1] for piece in pieces]), y)
    evaluated = [torch.cat([piece[1] for piece in pieces])
                 for pieces in zip(*(half.eval_batches() for half in halves))]
    assert len(evaluated) == whole.eval_steps == 4
    labels = torch.cat(evaluated)
    assert torch.equal(labels, torch.cat([y for _, y in whole.eval_batches()]))
    assert sorted(labels[labels >= 0].tolist()) == sorted(label for _, label in whole.val.files)


def test_the_training_order_is_the_epochs_permutation_of_the_whole_split(tmp_path):
    # 3 classes of 4: 12 examples, 3 global batches of 4 a epoch, every example once, in the
    # order of batches.epoch_order (which a resume relies on), with 2 data workers.
    data = make_image_folder(tmp_path / "images")
    source = FolderSource(str(data), 16, 4, 2, seed=3)
    try:
        for epoch in (0, 1):
            labels = torch.cat([y for _, y in source.train_batches(epoch)])
            expected = [source.train.files[index][1]
                        for index in epoch_order(12, 3, epoch).tolist()]
            assert labels.tolist() == expected
    finally:
        source.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_an_image_removed_while_the_run_reads_the_tree_is_one_data_error(tmp_path, workers):
    data = make_image_folder(tmp_path / "images")
    source = FolderSource(str(data), 16, 4, workers, seed=3)
    (data / "train" / "class1" / "2.png").unlink()
    try:
        with pytest.raises(DataError) as raised:
            list(source.train_batches(0))
    finally:
        source.close()
    assert raised.value.exit_code == 65
    assert raised.value.message == "{} is gone: it was listed when the run started".format(
        data / "train" / "class1" / "2.png")
    assert "leave --data_dir as it is" in raised.value.hint


@pytest.mark.parametrize("hosts, chips", [(1, 4), (16, 4), (64, 4), (64, 8)])
def test_at_imagenet_size_every_host_and_worker_get_bounded_units_covering_the_epoch(
        hosts, chips):
    # ImageNet as class folders (1,281,167 training files), 128 per chip, 32 workers a host,
    # without reading data: every step's units (per host at most one per worker, each at
    # most ceil(L / 32) files, the bound plan.unit_bytes sizes /dev/shm by) hold each
    # example of the epoch's N // B steps once across all hosts.
    from trainer.data import epoch_order as order_module
    from trainer.data import plan

    files, workers = 1281167, 32
    batch = 128 * chips * hosts
    cut = Cut(files, batch, hosts)
    order = FolderOrder(files, True)(7, 3)
    local = cut.local_batch
    shape = plan.SliceShape(hosts, chips * hosts, batch, batch, workers, 224)
    bound_rows = -(-local // workers)
    assert plan.unit_bytes(shape) >= bound_rows * (3 * 224 * 224 + 8)
    seen = torch.zeros(files, dtype=torch.int8)
    for host in range(hosts):
        units = list(order_module.units(order, cut, host, 0, workers))
        by_step = defaultdict(list)
        for unit_step, _, _, pieces in units:
            by_step[unit_step].append(pieces)
        assert sorted(by_step) == list(range(cut.steps))
        for mine in by_step.values():
            assert 1 <= len(mine) <= workers
            assert all(len(pieces) <= bound_rows for pieces in mine)
            assert sum(len(pieces) for pieces in mine) == local
        numbers = torch.tensor([first for unit in units for _, first, _ in unit[3]])
        seen.index_add_(0, numbers, torch.ones(len(numbers), dtype=torch.int8))
    assert int(seen.max()) == 1 and int(seen.sum()) == cut.steps * batch


def test_its_identity_is_the_training_files_and_their_classes_and_its_layout_the_seed(
        tmp_path):
    data = make_image_folder(tmp_path / "images")

    def identity():
        return FolderSource(str(data), 16, 4, 0, seed=3).identity()

    first = identity()
    assert first["examples"] == 12 and identity() == first
    assert FolderSource(str(data), 16, 4, 0, seed=4).layout == {"seed": 4}
    (data / "train" / "class1" / "2.png").rename(data / "train" / "class2" / "9.png")
    moved = identity()
    assert moved["examples"] == 12 and moved != first  # the same count, another class
    (data / "train" / "class0" / "0.png").unlink()
    assert identity()["examples"] == 11


@pytest.mark.parametrize("workers", [0, 2])
def test_a_damaged_file_is_stood_in_for_in_training_and_left_out_of_evaluation(tmp_path,
                                                                               workers):
    """One train and one val file cut short: training batches keep every row (another image
    of the batch in its place, the same on a resumed epoch), evaluation masks the row, and the
    ledger counts each once; it ended the run (exit 65)."""
    data = make_image_folder(tmp_path / "images", classes=2, per_class=8)  # 4 whole steps
    for split in ("train", "val"):
        damaged = sorted((data / split).glob("*/*.png"))[3]
        damaged.write_bytes(damaged.read_bytes()[:60])

    def source():
        return FolderSource(str(data), 16, 4, workers, seed=3, eval_batch_size=4)

    first = source()
    trained = list(first.train_batches(0))
    assert all((y >= 0).all() for _, y in trained)
    labels = torch.cat([y for _, y in first.eval_batches()])
    assert int((labels >= 0).sum()) == len(first.val.files) - 1
    assert first.damaged_images(0) == {"train_damaged_images": 1, "eval_damaged_images": 1}
    resumed = list(source().train_batches(0, 1))  # another process, from step 2
    for (x, y), (again_x, again_y) in zip(trained[1:], resumed):
        assert torch.equal(x, again_x) and torch.equal(y, again_y)
    first.close()
