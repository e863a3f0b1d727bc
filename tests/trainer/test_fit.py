"""trainer.fit's cadence flags: ``--checkpoint_epochs`` and ``--eval_every_epochs`` choose the
epochs that are checkpointed and evaluated; the last epoch always is, both.
``--checkpoint_minutes`` checkpoints by the clock, at the step the processes agree on;
``--fake_data``'s batch is copied to the devices once."""

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, clean_environ
from trainer.checkpoints import checkpoint_name


def run_mnist(job_dir, *flags):
    result = subprocess.run(
        [sys.executable, "-m", "trainer.mnist", "--fake_data", "--log_steps=0",
         "--keep_checkpoints=10", "--job_dir=" + str(job_dir), *flags],
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"), capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def checkpointed(job_dir):
    return sorted(os.listdir(str(job_dir / "checkpoints")))


def test_checkpoints_and_evaluations_follow_their_epochs_and_the_last_always(tmp_path):
    result = run_mnist(tmp_path, "--num_epochs=5", "--num_steps=2", "--checkpoint_epochs=2",
                       "--eval_every_epochs=3")
    assert checkpointed(tmp_path) == [
        checkpoint_name(step) for step in (4, 8, 10)]  # epochs 2, 4 and the last, 5
    evaluated = [int(epoch) for epoch in re.findall(r"epoch (\d+) done", result.stdout)]
    assert evaluated == [3, 5]


def test_a_step_that_ends_an_epoch_and_is_due_by_checkpoint_steps_is_written_once(tmp_path):
    result = run_mnist(tmp_path, "--num_epochs=2", "--num_steps=4", "--checkpoint_steps=2")
    assert checkpointed(tmp_path) == [checkpoint_name(step) for step in (2, 4, 6, 8)]
    written = re.findall(r"checkpoint \S+(ckpt-\d+\.pt)", result.stdout + result.stderr)
    assert written == [checkpoint_name(step) for step in (2, 4, 6, 8)]


def test_max_steps_ends_the_run_inside_an_epoch_evaluated_and_checkpointed(tmp_path):
    # --num_steps cuts each epoch to 3 steps; --max_steps=7 ends the run in the third.
    result = run_mnist(tmp_path, "--num_epochs=5", "--num_steps=3", "--max_steps=7")
    assert checkpointed(tmp_path) == [checkpoint_name(step) for step in (3, 6, 7)]
    assert [int(epoch) for epoch in re.findall(r"epoch (\d+) done", result.stdout)] == [1, 2, 3]
    assert "3 steps/epoch x 3 epochs" in result.stdout


@pytest.mark.parametrize("minutes, steps", [
    # Due at every boundary: checkpointed at step 1, then the vote cast before that checkpoint
    # is spent (step 2), and so on; step 6 is the epoch's end.
    ("1e-9", (1, 3, 5, 6)),
    ("60", (6,)),  # an hour never passes in this run: the epoch's end only
])
def test_checkpoint_minutes_checkpoint_by_the_clock_between_epoch_ends(tmp_path, minutes, steps):
    run_mnist(tmp_path, "--num_epochs=1", "--num_steps=6", "--checkpoint_minutes=" + minutes)
    assert checkpointed(tmp_path) == [checkpoint_name(step) for step in steps]


def test_fake_data_is_copied_to_the_devices_once_not_at_every_step():
    # Copying the one fake batch at every step (2 transfers a step, images and labels) made
    # a host-bound fake-data run wait 18 % of its time for copies: --fake_data measures the
    # devices. In this process: the transfers of a run do not grow with its steps.
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch_xla.debug.metrics as met

    from trainer import mnist
    from trainer.config import TrainConfig
    from trainer.outputs import OutputPaths

    def transfers(steps):
        def count():
            data = met.metric_data("TransferToDeviceTime")
            return data[0] if data else 0

        before = count()
        mnist.run(TrainConfig(fake_data=True, num_epochs=1, num_steps=steps, log_steps=0),
                  paths=OutputPaths())
        return count() - before

    transfers(2)  # the process's first run may copy what later runs find on the device
    assert transfers(10) == transfers(30)


def _digits(config, stop_at=None):
    """Small random digits for an in-process MNIST run of ``config``; with ``stop_at``, a
    SIGTERM arrives during training step ``stop_at`` (1-based), so that the loop stops right
    after it, as a platform's stop between two steps would."""
    import signal

    import torch

    from trainer import steps as step_functions
    from trainer.batches import TensorSource

    generator = torch.Generator().manual_seed(4)
    data = TensorSource(
        torch.randn(48, 1, 28, 28, generator=generator), torch.randint(0, 10, (48,)),
        torch.randn(16, 1, 28, 28, generator=generator), torch.randint(0, 10, (16,)),
        batch_size=config.batch_size)
    train = step_functions.Steps.train

    def train_and_maybe_stop(self, step, x, y, loss_total):
        if stop_at is not None and step + 1 == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return train(self, step, x, y, loss_total)

    return data, train_and_maybe_stop


def _mnist_in_process(job_dir, monkeypatch, flags, stop_at=None):
    """The job's eval records (epoch, step) and its summary after one in-process run."""
    import json

    from trainer import mnist, steps, stop_signal
    from trainer.config import TrainConfig
    from trainer.errors import Preempted
    from trainer.outputs import OutputPaths

    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setattr(stop_signal, "_received", None)
    config = TrainConfig(data_dir="unused", batch_size=8, log_steps=0, **flags)
    data, train = _digits(config, stop_at)
    monkeypatch.setattr(steps.Steps, "train", train)
    try:
        mnist.run(config, data_override=data, paths=OutputPaths.resolve(str(job_dir), {}))
    except Preempted as stopped:
        assert stop_at is not None and "at step {};".format(stop_at) in stopped.message
        return None
    records = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((job_dir / "summary.json").read_text())
    return ([(record["epoch"], record["step"]) for record in records if record["kind"] == "eval"],
            summary["epochs"], summary["global_step"])


@pytest.mark.parametrize("flags, stop_at", [
    # The issue's case: stopped right after the run's last step (epoch 2's third).
    (dict(num_epochs=2, num_steps=3), 6),
    # --max_steps ends the run one step into epoch 3: stopped after that step.
    (dict(num_epochs=5, num_steps=3, max_steps=7), 7),
    # Evaluated every 2 epochs: stopped after an evaluated epoch's last step, and the run's.
    (dict(num_epochs=4, num_steps=3, eval_every_epochs=2), 6),
    (dict(num_epochs=4, num_steps=3, eval_every_epochs=2), 12),
    # Stopped after an epoch's last step that is not evaluated.
    (dict(num_epochs=3, num_steps=3, eval_every_epochs=2), 3),
])
def test_a_run_stopped_after_an_epochs_last_step_counts_its_epochs_as_one_never_stopped(
        tmp_path, monkeypatch, flags, stop_at):
    whole = _mnist_in_process(tmp_path / "whole", monkeypatch, flags)
    assert _mnist_in_process(tmp_path / "stopped", monkeypatch, flags, stop_at) is None
    resumed = _mnist_in_process(tmp_path / "stopped", monkeypatch, flags)
    assert resumed == whole
