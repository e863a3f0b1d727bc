"""trainer.data.step_ring, alone and under the stream (``photo_shards``: 24 steps of 8 an
epoch, 6 mixing groups; 4 evaluation steps of 16, one slot's worth): a slot is reused only
once every batch handed out of it, and every view of one, is gone, in the order of its
groups; a worker waits for its slot on its doorbell and wakes when the slot is freed; what a
device loader holds never makes the workers copy; a consumer that keeps a batch, or a whole
epoch, never has it overwritten and never deadlocks the workers, and gets the same batches as
the trainer decoding alone (``--num_workers=0``, the steps put together as before the ring);
nothing of a ring outlives a kill -9 in ``/dev/shm``."""

import collections
import os
import signal
import subprocess
import sys
import threading
import time

from test_stream import flat, same, source

from conftest import REPO
from trainer.data import plan
from trainer.data.epoch_order import MIXING_STEPS
from trainer.data.step_ring import StepRing


def test_a_slot_is_free_again_once_its_batches_and_their_views_are_gone_in_its_groups_order():
    ring = StepRing(slots=2, group=2, rows=3, size=2, workers=1)
    assert list(ring.counters) == [0, 1, -1]  # slot s free for group s; nothing wanted
    first = ring.lease(0)  # the stream's hold on group 0 while it hands the group out
    x, y = ring.batch(first, 1, 3)
    assert x.shape == (3, 3, 2, 2) and y.shape == (3,)
    x[:] = 7
    assert int(ring.images[0, 1].sum()) == 7 * x.numel()  # the ring's own rows, no copy
    view, alias = x[1:].view(-1), y.view(3, 1)  # what a consumer may make of them
    del x, y
    first.release()
    assert ring.counters[0] == 0  # views of both live: the slot is still group 0's
    del alias
    assert ring.counters[0] == 0
    # Group 2 (the same slot), built elsewhere while group 0 was held, is let go first: the
    # slot waits for group 0 still, then is free for group 4 at once.
    third = ring.lease(2)
    third.release()
    assert ring.counters[0] == 0
    del view
    assert list(ring.counters) == [4, 1, -1]


def test_a_worker_waits_for_its_slot_and_gives_up_on_it_when_the_consumer_waits_for_it():
    ring = StepRing(slots=2, group=1, rows=1, size=1, workers=2)
    assert ring.claim(1, 0)  # free already
    claimed = []
    waiting = threading.Thread(target=lambda: claimed.append(ring.claim(2, 1)))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and not claimed  # slot 0 is group 0's
    held = ring.lease(0)
    x, y = ring.batch(held, 0, 1)
    held.release()
    del x
    time.sleep(0.1)
    assert waiting.is_alive()  # the labels of a batch of group 0 live
    del y
    waiting.join(5)
    assert claimed == [True]
    # Slot 1 stays group 1's while its batch lives; the consumer then waits for group 3:
    # the worker builds it elsewhere rather than wait for ever.
    kept = ring.batch(ring.lease(1), 0, 1)
    giving_up = threading.Thread(target=lambda: claimed.append(ring.claim(3, 0)))
    giving_up.start()
    time.sleep(0.3)
    assert giving_up.is_alive()
    ring.want(3)
    giving_up.join(5)
    assert claimed == [True, False] and kept


def test_a_batch_held_is_never_overwritten_and_the_batches_are_those_without_workers(
        photo_shards):
    # Group 0's slot (of 6, groups of 4 steps) is next the evaluation's first group's (its
    # steps are groups of one), then epoch 1's third's: held by the first batch, those two
    # groups alone are built in the workers' own memory and copied.
    assert plan.ring_slots(MIXING_STEPS) == 6
    data = source(photo_shards, 2)
    alone = source(photo_shards, 0)
    try:
        batches = data.train_batches(0)
        held = next(batches)
        kept = flat([held])
        run = [kept + flat(batches), flat(data.eval_batches()), flat(data.train_batches(1))]
        assert same([held], kept)
        assert data.stream.copied == 2 and data.stream.starts == 1
        assert same(run[0], flat(alone.train_batches(0)))
        assert same(run[1], flat(alone.eval_batches()))
        assert same(run[2], flat(alone.train_batches(1)))
    finally:
        data.close()
        alone.close()


def test_the_batches_a_device_loader_holds_never_make_the_workers_copy(photo_shards):
    # The device loader holds up to LOADER_HELD_BATCHES, and its reader one more: over two
    # epochs and an evaluation, every group is handed out of the ring as it is.
    data = source(photo_shards, 2)
    held = collections.deque(maxlen=plan.LOADER_HELD_BATCHES + 1)
    try:
        for batches in (lambda: data.train_batches(0), data.eval_batches,
                        lambda: data.train_batches(1)):
            held.extend(batches())
        assert data.stream.copied == 0 and data.stream.groups == 6 + 1 + 6
        assert data.stream.starts == 1
    finally:
        data.close()


def test_a_consumer_that_keeps_every_batch_gets_them_all_and_the_workers_go_on(photo_shards):
    data = source(photo_shards, 2)
    alone = source(photo_shards, 0)
    kept = []
    drawing = threading.Thread(target=lambda: kept.extend(
        [list(data.train_batches(0)), list(data.eval_batches()),
         list(data.train_batches(1))]), daemon=True)
    try:
        drawing.start()
        drawing.join(120)
        assert not drawing.is_alive(), "the stream deadlocked"
        # Epoch 0 fits in the ring; then every slot is held: the rest is copied (the
        # evaluation's 4 steps fill one slot, as a mixing group does).
        assert data.stream.copied == 1 + 6
        assert same(flat(kept[0]), flat(alone.train_batches(0)))
        assert same(flat(kept[1]), flat(alone.eval_batches()))
        assert same(flat(kept[2]), flat(alone.train_batches(1)))
    finally:
        data.close()
        alone.close()


CHILD = """
import time
from trainer.data.shard_source import ShardSource
data = ShardSource({shards!r}, 32, 8, 2, 5)
next(data.train_batches(0))
print(data.stream.ring.nbytes, flush=True)
time.sleep(600)
"""


def _shm_mappings(pid):
    with open("/proc/{}/maps".format(pid)) as maps:
        return [line.split() for line in maps if " /dev/shm/" in line]


def test_nothing_of_a_ring_is_left_in_dev_shm_after_a_kill_9(photo_shards):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(shards=str(photo_shards))],
        stdout=subprocess.PIPE, text=True, cwd=str(REPO),
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    workers = []
    try:
        ring_bytes = int(child.stdout.readline())
        with open("/proc/{0}/task/{0}/children".format(child.pid)) as children:
            workers = [int(pid) for pid in children.read().split()]
        assert len(workers) == 2
        mapped = _shm_mappings(child.pid)
        sizes = [int(end, 16) - int(start, 16) for start, end in
                 (fields[0].split("-") for fields in mapped)]
        assert max(sizes) >= ring_bytes > 0  # the ring, and everything else from /dev/shm:
        assert all(fields[-1] == "(deleted)" for fields in mapped), mapped  # unlinked
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        named = [name for name in os.listdir("/dev/shm") if any(
            "_{}_".format(pid) in name or "-{}-".format(pid) in name
            for pid in [child.pid] + workers)]
        assert named == []
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()
        for pid in workers:  # orphaned by the kill: they would end within seconds anyway
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
