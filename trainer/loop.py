"""The step loop, following torch_xla's performance rules:

- batches arrive through ``xla.device_loader`` (host-to-device copies overlap compute, and the
  loader cuts the graph once per step: one sync per step);
- nothing reads a device value inside the loop: logging goes through step closures, and
  running sums stay on the device;
- every step traces the same graph: fixed batch shapes, accumulators created as device data
  (not lazy constants), gradients set to None.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Optional, Sequence

import torch

from trainer import xla


@dataclass
class StepClock:
    """Training time, accumulated per step: throughput figures without keeping a timestamp
    per step. Time between ``stop()`` and the next ``start()`` (evaluation, checkpoints) is
    not counted; the first ``skip`` steps (they compile the graphs) are left out of the
    steady figures."""

    skip: int = 3
    steps: int = 0
    seconds: float = 0.0
    steady_steps: int = 0
    steady_seconds: float = 0.0
    _last: Optional[float] = None

    def start(self) -> None:
        self._last = time.perf_counter()

    def tick(self) -> None:
        """One step was dispatched."""
        self._add_time()
        self.steps += 1
        if self.steps > self.skip:
            self.steady_steps += 1

    def stop(self) -> None:
        """The epoch's last step has finished; stop counting time."""
        self._add_time()
        self._last = None

    def _add_time(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.seconds += now - self._last
            if self.steps >= self.skip:
                self.steady_seconds += now - self._last
        self._last = now

    def rate(self, batch_size: int, steady: bool = True) -> float:
        """Examples/s, steady (compilation left out) or including compilation."""
        steps, seconds = ((self.steady_steps, self.steady_seconds) if steady
                          else (self.steps, self.seconds))
        return steps * batch_size / seconds if seconds > 0 else 0.0


@dataclass
class LoopState:
    """Counters that survive a resume. ``loss_total`` is on the device between logs."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    loss_total: Optional[torch.Tensor] = None
    clock: StepClock = field(default_factory=StepClock)


def device_zero(dev: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A 0 that is device *data*, so adding to it traces the same graph every step. Shape
    (1,), not (): torch_xla turns 0-dim host tensors into graph constants, which would make
    the first step's graph differ from the rest."""
    return torch.zeros(1, dtype=dtype).to(dev)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               scheduler: Optional[object], loss_fn: Callable, x: torch.Tensor,
               y: torch.Tensor, loss_total: torch.Tensor) -> torch.Tensor:
    """One optimisation step, traced lazily; returns the new running loss total."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss_total + loss.detach()


def train_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                scheduler: Optional[object], loss_fn: Callable, batches: Iterable,
                state: LoopState, log_steps: int, on_log: Callable[[int, torch.Tensor], None],
                should_stop: Callable[[], bool],
                on_step: Optional[Callable[[LoopState], None]] = None) -> bool:
    """Train over ``batches``; returns True when ``should_stop()`` ended the epoch early.

    ``on_log(step, loss_total)`` runs as a step closure every ``log_steps`` steps;
    ``on_step(state)`` runs on the host after each step is dispatched (checkpoint cadence).
    """
    model.train()
    dev = next(model.parameters()).device
    if state.loss_total is None:
        state.loss_total = device_zero(dev)
    state.clock.start()
    for x, y in batches:
        state.loss_total = train_step(model, optimizer, scheduler, loss_fn, x, y,
                                      state.loss_total)
        state.step_in_epoch += 1
        state.global_step += 1
        state.clock.tick()
        if log_steps and state.global_step % log_steps == 0:
            xla.add_step_closure(on_log, (state.global_step, state.loss_total))
        if on_step is not None:
            on_step(state)
        if should_stop():
            xla.sync()
            return True
    xla.sync()
    xla.wait()  # once per epoch: the epoch's time ends when its last step has finished
    state.clock.stop()
    return False


def evaluate(model: torch.nn.Module, batches: Iterable, topk: Sequence[int] = (1,)
             ) -> Dict[str, float]:
    """Top-k accuracy over ``batches``; counts stay on the device until the end. With fewer
    than k classes, top-k counts every prediction as a hit."""
    model.eval()
    dev = next(model.parameters()).device
    correct = [device_zero(dev, torch.int64) for _ in topk]
    seen = device_zero(dev, torch.int64)
    with torch.no_grad():
        for x, y in batches:
            scores = model(x)
            predictions = scores.topk(min(max(topk), scores.shape[1]), dim=1).indices
            hits = predictions.eq(y.view(-1, 1))  # padding labels (-1) never match
            correct = [total + hits[:, :k].any(dim=1).sum() for total, k in zip(correct, topk)]
            seen = seen + (y >= 0).sum()
    xla.sync()
    count = int(seen.item())
    return {"top{}".format(k): (float(total.item()) / count if count else 0.0)
            for total, k in zip(correct, topk)}
