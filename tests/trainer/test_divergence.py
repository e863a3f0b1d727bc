"""trainer.divergence: a run whose training loss turns nan or inf stops with one line naming
the steps and exit 65, and writes no checkpoint from then on, whether the progress line or a
checkpoint reads the loss first; a checkpoint whose state holds nan or inf is not written, nor
a model.pt."""

import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import REPO, clean_environ
from trainer.divergence import check_loss, check_model, check_state
from trainer.errors import EX_DATAERR, DataError
from trainer.loop import LoopState


def test_a_finite_loss_is_remembered_and_a_nan_names_the_steps_since():
    state = LoopState()
    check_loss(state, 12.5, 2)
    assert state.loss_finite_at == 2
    with pytest.raises(DataError) as raised:
        check_loss(state, math.nan, 4)
    assert raised.value.exit_code == EX_DATAERR
    assert raised.value.message.startswith(
        "the training loss is nan in steps 3-4 (finite up to step 2): ")
    with pytest.raises(DataError, match=r"is inf in step 3 \(finite up to step 2\)"):
        check_loss(state, math.inf, 3)


def test_a_state_with_nan_or_inf_names_the_tensor_and_integers_are_not_looked_at():
    snapshot = {"model": {"fc.weight": torch.ones(2, 2), "bn.num_batches_tracked":
                          torch.tensor(3)},
                "optimizer": {"state": {0: {"momentum_buffer": torch.zeros(4)}},
                              "param_groups": [{"lr": 0.1, "params": [0]}]}}
    check_state(snapshot, 7)
    snapshot["optimizer"]["state"][0]["momentum_buffer"][2] = -math.inf
    with pytest.raises(DataError, match=r"^the checkpoint of step 7 is not written: "
                                        r"optimizer\.state\.0\.momentum_buffer holds nan or inf"):
        check_state(snapshot, 7)


def test_a_trained_model_with_nan_is_not_written_and_the_hint_claims_no_finite_checkpoint():
    weights = {"fc.weight": torch.ones(2, 2), "fc.bias": torch.zeros(2)}
    check_model(weights, 9)
    weights["fc.bias"][1] = math.nan
    with pytest.raises(DataError) as raised:
        check_model(weights, 9)
    assert raised.value.message == ("the model trained to step 9 holds nan or inf in fc.bias: "
                                    "model.pt and summary.json are not written")
    # A resumed state came from a file, which the hint used to vouch for ("every checkpoint
    # written holds finite weights") while a damaged one had just been restored.
    assert "holds finite weights" not in raised.value.hint
    assert "its bytes match the digest written with it" in raised.value.hint


def diverging_mnist(job, *args):
    """MNIST on its fake batch at --lr=1e6: step 2's loss is about 4e13, step 3's nan."""
    return subprocess.run(
        [sys.executable, "-m", "trainer.mnist", "--fake_data", "--lr=1e6", "--num_epochs=1",
         "--num_steps=6", "--job_dir=" + str(job)] + list(args),
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"), capture_output=True, text=True,
        timeout=600)


def assert_stopped_at_step_3(result, job):
    assert result.returncode == EX_DATAERR, result.stderr
    assert "Traceback" not in result.stderr
    error, hint = result.stderr.strip().splitlines()[-2:]
    assert error.startswith("DataError: the training loss is nan in step 3 (finite up to "
                            "step 2): "), error
    assert hint.startswith("HINT: lower --lr"), hint
    assert not (job / "model.pt").exists() and not (job / "summary.json").exists()


def test_a_checkpoint_stops_a_run_whose_loss_turned_nan_and_keeps_the_finite_ones(tmp_path):
    job = tmp_path / "job"
    result = diverging_mnist(job, "--log_steps=0", "--checkpoint_steps=1")
    assert_stopped_at_step_3(result, job)
    written = sorted((job / "checkpoints").iterdir())
    assert [path.name for path in written] == ["ckpt-000000001.pt", "ckpt-000000002.pt"]
    for path in written:
        saved = torch.load(str(path), weights_only=False)
        assert math.isfinite(saved["loss_total"])
        check_state({"model": saved["model"], "optimizer": saved["optimizer"]}, 0)


def test_the_progress_line_stops_it_where_no_checkpoint_comes(tmp_path):
    job = tmp_path / "job"
    result = diverging_mnist(job, "--log_steps=1")
    assert_stopped_at_step_3(result, job)
    assert " step 2/6 " in result.stdout and " step 3/6 " not in result.stdout
    assert not list((job / "checkpoints").iterdir())
    logged = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in logged if record["kind"] == "train"] == [1, 2]


def test_a_checkpoint_whose_weights_are_not_finite_is_not_written_though_the_loss_is(tmp_path):
    # A gradient can overflow in a step whose loss is still finite: the writer, which looks
    # at the state it is handed, refuses it, and the loop learns of it within a step.
    import torch.nn.functional as F

    from trainer import mnist, xla
    from trainer.optim import LearningRate
    from trainer.outputs import OutputPaths, RunOutputs
    from trainer.resume import RunCheckpoints
    from trainer.steps import Steps

    model = mnist.MnistNet().to(xla.device())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps = Steps(model, optimizer, LearningRate(optimizer, 0.05, 0, 10), F.nll_loss, (1,),
                  xla.LAZY)
    paths = OutputPaths.resolve(str(tmp_path / "job"), {})
    checkpoints = RunCheckpoints.for_paths(paths, 3, steps)
    state = LoopState(global_step=4, loss_total=xla.device_number(1.5, steps.device))
    with RunOutputs(paths) as outputs:
        checkpoints.save(state, outputs)
        with torch.no_grad():
            model.fc2.bias[3] = math.nan
        state.global_step = 5
        checkpoints.save(state, outputs)
        with pytest.raises(DataError, match=r"^the checkpoint of step 5 is not written: "
                                            r"model\.fc2\.bias holds nan or inf"):
            checkpoints.finish()
    assert [path.name for path in (tmp_path / "job" / "checkpoints").iterdir()] == [
        "ckpt-000000004.pt"]
