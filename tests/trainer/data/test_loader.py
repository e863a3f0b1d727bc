"""trainer.data.loader: a DataLoader whose worker processes' TrainerErrors reach the trainer as
they were raised (message, hint, exit code), with 0, 1 and several workers, map-style and
iterable datasets alike; the workers stopped before the error is raised."""

import multiprocessing
import subprocess
import time

import pytest
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from trainer.data.loader import load
from trainer.errors import DataError, StorageError, TrainerError


class Items(Dataset):
    """Item i: a tensor of i; item ``bad`` raises ``error``."""

    def __init__(self, size, bad, error):
        self.size, self.bad, self.error = size, bad, error

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if index == self.bad:
            raise self.error
        return torch.tensor([index])


class Streams(IterableDataset):
    """Worker w yields w, w + 10, ...; worker ``bad`` raises ``error`` after its first item."""

    def __init__(self, bad, error):
        self.bad, self.error = bad, error

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info else 0
        for step in range(3):
            if worker == self.bad and step == 1:
                raise self.error
            yield torch.tensor([worker + 10 * step])


def assert_same_error(raised, error):
    assert type(raised) is type(error)
    assert (raised.message, raised.hint, raised.exit_code) == (
        error.message, error.hint, error.exit_code)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_an_items_error_reaches_the_trainer_as_raised_after_the_batches_before_it(workers):
    error = DataError("cannot decode gs://b/train/x.JPEG: image file is truncated",
                      "replace or remove that image")
    batches = load(Items(12, 9, error), workers, batch_size=4)
    assert torch.equal(next(batches), torch.tensor([[0], [1], [2], [3]]))
    assert torch.equal(next(batches), torch.tensor([[4], [5], [6], [7]]))
    with pytest.raises(DataError) as raised:
        next(batches)
    assert_same_error(raised.value, error)
    assert not multiprocessing.active_children()  # the workers were stopped


@pytest.mark.parametrize("workers", [1, 3])
def test_a_streams_error_keeps_its_own_exit_code(workers):
    error = StorageError("GCS kept failing for gs://b/s/train-000001.tar for up to 300s: "
                         "HTTP 503", "check GCS's status", exit_code=74)
    bad = workers - 1
    loaded = []
    with pytest.raises(StorageError) as raised:
        for batch in load(Streams(bad, error), workers, batch_size=None):
            loaded.append(int(batch))
    assert_same_error(raised.value, error)
    # The loader takes the workers in turn: every worker's first item, then the failure.
    assert loaded == list(range(workers)) + list(range(10, 10 + bad))
    assert not multiprocessing.active_children()


def test_with_no_failure_the_loader_is_torchs():
    assert [int(x) for x in load(Items(5, -1, None), 2, batch_size=None)] == list(range(5))
    assert len(list(load(Items(10, -1, None), 2, batch_size=4, drop_last=True))) == 2


def test_other_exceptions_are_left_to_torch():
    # A bug's traceback is what is wanted: torch re-raises it (as its own type here).
    with pytest.raises(ZeroDivisionError, match="DataLoader worker"):
        list(load(Items(4, 2, ZeroDivisionError("bug")), 1, batch_size=None))
    with pytest.raises(TrainerError, match="plain"):
        list(load(Items(4, 2, TrainerError("plain")), 0, batch_size=None))


def test_workers_ignore_sigterm_from_others_and_sigint_but_end_when_the_trainer_ends_them():
    # A group-wide SIGTERM or SIGINT (systemd, timeout, Slurm, Ctrl-C) reaches the workers
    # too: they leave the stop to the trainer. The trainer itself (torch, or multiprocessing
    # at exit) ends them with SIGTERM: that one they obey, or the trainer's exit would hang.
    loaded = load(Items(1000, -1, None), 2, batch_size=1)
    assert int(next(loaded)) == 0
    workers = loaded.batches._workers
    for signum in ("TERM", "INT"):
        for worker in workers:  # sent by another process than the trainer, like kill(1)
            subprocess.run(["kill", "-" + signum, str(worker.pid)], check=True)
    time.sleep(0.5)
    assert all(worker.is_alive() for worker in workers)
    assert [int(next(loaded)) for _ in range(20)] == list(range(1, 21))
    for worker in workers:
        worker.terminate()  # as torch does to a worker that does not end when asked
        worker.join(10)
    assert not any(worker.is_alive() for worker in workers)


def _killed_by_the_kernel():
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_while_handing_a_batch_over_is_told_as_a_death():
    """A worker SIGKILLed while its batch's memory comes through a connection to it: the read
    fails with ConnectionResetError, which torch reports as nothing else. It is told as
    torch tells a death, and ``worker_death`` makes it one line, exit 70."""
    from trainer.data.loader import _Raising, worker_death

    dead = multiprocessing.get_context("fork").Process(target=_killed_by_the_kernel)
    dead.start()
    dead.join(10)

    class HandOver:
        _workers = [dead]

        def __next__(self):
            raise ConnectionResetError(104, "Connection reset by peer")

    with pytest.raises(RuntimeError) as raised:
        next(_Raising(HandOver()))
    died = worker_death(raised.value)
    assert died is not None and died.exit_code == 70
    assert died.message.startswith("a data worker died: DataLoader worker (pid {}) is killed "
                                   "by signal: Killed while handing over a batch".format(
                                       dead.pid)), died.message


def test_a_reset_connection_with_every_worker_alive_is_left_as_it_is():
    from trainer.data.loader import _Raising

    class Reset:
        _workers = []

        def __next__(self):
            raise ConnectionResetError(104, "Connection reset by peer")

    with pytest.raises(ConnectionResetError):
        next(_Raising(Reset()))
