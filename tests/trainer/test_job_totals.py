"""trainer.job_totals: a job stopped and resumed is summarised as one job (training time,
steady rate over its processes, stops, resumes, steps redone), from the totals each checkpoint
carries."""

import json
import os
import signal
import subprocess
import sys

import pytest
from digits import random_digits

from conftest import REPO, clean_environ, wait_for_line
from trainer.batches import TensorSource
from trainer.job_totals import JobTotals


class _StopDuringEvaluation(TensorSource):
    """Digits whose evaluations receive SIGTERM after their first batch while ``armed``."""

    armed = True

    def eval_batches(self):
        for index, batch in enumerate(super().eval_batches()):
            if index == 1 and self.armed:
                os.kill(os.getpid(), signal.SIGTERM)
            yield batch


def test_a_job_stopped_in_its_final_evaluation_is_summarised_over_both_processes(
        tmp_path, monkeypatch):
    from trainer import mnist, stop_signal
    from trainer.config import TrainConfig
    from trainer.errors import Preempted
    from trainer.outputs import OutputPaths

    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    data = random_digits(64, 32, batch_size=8, source=_StopDuringEvaluation)
    # 8 steps: 5 past the 3 that compile, so the stopped process has a steady rate.
    config = TrainConfig(data_dir="unused", num_epochs=1, batch_size=8, eval_batch_size=8,
                         log_steps=1)
    paths = OutputPaths.resolve(str(tmp_path), {})
    monkeypatch.setattr(stop_signal, "_received", None)
    with pytest.raises(Preempted):
        mnist.run(config, data_override=data, paths=paths)
    # A trainer process resumed from there is stopped before it trains a step (its final
    # evaluation, redone): it ends at once, leaving no checkpoint and no stop line, so the
    # job counts it nowhere: not in ``stops``, not in ``processes`` or ``resumes``.
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer.mnist", "--fake_data", "--num_epochs=1",
         "--batch_size=8", "--eval_batch_size=8", "--job_dir=" + str(tmp_path)], cwd=str(REPO),
        env=clean_environ(PJRT_DEVICE="CPU"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        wait_for_line(process, "resumed from")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143 and "before training resumed" in err, err
    monkeypatch.setattr(stop_signal, "_received", None)
    data.armed = False
    summary = mnist.run(config, data_override=data, paths=paths)
    job = summary["job"]
    assert job["processes"] == 2 and job["resumes"] == 1 and job["stops"] == 1
    assert job["steps_trained"] == 8 and job["steps_redone"] == 0
    assert job["training_seconds"] > 0 and job["steady_examples_per_second"] > 0
    assert job["steady_examples"] == 5 * 8
    # The stopped evaluation came after the last checkpoint: the job does not count it.
    assert job["evaluation_seconds"] == summary["evaluation_seconds"] > 0
    assert len(job["to_first_step_seconds"]) == 1  # the resumed process trained no step
    # This process's own figures stay its own: it trained nothing.
    assert summary["training_seconds"] == 0 and summary["steady_examples_per_second"] == 0
    assert json.loads((tmp_path / "summary.json").read_text())["job"] == job
    stops = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "stop"]
    assert stops == [{"kind": "stop", "step": 8, "signal": "SIGTERM"}]


def test_totals_of_a_checkpoint_from_before_them_or_from_a_newer_version_load():
    assert JobTotals.from_checkpoint(None) == JobTotals()
    newer = JobTotals.from_checkpoint({"processes": 2, "training_seconds": 1.5, "later": 1})
    assert newer == JobTotals(processes=2, training_seconds=1.5)


def test_the_steps_a_killed_process_trained_past_its_checkpoint_count_as_redone():
    before = JobTotals(processes=1, steps_trained=9, steady_steps=6, steady_seconds=3.0,
                       steady_examples=48, to_first_step_seconds=[20.0])
    resumed = JobTotals(processes=1, resumes=1, steps_trained=5, steps_redone=3,
                        restart_seconds=12.0, to_first_step_seconds=[12.0])
    job = before.plus(resumed).summary(stops=0)
    assert job["processes"] == 2 and job["steps_trained"] == 14
    assert job["to_first_step_seconds"] == [20.0, 12.0]
    # 12 s to the resumed process's first step, and 3 steps redone at 0.5 s a steady step.
    assert job["lost_to_restarts_seconds"] == pytest.approx(13.5)
    assert job["steady_examples_per_second"] == pytest.approx(16.0)
