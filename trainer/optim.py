"""The optimizer (SGD with momentum and weight decay) and its learning rate: a linear warmup
per step, then cosine decay to the end of the run.

The rate is a pure function of the global step, set before every step (``LearningRate.set``).
A resumed run sets the step it resumes at, so checkpoints carry no scheduler state.

On the compiled path the rate is a device tensor, an input of the compiled step's graph: a
Python float would be a constant inside the traced graph. On the lazy path it is a Python
float, as torch_xla 1.x's optimizers expect; torch_xla uploads it as data, so the traced graph
stays the same.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from trainer.config import TrainConfig


class LearningRate:
    """Sets ``optimizer``'s rate for a step: ``peak`` times the warmup/cosine factor."""

    def __init__(self, optimizer: torch.optim.Optimizer, peak: float, warmup_steps: int,
                 total_steps: int, device: Optional[torch.device] = None) -> None:
        self.optimizer = optimizer
        self.peak, self.warmup_steps = peak, warmup_steps
        self.total_steps = max(1, total_steps)
        self.device = device  # where the rate lives as a tensor; None: a float

    def factor(self, step: int) -> float:
        """The multiplier of the peak rate at (0-based) ``step``; never exactly 0, so the lazy
        path never traces the special-scalar variant of the update."""
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        return max(1e-8, 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))

    def set(self, step: int) -> None:
        """Use the rate of ``step`` from now on (also after ``optimizer.load_state_dict``,
        which replaces the groups' rates with the checkpoint's)."""
        value = self.peak * self.factor(step)
        rate = value if self.device is None else torch.tensor(
            value, dtype=torch.float32).to(self.device)
        for group in self.optimizer.param_groups:
            group["lr"] = rate

    def plain_state(self, state: dict) -> dict:
        """``optimizer.state_dict()`` with plain float rates, so that a checkpoint loads on
        either path and on torch_xla 1.x."""
        groups = [dict(group, lr=float(group["lr"])) for group in state["param_groups"]]
        return dict(state, param_groups=groups)


def build_optimizer(config: TrainConfig, model: torch.nn.Module, steps_per_epoch: int,
                    rate_device: Optional[torch.device] = None
                    ) -> Tuple[torch.optim.Optimizer, LearningRate]:
    """SGD over ``model``'s parameters and the rate schedule of ``config``; ``rate_device``:
    keep the rate as a tensor on that device (the compiled path)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay)
    rate = LearningRate(optimizer, config.lr, int(config.warmup_epochs * steps_per_epoch),
                        config.num_epochs * steps_per_epoch, rate_device)
    rate.set(0)
    return optimizer, rate
