"""trainer.data.stream on shards of real photographs (``photo_shards``: 8 train shards of 24,
64 val images) and on the same photographs as a class-folder tree (``photos``): the data
workers start once for epochs and evaluations one after another and are the same processes
throughout; every batch is the one a stream started at its own segment gives (so resuming is
exact), with 0, 1 or 3 workers; a request the stream did not anticipate starts it again
there; ``close`` ends the workers."""

import itertools
import os

import pytest
import torch

from trainer.batches import RunSchedule
from trainer.data.folder_source import FolderSource
from trainer.data.shard_source import ShardSource
from trainer.data.stream import EVAL, TRAIN, segments

SIZE, SEED = 32, 5


def source(data, workers, batch=8):
    """``data``: a shard set's folder, or (FolderSource, a class-folder tree)."""
    reader, data_dir = data if isinstance(data, tuple) else (ShardSource, data)
    return reader(str(data_dir), SIZE, batch, workers, SEED, 16)


@pytest.fixture(params=["shards", "folders"])
def either(request, photo_shards, photos):
    """The photographs as shards, then as class folders: the same stream reads both."""
    return photo_shards if request.param == "shards" else (FolderSource, photos)


def flat(batches):
    return [(x.clone(), y.clone()) for x, y in batches]


def same(first, second):
    return len(first) == len(second) and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))


def worker_pids(data):
    workers = getattr(data.stream.items, "batches", None)
    return sorted(worker.pid for worker in getattr(workers, "_workers", []))


def test_the_segments_follow_each_other_epoch_evaluation_epoch():
    following = segments((TRAIN, 3, 7))
    assert [next(following) for _ in range(4)] == [(TRAIN, 3, 7), (EVAL, 4, 0), (TRAIN, 4, 0),
                                                   (EVAL, 5, 0)]
    assert list(segments((EVAL, None, 0))) == [(EVAL, None, 0)]


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_one_stream_for_epochs_and_evaluations_gives_each_segments_own_batches(
        either, workers):
    data = source(either, workers)
    try:
        run = []
        for epoch in (0, 1):
            run.append(flat(data.train_batches(epoch)))
            if epoch == 0:
                pids = worker_pids(data)
                assert len(pids) == workers
            assert data.stream.at == (EVAL, epoch + 1, 0)  # the evaluation is under way
            run.append(flat(data.eval_batches()))
            assert data.stream.at == (TRAIN, epoch + 1, 0)
        assert worker_pids(data) == pids  # the same processes throughout
    finally:
        data.close()
    assert data.stream.items is None
    assert all(not os.path.exists("/proc/{}".format(pid)) or _zombie(pid) for pid in pids)
    # Each segment alone, in a fresh source with another worker count: the same batches.
    alone = source(either, (workers + 1) % 4)
    try:
        assert same(run[0], flat(alone.train_batches(0)))
        assert same(run[1], flat(alone.eval_batches()))
        assert same(run[2], flat(alone.train_batches(1)))
        assert same(run[3], run[1])
        assert len(run[0]) == 24 and len(run[1]) == 4  # 192 / 8; 64 / 16
    finally:
        alone.close()


def test_a_request_it_did_not_anticipate_starts_the_stream_there(either):
    data = source(either, 2)
    whole = source(either, 0)
    try:
        first = iter(data.train_batches(0))
        part = [next(first) for _ in range(5)]  # --num_steps=5 stops the epoch here
        assert data.stream.at == (TRAIN, 0, 5)
        resumed = flat(data.train_batches(0, 17))  # a resume, say
        assert next(first, None) is None  # the older request's batches end
        epoch = flat(whole.train_batches(0))
        assert same(flat(part), epoch[:5]) and same(resumed, epoch[17:])
        assert same(flat(data.train_batches(1, 3)), flat(whole.train_batches(1))[3:])
    finally:
        data.close()
        whole.close()


def _zombie(pid):
    with open("/proc/{}/stat".format(pid)) as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in "ZX"


def test_a_run_stopped_within_a_mixing_group_continues_from_the_group_it_holds(photo_shards):
    # --num_steps=6 stops in the group of steps 4 to 7, whose units the workers have built:
    # asked for step 6 next, the stream goes on with the same workers and the group it
    # holds, and the steps are those of a stream started at step 6.
    data = source(photo_shards, 3)
    whole = source(photo_shards, 0)
    try:
        first = iter(data.train_batches(0))
        part = [next(first) for _ in range(6)]
        pids = worker_pids(data)
        rest = flat(data.train_batches(0, 6))
        assert worker_pids(data) == pids  # not started again
        epoch = flat(whole.train_batches(0))
        assert same(flat(part), epoch[:6]) and same(rest, epoch[6:])
        assert same(flat(whole.train_batches(0, 6)), epoch[6:])
    finally:
        data.close()
        whole.close()


