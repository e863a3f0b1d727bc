"""One small float64 training, run by the trainer's steps on whatever devices the process has:
on one XLA device (``python one_program.py OUT``, a process of its own) it is the reference
that test_spmd compares four devices with. The reference is the one-device XLA run, not eager
torch on the CPU: the two round alike in float64 except for batch-norm's running variance,
which torch_xla updates with another variance correction (about 1e-4 to 1e-3 of its
movement here, with or without SPMD)."""

import os
import sys

import torch
import torch.nn.functional as F

os.environ.setdefault("PJRT_DEVICE", "CPU")

from agreement import DTYPE, host_state  # noqa: E402
from trainer import mnist, xla  # noqa: E402
from trainer.optim import LearningRate  # noqa: E402
from trainer.steps import Steps  # noqa: E402


def batches(count, size, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 1, 28, 28, generator=generator, dtype=DTYPE),
             torch.randint(0, 10, (size,), generator=generator)) for _ in range(count)]


DATA = batches(6, 16)


def fresh_model(on_device=True):
    torch.manual_seed(0)
    model = mnist.MnistNet().to(DTYPE)
    return model.to(xla.device()) if on_device else model


def train(path, sharding=None, loss_scale=1.0):
    """A fresh model trained on ``DATA`` by the trainer's steps on ``path``, the batches split
    by ``sharding`` (None: one device), at a rate that changes every step; ``loss_scale``
    multiplies the loss (a gradient summed over N devices instead of averaged is N times
    larger). Returns the model's state on the host."""
    model = fresh_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    rate = LearningRate(optimizer, 0.05, warmup_steps=3, total_steps=len(DATA))

    def loss(scores, y):
        return F.nll_loss(scores, y) * loss_scale

    steps = Steps(model, optimizer, rate, loss, (1,), path)
    total = xla.device_number(0, steps.device, DTYPE)
    for number, (x, y) in enumerate(xla.device_loader(DATA, steps.device, path, sharding)):
        total = steps.train(number, x, y, total)
    xla.sync()
    return host_state(model)


if __name__ == "__main__":  # the one-device reference, and the summed variant, to a file
    scale = float(sys.argv[2])
    torch.save({"start": host_state(fresh_model(on_device=False)),
                "trained": train(xla.LAZY, loss_scale=scale)}, sys.argv[1])
