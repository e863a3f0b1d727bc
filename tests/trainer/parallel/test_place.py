"""--sharding=fsdp on 4 XLA CPU devices (``make test``'s SPMD session): trainer.train's run
with the parameters, gradients and optimizer state split over the devices reaches the weights
of --sharding=dp on both step paths, each device holding a quarter of the large tensors; on a
2-D mesh a half; the checkpoints hold whole tensors, so a run resumes under the other sharding;
the compiled graphs stay those of the first epoch."""

import logging

import pytest
import torch

from trainer import own_flags, own_loop
from trainer.config import TrainConfig
from trainer.outputs import OutputPaths

pytestmark = pytest.mark.spmd

FEATURES, WIDTH, CLASSES = 32, 256, 3


def pairs(count, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, FEATURES, generator=generator)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long())


def network():
    """A 256 x 256 layer (65,536 elements: split) between small ones (held whole)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, CLASSES))


def run(job, **flags):
    """trainer.train's run (SGD with momentum, 4 devices x 4 rows, 4 steps an epoch):
    (summary, model.pt)."""
    settings = dict(data_dir=own_flags.DATA_FROM, batch_size=4, num_epochs=2, lr=0.1,
                    lr_batch=0, num_workers=0, log_steps=0, job_dir=str(job), seed=1)
    settings.update(flags)
    config = TrainConfig(**settings)
    summary = own_loop.run_own(config, OutputPaths.resolve(config.job_dir, {}), network(),
                               pairs(64, 0), pairs(16, 1), None)
    return summary, torch.load(str(job / "model.pt"), weights_only=False)


def assert_same_training(found, expected):
    """Weights within 1e-5 of each tensor's movement: the same float32 arithmetic, its sums
    (the all-reduces, the matmuls split over devices) taken in another order, each addition
    rounding by 2^-24 relative, tens of them per weight over 8 steps of SGD, whose update is
    linear in the gradient (measured: under 1e-6)."""
    start = network().state_dict()
    for name, weights in expected.items():
        moved = float((weights - start[name]).abs().max())
        assert float((found[name] - weights).abs().max()) <= 1e-5 * moved, name


@pytest.mark.parametrize("step_mode, optimizer", [("compiled", "sgd"), ("lazy", "sgd"),
                                                   ("compiled", "adamw")])
def test_fsdp_trains_as_dp_does_with_a_quarter_of_the_large_tensors_on_a_device(
        tmp_path, step_mode, optimizer, caplog):
    """Under AdamW the weights are not compared: Adam divides each gradient by its running
    RMS, so a weight whose gradient is at float32's rounding level moves by up to the rate a
    step either way. Such a weight barely moves the loss (its gradient is next to 0): the
    evaluation loss within 1e-4 relative."""
    flags = dict(step_mode=step_mode, optimizer=optimizer,
                 lr=0.01 if optimizer == "adamw" else 0.1)
    with caplog.at_level(logging.INFO, logger="trainer"):
        dp, dp_weights = run(tmp_path / "dp", **flags)
        fsdp, fsdp_weights = run(tmp_path / "fsdp", sharding="fsdp", **flags)
    assert (dp["sharding"], fsdp["sharding"]) == ("dp", "fsdp")
    if optimizer == "sgd":
        assert_same_training(fsdp_weights, dp_weights)
    assert fsdp["final_eval_loss"] == pytest.approx(dp["final_eval_loss"], rel=1e-4)
    # Parameters and the optimizer's slots: the 256 x 256 weight a quarter, the rest whole
    # at most (XLA may split a small one too, by propagation).
    slots = 2 if optimizer == "adamw" else 1
    large = (1 + slots) * 4 * WIDTH * WIDTH
    held = dp["model_state_bytes"]["per_device_measured"]
    assert fsdp["model_state_bytes"]["per_device_measured"] <= held - large + large // 4
    per_device, whole = fsdp["model_state_bytes"]["per_device"], fsdp["model_state_bytes"]["whole"]
    # Each parameter with its gradient and slots: 16 bytes under AdamW, 12 under SGD.
    assert whole == (2 + slots) * 4 * sum(p.numel() for p in network().parameters())
    split = (2 + slots) * 4 * WIDTH * WIDTH
    assert per_device == whole - split + split // 4
    assert fsdp["compiles_after_each_epoch"][0] == fsdp["compiles_after_each_epoch"][-1]
    assert any("--sharding=fsdp over data:1,fsdp:4: model state" in record.getMessage()
               for record in caplog.records)


def test_a_two_dimensional_mesh_splits_over_fsdp_and_repeats_over_data(tmp_path):
    dp, dp_weights = run(tmp_path / "dp")
    mesh, mesh_weights = run(tmp_path / "mesh", sharding="fsdp", mesh="data:2,fsdp:2")
    assert_same_training(mesh_weights, dp_weights)
    large = 2 * 4 * WIDTH * WIDTH  # the weight and its momentum
    assert mesh["model_state_bytes"]["per_device_measured"] <= (
        dp["model_state_bytes"]["per_device_measured"] - large + large // 2)


@pytest.mark.parametrize("first, then", [("fsdp", "dp"), ("dp", "fsdp")])
def test_a_checkpoint_resumes_under_the_other_sharding(tmp_path, first, then):
    """The checkpoints hold whole tensors (put together from the shards on the host): a first
    epoch under one sharding, resumed for a second under the other, ends on the weights of
    both epochs under the second (the same schedule: one epoch's, then two's)."""
    run(tmp_path / "whole", sharding=then, num_epochs=1)
    _, whole = run(tmp_path / "whole", sharding=then)
    run(tmp_path / "job", sharding=first, num_epochs=1)
    resumed, weights = run(tmp_path / "job", sharding=then)
    assert resumed["sharding"] == then and resumed["global_step"] == 8
    assert_same_training(weights, whole)


def test_auto_keeps_dp_where_the_device_memory_is_unknown(tmp_path):
    summary, _ = run(tmp_path / "job", sharding="auto", num_epochs=1)
    assert summary["sharding"] == "dp"
    assert summary["model_state_bytes"]["per_device"] is None
