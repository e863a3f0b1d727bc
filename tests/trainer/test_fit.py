"""trainer.fit's cadence flags: ``--checkpoint_epochs`` and ``--eval_every_epochs`` choose the
epochs that are checkpointed and evaluated; the last epoch always is, both."""

import os
import re
import subprocess
import sys

from conftest import REPO, clean_environ
from trainer.checkpoints import checkpoint_name


def test_checkpoints_and_evaluations_follow_their_epochs_and_the_last_always(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "trainer.mnist", "--fake_data", "--num_epochs=5",
         "--num_steps=2", "--log_steps=0", "--checkpoint_epochs=2", "--eval_every_epochs=3",
         "--keep_checkpoints=5", "--job_dir=" + str(tmp_path)],
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"), capture_output=True, text=True,
        timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(str(tmp_path / "checkpoints"))) == [
        checkpoint_name(step) for step in (4, 8, 10)]  # epochs 2, 4 and the last, 5
    evaluated = [int(epoch) for epoch in re.findall(r"epoch (\d+) done", result.stdout)]
    assert evaluated == [3, 5]
