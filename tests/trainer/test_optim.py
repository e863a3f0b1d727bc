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