def drawn_as_a_run_draws(data, schedule, first=(0, 0)):
    """Every batch of the run ``schedule`` describes, requested as ``fit`` requests them (each
    segment cut to its steps, never one batch more), from epoch ``first[0]`` step
    ``first[1]`` on: [(kind, epoch, batches)]."""
    data.schedule(schedule)
    drawn = []
    epoch, step = first
    while schedule.trains(epoch):
        steps = min(data.steps_per_epoch, schedule.train_steps or data.steps_per_epoch)
        drawn.append((TRAIN, epoch, flat(itertools.islice(data.train_batches(epoch, step),
                                                          max(0, steps - step)))))
        epoch, step = epoch + 1, 0
        if schedule.evaluates_after(epoch):
            drawn.append((EVAL, epoch, flat(itertools.islice(
                data.eval_batches(), schedule.eval_steps or data.eval_steps))))
    return drawn


def test_the_segments_follow_the_runs_schedule_to_its_end():
    every_third = RunSchedule(epochs=6, eval_every=3)
    assert list(segments((TRAIN, 1, 5), every_third)) == [
        (TRAIN, 1, 5), (TRAIN, 2, 0), (EVAL, 3, 0), (TRAIN, 3, 0), (TRAIN, 4, 0),
        (TRAIN, 5, 0), (EVAL, 6, 0)]
    assert list(segments((EVAL, 2, 0), RunSchedule(epochs=2))) == [(EVAL, 2, 0)]


def test_evaluating_every_third_epoch_starts_the_workers_once_in_six_epochs(photo_shards):
    data = source(photo_shards, 2)
    try:
        drawn = drawn_as_a_run_draws(data, RunSchedule(epochs=6, eval_every=3))
        assert [(kind, epoch) for kind, epoch, _ in drawn] == [
            (TRAIN, 0), (TRAIN, 1), (TRAIN, 2), (EVAL, 3), (TRAIN, 3), (TRAIN, 4), (TRAIN, 5),
            (EVAL, 6)]
        assert data.stream.starts == 1
        assert data.stream.at is None  # the run's last segment is the stream's last
    finally:
        data.close()
    whole = source(photo_shards, 0)
    try:
        assert same(drawn[4][2], flat(whole.train_batches(3)))
        assert same(drawn[7][2], flat(whole.eval_batches()))
    finally:
        whole.close()


def test_num_steps_builds_only_the_steps_it_trains_and_the_stream_runs_on(photo_shards):
    # --num_steps=5 on 24-step epochs: each epoch's 5 steps and a 2-step evaluation, all
    # from one start of the workers; the steps are the full epoch's first 5.
    data = source(photo_shards, 2)
    try:
        drawn = drawn_as_a_run_draws(data, RunSchedule(2, 1, train_steps=5, eval_steps=2))
        assert [len(batches) for _, _, batches in drawn] == [5, 2, 5, 2]
        assert data.stream.starts == 1 and data.stream.at is None
    finally:
        data.close()
    whole = source(photo_shards, 0)
    try:
        assert same(drawn[2][2], flat(whole.train_batches(1))[:5])
    finally:
        whole.close()


@pytest.mark.parametrize("batch", [10, 24])  # 19 steps an epoch (4k + 3), and 8 (4k)
def test_a_run_stopped_after_an_epochs_last_step_resumes_at_its_evaluation(photo_shards, batch):
    # A SIGTERM read after the last step saves (epoch, step_in_epoch = steps): the resumed
    # stream has no step left to build and goes on with that epoch's evaluation, then the
    # next epoch, from one start of the workers (mixing must not move the start back).
    data = source(photo_shards, 2, batch)
    try:
        steps = data.steps_per_epoch
        drawn = drawn_as_a_run_draws(data, RunSchedule(epochs=2), first=(0, steps))
        assert [(kind, epoch, len(batches)) for kind, epoch, batches in drawn] == [
            (TRAIN, 0, 0), (EVAL, 1, 4), (TRAIN, 1, steps), (EVAL, 2, 4)]
        assert data.stream.starts == 1
    finally:
        data.close()


def test_a_step_is_put_together_from_its_parts_as_they_came_each_image_copied_once():
    """``_joined`` and ``_mixed`` take a step's rows from the units as the workers sent them:
    the same batch as concatenating first (and padding, as ``pad_batch`` does), and the
    units' own memory is never written."""
    from trainer.batches import pad_batch
    from trainer.data.stream import _joined, _mixed

    parts = [(torch.randint(0, 256, (rows, 3, 4, 4), dtype=torch.uint8),
              torch.arange(start, start + rows)) for start, rows in ((0, 3), (3, 2), (5, 3))]
    kept = [(x.clone(), y.clone()) for x, y in parts]
    whole = (torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts]))
    for rows in (8, 11):  # the last evaluation step is padded
        assert same([_joined(parts, rows)], [pad_batch(whole[0], whole[1], rows)])
    # A group of two original steps of 8 rows (the second in one part): rows taken by index.
    second = (torch.randint(0, 256, (8, 3, 4, 4), dtype=torch.uint8), torch.arange(8, 16))
    rows = [9, 1, 2, 11, 4, 13, 6, 15]
    ends = (torch.cat([whole[0], second[0]]), torch.cat([whole[1], second[1]]))
    assert same([_mixed([parts, [second]], rows)], [(ends[0][rows], ends[1][rows])])
    assert same(parts, kept)
