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
