"""The optimizer (``--optimizer``: SGD with momentum and weight decay, or AdamW with decoupled
weight decay on every parameter but biases and normalization weights) and its learning rate: a
linear warmup per step, then cosine decay to the end of the run.

The rate is a pure function of the global step (``LearningRate.rate_at``), written with torch
ops so that one definition serves both paths. The lazy path evaluates it on the host before
every step and sets the optimizer's rate to that number (``LearningRate.set``, as torch_xla
1.x's optimizers expect); the compiled step traces it into its graph, which computes the rate
from a step counter it keeps on the device, so no step uploads or computes a rate on the
host. Checkpoints record the rate of the step they resume at, and a resumed run sets it again,
so they carry no scheduler state.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from trainer import param_groups
from trainer.config import TrainConfig
from trainer.errors import TrainerError


class LearningRate:
    """The rate schedule of one run: ``peak`` times the warmup/cosine factor of a step."""

    def __init__(self, optimizer: torch.optim.Optimizer, peak: float, warmup_steps: int,
                 total_steps: int) -> None:
        self.optimizer = optimizer
        self.peak, self.warmup_steps = peak, warmup_steps
        self.total_steps = max(1, total_steps)

    def rate_at(self, step: torch.Tensor) -> torch.Tensor:
        """The rate at (0-based) ``step``, a floating-point tensor of any shape, in its dtype.
        The factor is never exactly 0, so the lazy path never traces the special-scalar
        variant of the update."""
        warmup = float(self.warmup_steps)
        rising = (step + 1.0) / (warmup + 1.0)
        progress = ((step - warmup) / max(1, self.total_steps - self.warmup_steps)).clamp(
            0.0, 1.0)
        falling = (0.5 * (1.0 + torch.cos(math.pi * progress))).clamp(min=1e-8)
        return self.peak * torch.where(step < warmup, rising, falling)

    def value(self, step: int) -> float:
        """The rate at (0-based) ``step``, computed on the host in float64."""
        return float(self.rate_at(torch.tensor(float(step), dtype=torch.float64)))

    def set(self, step: int) -> None:
        """Give ``optimizer`` the rate of ``step`` (also after ``optimizer.load_state_dict``,
        which replaces the groups' rates with the checkpoint's)."""
        value = self.value(step)
        for group in self.optimizer.param_groups:
            group["lr"] = value * param_groups.lr_scale(group)


def peak_rate(lr: float, global_batch: int, lr_batch: int) -> float:
    """The run's peak learning rate: ``lr`` scaled linearly with the global batch (Goyal et
    al. 2017, "Accurate, Large Minibatch SGD"), ``lr`` being the rate of a global batch of
    ``lr_batch`` examples; ``lr`` itself when ``lr_batch`` is 0. A function of the global batch
    only, never of the device count: the same global batch trains alike on 1 device or 8, and a
    checkpoint resumes at the same rate on either."""
    return lr * global_batch / lr_batch if lr_batch else lr


def build_optimizer(config: TrainConfig, model: torch.nn.Module, steps_per_epoch: int,
                    global_batch: int = 0, groups: Sequence[param_groups.Group] = ()
                    ) -> Tuple[torch.optim.Optimizer, LearningRate]:
    """``--optimizer`` over ``model``'s parameters that train (a frozen one gets no state and
    no decay on any path) and the rate schedule of ``config`` for a global batch of
    ``global_batch`` (0: ``config.batch_size``, one device); ``groups``: the user's
    (``trainer.param_groups``), the rest in the trainer's own."""
    peak = peak_rate(config.lr, global_batch or config.batch_size, config.lr_batch)
    if config.optimizer == "adamw":
        optimizer = adamw(model, peak, config.weight_decay, groups)  # type: torch.optim.Optimizer
    else:
        optimizer = torch.optim.SGD(param_groups.optimizer_groups(
            model, groups, [(lambda p: True, config.weight_decay)]), lr=peak,
            momentum=config.momentum)
    total = config.train_steps(steps_per_epoch)
    rate = LearningRate(optimizer, peak, min(int(config.warmup_epochs * steps_per_epoch), total),
                        total)
    rate.set(0)
    return optimizer, rate


ADAMW_BETAS = (0.9, 0.999)


def adamw(model: torch.nn.Module, rate: float, weight_decay: float,
          groups: Sequence[param_groups.Group] = ()) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` as DeiT trains: ``weight_decay`` on weights of two or more
    dimensions, none on biases and normalization weights (one dimension), in that order of
    groups (a group with no parameters left out); ``groups``' own settings first."""
    return torch.optim.AdamW(param_groups.optimizer_groups(
        model, groups, [(lambda p: p.dim() > 1, weight_decay), (lambda p: True, 0.0)]),
        lr=rate, betas=ADAMW_BETAS, eps=1e-8)


def optimizer_name(state: Dict[str, Any]) -> Optional[str]:
    """``--optimizer``'s value for a saved ``optimizer.state_dict()``: its groups' settings
    tell (AdamW's betas, SGD's momentum); None for neither."""
    groups = state.get("param_groups") or [{}]
    if "betas" in groups[0]:
        return "adamw"
    if "momentum" in groups[0]:
        return "sgd"
    return None


def check_resumable(optimizer: torch.optim.Optimizer, saved: Dict[str, Any], uri: str) -> None:
    """A usage error (64) where the checkpoint at ``uri`` holds the state of the other
    ``--optimizer`` than this run's: loading it would fail with a traceback, or, where the
    group counts happen to match, carry on with state that means something else."""
    mine, theirs = optimizer_name(optimizer.state_dict()), optimizer_name(saved)
    if theirs is not None and mine != theirs:
        raise TrainerError("checkpoint {} was trained with --optimizer={}; this run has "
                           "--optimizer={}".format(uri, theirs, mine),
                           "resume with --optimizer={}, or start in a new --job_dir".format(
                               theirs))
