"""trainer.optim's rule for the learning rate when the global batch grows: linear in the
global batch (``--lr`` is the rate of ``--lr_batch`` examples), never in the device count."""

import os

import pytest
import torch

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer.config import TrainConfig  # noqa: E402
from trainer.optim import build_optimizer, peak_rate  # noqa: E402


def test_the_rate_grows_linearly_with_the_global_batch():
    assert peak_rate(0.05, 64, 64) == 0.05
    assert peak_rate(0.05, 256, 64) == pytest.approx(0.2)
    assert peak_rate(0.1, 1024, 256) == pytest.approx(0.4)  # Goyal et al.'s ImageNet rule
    assert peak_rate(0.05, 256, 0) == 0.05  # --lr_batch=0: --lr as given


def rate_at_start(batch_size, global_batch):
    config = TrainConfig(fake_data=True, batch_size=batch_size, lr=0.05, lr_batch=64)
    model = torch.nn.Linear(3, 2)
    optimizer, rate = build_optimizer(config, model, 10, global_batch)
    return rate.peak, optimizer.param_groups[0]["lr"]


def test_the_same_global_batch_has_the_same_rate_on_any_device_count():
    one_device = rate_at_start(64, 0)  # 64 x 1
    four_devices = rate_at_start(16, 64)  # 16 x 4
    assert one_device == four_devices
    assert one_device[0] == pytest.approx(0.05)
    assert rate_at_start(64, 256)[0] == pytest.approx(0.2)  # 64 x 4: four times the batch


def adamw_flags(*args):
    from absl import flags

    from trainer.cli import parse_config
    from trainer.config import define_common_flags

    flag_values = flags.FlagValues()
    define_common_flags(flag_values=flag_values, lr=0.1, lr_batch=256, weight_decay=1e-4)
    return parse_config(["trainer", "--fake_data"] + list(args), flag_values)


def test_adamw_takes_deits_defaults_where_the_flags_are_not_given():
    config = adamw_flags("--optimizer=adamw")
    assert (config.lr, config.lr_batch, config.weight_decay) == (5e-4, 512, 0.05)
    config = adamw_flags("--optimizer=adamw", "--lr=0.001", "--weight_decay=0")
    assert (config.lr, config.lr_batch, config.weight_decay) == (0.001, 512, 0.0)
    config = adamw_flags()  # SGD keeps the trainer's own
    assert (config.optimizer, config.lr, config.weight_decay) == ("sgd", 0.1, 1e-4)


def test_adamw_decays_weights_but_not_biases_or_normalization_weights():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.Flatten(), torch.nn.Linear(4, 2), torch.nn.LayerNorm(2))
    config = TrainConfig(fake_data=True, optimizer="adamw", lr=5e-4, lr_batch=512,
                         weight_decay=0.05, batch_size=256)
    optimizer, rate = build_optimizer(config, model, 10, 1024)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert rate.peak == pytest.approx(1e-3)  # 5e-4 per 512, linearly scaled
    decayed, undecayed = optimizer.param_groups
    assert (decayed["weight_decay"], undecayed["weight_decay"]) == (0.05, 0.0)
    assert [tuple(p.shape) for p in decayed["params"]] == [(4, 3, 3, 3), (2, 4)]
    assert all(p.dim() == 1 for p in undecayed["params"]) and len(undecayed["params"]) == 6
    assert decayed["betas"] == (0.9, 0.999)


def test_a_checkpoint_of_the_other_optimizer_is_refused_naming_the_flag():
    from trainer.errors import TrainerError
    from trainer.optim import check_resumable

    model = torch.nn.Linear(3, 2)
    sgd, _ = build_optimizer(TrainConfig(fake_data=True), model, 10)
    adamw, _ = build_optimizer(TrainConfig(fake_data=True, optimizer="adamw"), model, 10)
    check_resumable(sgd, sgd.state_dict(), "ckpt")
    check_resumable(adamw, adamw.state_dict(), "ckpt")
    with pytest.raises(TrainerError) as refused:
        check_resumable(adamw, sgd.state_dict(), "gs://b/job/checkpoints/ckpt-000000006.pt")
    assert refused.value.exit_code == 64
    assert refused.value.message == (
        "checkpoint gs://b/job/checkpoints/ckpt-000000006.pt was trained with --optimizer=sgd; "
        "this run has --optimizer=adamw")
    assert refused.value.hint == "resume with --optimizer=sgd, or start in a new --job_dir"


def test_a_run_resuming_the_other_optimizers_checkpoint_stops_before_training(tmp_path):
    from trainer import mnist
    from trainer.errors import TrainerError
    from trainer.outputs import OutputPaths

    small = dict(fake_data=True, num_epochs=1, num_steps=2, log_steps=1, batch_size=8)
    mnist.run(TrainConfig(**small), paths=OutputPaths.resolve(str(tmp_path), {}))
    with pytest.raises(TrainerError) as refused:
        mnist.run(TrainConfig(**dict(small, num_epochs=2, optimizer="adamw")),
                  paths=OutputPaths.resolve(str(tmp_path), {}))
    assert refused.value.exit_code == 64
    assert "was trained with --optimizer=sgd; this run has --optimizer=adamw" in (
        refused.value.message)
    # An AdamW run goes on from its own checkpoint.
    adamw_job = tmp_path / "adamw"
    mnist.run(TrainConfig(**dict(small, optimizer="adamw")),
              paths=OutputPaths.resolve(str(adamw_job), {}))
    summary = mnist.run(TrainConfig(**dict(small, num_epochs=2, optimizer="adamw")),
                        paths=OutputPaths.resolve(str(adamw_job), {}))
    assert summary["global_step"] == 4
