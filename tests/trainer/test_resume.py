"""trainer.resume: a checkpoint records which training examples the run read (the shard
set's identity: shard names, counts and checksums from the index), and a resume on another
shard set (the same images re-made with another ``make_shards --seed``) is refused with one
line and a hint (exit 65) before anything trains or is overwritten: never a silent mix of
two orders, with some examples trained twice and others never. A run resumed from the
checkpoint of step N never writes step N again: not on a SIGTERM before its first step, not
at the end of an epoch a stop left with nothing more to train."""

import logging
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
from digits import random_digits

from conftest import REPO, clean_environ, make_image_folder
from trainer.batches import TensorSource
from trainer.checkpoints import checkpoint_name
from trainer.data.make_shards import convert
from trainer.errors import TrainerError

RUN = ["--model=tiny_model:build", "--image_size=16", "--batch_size=8", "--num_workers=0",
       "--warmup_epochs=0", "--log_steps=0", "--num_steps=2"]


def imagenet(*args):
    """A trainer process of 2 steps an epoch. What it reads is the claim here, not the network:
    tests/tiny_model.py compiles in about a second, where ResNet-18's compile was most of a
    run's time even compiled quickly (43, quick 22 CPU seconds)."""
    return subprocess.run([sys.executable, "-m", "trainer.imagenet"] + RUN + list(args),
                          cwd=str(REPO), env=clean_environ(
                              PJRT_DEVICE="CPU", PYTHONPATH=str(REPO / "tests")),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def first_epoch(photo_shards, tmp_path_factory):
    """One epoch on a copy of the photo shards: (its data folder, its job dir). The two
    resumes below share it (a run costs half a minute); each resumes a copy of the job dir,
    and only the refusal rewrites the data folder."""
    root = tmp_path_factory.mktemp("first-epoch")
    data, job = root / "shards", root / "job"
    shutil.copytree(str(photo_shards), str(data))
    first = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=1")
    assert first.returncode == 0, first.stderr
    return data, job


def test_a_resume_on_a_remade_shard_set_is_refused(photos, first_epoch, tmp_path):
    data, first_job = first_epoch
    job = tmp_path / "job"
    shutil.copytree(str(first_job), str(job))
    # The same images, shuffled into the shards by another seed, in the same folder.
    shutil.rmtree(str(data))
    convert(str(photos), str(data), shard_size=24, seed=1, workers=1)
    again = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=2")
    assert again.returncode == 65, again.stderr
    error, hint = again.stderr.strip().splitlines()[-2:]
    assert error.startswith("DataError: checkpoint {}/checkpoints/ckpt-000000002.pt was "
                            "trained on 192 training examples in 8 shards (digest ".format(job))
    assert "; --data_dir holds 192 training examples in 8 shards (digest " in error
    assert hint.startswith("HINT: resume with the --data_dir the run started with")
    assert "Traceback" not in again.stderr
    assert sorted(path.name for path in (job / "checkpoints").iterdir()) == [
        "ckpt-000000002.pt"]  # nothing was overwritten


def test_a_resume_on_the_same_shard_set_goes_on(photo_shards, first_epoch, tmp_path):
    # The shard set the first epoch read, by its identity: a copy of it (photo_shards is what
    # the first epoch copied) in another folder, so also whatever the refusal did to that one.
    job = tmp_path / "job"
    shutil.copytree(str(first_epoch[1]), str(job))
    result = imagenet("--data_dir=" + str(photo_shards), "--job_dir=" + str(job),
                      "--num_epochs=2")
    assert result.returncode == 0, result.stderr
    assert "resumed from" in result.stdout


def test_a_class_folder_run_resumed_on_other_files_is_refused(tmp_path):
    data, job = make_image_folder(tmp_path / "images", classes=2, per_class=8), tmp_path / "job"
    first = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=1")
    assert first.returncode == 0, first.stderr
    # (Another --seed is refused as for shards: the source's layout records it,
    # tests/trainer/data/test_folder_source.py.)
    (data / "train" / "class0" / "extra.png").write_bytes(
        (data / "train" / "class0" / "0.png").read_bytes())
    files = imagenet("--data_dir=" + str(data), "--job_dir=" + str(job), "--num_epochs=2")
    assert files.returncode == 65, files.stderr
    error = files.stderr.strip().splitlines()[-2]
    assert "was trained on 16 training examples in class-folder files (digest " in error
    assert "--data_dir holds 17 training examples in class-folder files" in error
    assert "Traceback" not in files.stderr


# --- No checkpoint is written again for the step a run resumed from -------------------------

class _SigtermBeforeFirstBatch(TensorSource):
    """Digits whose training receives SIGTERM while the run waits for its first batch, as a
    Spot VM's notice might reach a resumed run whose input is slow to start."""

    def train_batches(self, epoch, start_step=0):
        os.kill(os.getpid(), signal.SIGTERM)
        yield from super().train_batches(epoch, start_step)


def _digits(source=TensorSource):
    return random_digits(48, 16, batch_size=16, source=source)


def _mnist(job, data, epochs):
    from trainer import mnist
    from trainer.config import TrainConfig
    from trainer.outputs import OutputPaths

    config = TrainConfig(data_dir="unused", num_epochs=epochs, batch_size=16, eval_batch_size=8,
                         log_steps=1)
    return mnist.run(config, data_override=data, paths=OutputPaths.resolve(str(job), {}))


def _written(path):
    """What tells one write of ``path`` from another: a write is a new file renamed over it."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, path.read_bytes()


@pytest.fixture
def in_process(monkeypatch):
    from trainer import stop_signal

    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setattr(stop_signal, "_received", None)  # restored after the test


def test_a_sigterm_before_a_resumed_runs_first_batch_rewrites_nothing(tmp_path, in_process,
                                                                       caplog):
    from trainer.errors import Preempted

    _mnist(tmp_path, _digits(), epochs=1)  # steps 1-3, checkpointed at the epoch's end
    saved = tmp_path / "checkpoints" / checkpoint_name(3)
    before = _written(saved)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="trainer")
    with pytest.raises(Preempted) as raised:
        _mnist(tmp_path, _digits(_SigtermBeforeFirstBatch), epochs=2)
    assert raised.value.exit_code == 143
    assert raised.value.message == "stopped by SIGTERM at step 3; checkpoint {}".format(saved)
    # It was written again (the same state): 205 MB for ResNet-50 inside the grace window.
    assert _written(saved) == before
    logged = caplog.text
    assert "resumed from {}: epoch 2, step 3".format(saved) in logged
    assert not re.search(r"resume.py:\d+ checkpoint \S", logged), logged
    assert os.listdir(str(saved.parent)) == [saved.name]


def test_a_resume_from_a_stop_after_an_epochs_last_step_rewrites_nothing(tmp_path, in_process,
                                                                          caplog):
    from trainer.checkpoints import CheckpointStore
    from trainer.storage import LocalDirectory

    _mnist(tmp_path, _digits(), epochs=1)
    # What a SIGTERM read after epoch 1's last step leaves (``fit``: the stop is raised before
    # the epoch is counted done): step 3, epoch 0 at its step 3 of 3.
    store = CheckpointStore(LocalDirectory(str(tmp_path / "checkpoints")))
    step, state = store.load_latest()
    state.update(epoch=0, step_in_epoch=3)
    store.save(step, state)
    saved = tmp_path / "checkpoints" / checkpoint_name(3)
    before = _written(saved)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="trainer")
    summary = _mnist(tmp_path, _digits(), epochs=2)
    logged = caplog.text
    assert summary["global_step"] == 6
    assert "resumed from {}: epoch 1, step 3".format(saved) in logged
    # Epoch 1 ends at once (nothing left to train in it), then epoch 2 trains steps 4-6: it
    # was step 3 that was written again, at epoch 1's end.
    assert _written(saved) == before, logged
    assert re.findall(r"resume.py:\d+ checkpoint (\S+)", logged) == [
        str(saved.parent / checkpoint_name(6))]


class SimulatedSlice:
    """``BoundaryVote.job_sum`` across ``hosts`` threads, each a host: each call waits for
    every host's values and returns their sums, as the all-reduce over the mesh does."""

    def __init__(self, hosts):
        import threading

        self.hosts, self.barrier = hosts, threading.Barrier(hosts)
        self.rounds = {host: 0 for host in range(hosts)}
        self.values = {}

    def job_sum(self, host, values):
        turn = self.rounds[host]
        self.rounds[host] += 1
        self.values[(turn, host)] = values
        self.barrier.wait()
        sums = [sum(self.values[(turn, other)][i] for other in range(self.hosts))
                for i in range(len(values))]
        self.barrier.wait()
        return sums


@pytest.mark.parametrize("steps", [[700, 700, 700, 700], [700, 700, 0, 700],
                                   [70000, 70000, 70000, 4464], [600, 700, 800, 700],
                                   [0, 0, 0, 0]],
                         ids=["same", "one fresh", "a byte differs", "mean agrees",
                              "all fresh"])
def test_hosts_that_start_from_different_checkpoints_all_stop_with_one_line(tmp_path, steps):
    """4 hosts of a slice (threads, their sums an all-reduce's): each checks it starts where
    the others do. Where they differ, every host stops (exit 64), the same verdict on each:
    also where the steps agree in their low bytes (70000 and 4464 share 4464), and where two
    hosts are at the mean of all four."""
    import threading

    from trainer.checkpoints import CheckpointStore
    from trainer.devices import Topology
    from trainer.resume import RunCheckpoints
    from trainer.storage import LocalDirectory

    slice_ = SimulatedSlice(len(steps))
    verdicts = {}

    def host(index):
        store = CheckpointStore(LocalDirectory(str(tmp_path)), writes=False)
        store.source = str(tmp_path / checkpoint_name(steps[index]))
        checkpoints = RunCheckpoints(store, None, Topology(8, 8, 2, index, len(steps)))
        try:
            checkpoints.check_same_start(steps[index],
                                         lambda values: slice_.job_sum(index, values))
            verdicts[index] = None
        except TrainerError as error:
            verdicts[index] = error

    threads = [threading.Thread(target=host, args=(index,)) for index in range(len(steps))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(verdicts) == len(steps)
    if len(set(steps)) == 1:
        assert all(verdict is None for verdict in verdicts.values())
        return
    assert all(verdict is not None and verdict.exit_code == 64 for verdict in verdicts.values())
    assert verdicts[2].message.startswith(
        "the hosts of this slice do not start from the same checkpoint: this host (process 2 "
        "of 4) starts from ")
    assert "every host sees as one folder" in verdicts[2].hint
