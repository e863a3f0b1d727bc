"""The epoch loops (training and evaluation), following torch_xla's performance rules:

- batches arrive through ``xla.device_loader`` (host-to-device copies overlap compute; on the
  lazy path the loader also cuts the graph once per step: one sync per step);
- nothing reads a device value inside the loop: logging goes through step closures, and
  running sums stay on the device;
- every step traces the same graph: fixed batch shapes, accumulators created as device data
  (not lazy constants), gradients set to None.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Dict, Iterable, Iterator, Optional

import torch

from trainer import stop_signal, xla
from trainer.devices import NEITHER, Agreed
from trainer.job_totals import process_age
from trainer.steps import Steps


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
    # The part of ``seconds`` the loop spent waiting for the next batch (``next_batch``).
    waited: float = 0.0
    # The longest of those waits since the reader last set it to 0 (``progress``: a stall).
    longest_wait: float = 0.0
    # Seconds from the process's start to the end of its first step (``job_totals``).
    to_first_step: Optional[float] = None

    def next_batch(self, batches: Iterator) -> Optional[Any]:
        """The next item of ``batches`` (None at their end), the time it took counted as
        waiting for input, less what ``batches`` spent waiting for the steps before it to
        finish (its ``device_seconds``, where it has them: that is the steps' compute)."""
        started = time.perf_counter()
        computing = getattr(batches, "device_seconds", 0.0)
        try:
            return next(batches, None)
        finally:
            computing = getattr(batches, "device_seconds", 0.0) - computing
            waited = max(0.0, time.perf_counter() - started - computing)
            self.waited += waited
            self.longest_wait = max(self.longest_wait, waited)

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
    # The last step at which ``loss_total`` was read and was finite (``trainer.divergence``).
    loss_finite_at: int = 0


@dataclass
class EpochHooks:
    """What ``train_epoch`` calls besides the step: ``on_log(step, loss_total[, grad_norm])``
    as a step closure every ``log_steps`` steps (0: never; ``grad_norm`` with clipping);
    ``decide()`` after each step is dispatched (what every process agreed: stop on SIGTERM,
    checkpoint by the clock); unless that is to
    stop, ``on_step(state, checkpoint_agreed)`` on the host (the checkpoint cadence)."""

    log_steps: int = 0
    on_log: Optional[Callable[..., None]] = None
    on_step: Optional[Callable[[LoopState, bool], None]] = None
    decide: Callable[[], Agreed] = lambda: NEITHER
    # The context the loop waits for each batch in: one where a stop signal raises
    # ``stop_signal.Stopped`` (then the epoch ends as if ``decide`` had said stop), or that
    # raises the run's own error (``devices.BoundaryVote.input_wait``).
    input_wait: Callable[[], ContextManager] = contextlib.nullcontext
    # The context each step runs in, given its global step (``profiling``: the profiler's
    # step annotation while a profile is captured).
    step_context: Callable[[int], ContextManager] = lambda step: contextlib.nullcontext()


def train_epoch(steps: Steps, batches: Iterable, state: LoopState,
                hooks: EpochHooks) -> bool:
    """Train over ``batches``; returns True when ``hooks.decide()`` ended the epoch early, or a
    stop signal ended the wait for a batch (``hooks.input_wait``), at the state after the last
    step dispatched (the checkpoint is then the caller's, so ``on_step`` is not called for that
    step). On the
    lazy path each step is cut here, before the next batch is asked for: ``batches`` must not
    cut it too (``fit`` gives a device loader that does not)."""
    steps.model.train()
    if state.loss_total is None:
        state.loss_total = xla.device_number(0, steps.device)
    state.clock.start()
    loaded = iter(batches)
    while True:
        if steps.path == xla.LAZY:
            # Cut the step before asking for the next batch, as the loader would on asking:
            # the time waited for the batch is then the input's alone.
            xla.sync()
        try:
            with hooks.input_wait():
                batch = state.clock.next_batch(loaded)
        except stop_signal.Stopped:
            xla.sync()
            return True
        if batch is None:
            break
        x, y = batch
        # No graph may be cut inside the context (a profile's step annotation cuts it at its
        # end), so the progress closure's sync comes after it.
        with hooks.step_context(state.global_step):
            state.loss_total = steps.train(state.global_step, x, y, state.loss_total)
        state.step_in_epoch += 1
        state.global_step += 1
        state.clock.tick()
        if hooks.on_log is not None and hooks.log_steps and (
                state.global_step % hooks.log_steps == 0):
            # With --clip_grad_norm the step's gradient norm goes with its loss.
            norm = steps.grad_norm
            xla.add_step_closure(hooks.on_log, (state.global_step, state.loss_total) + (
                (norm,) if norm is not None else ()))
            # Run the step, and the closure after it, now: where the loader's sync would cut
            # the same graph anyway (lazy path), or would never come (compiled path).
            xla.sync()
        if state.clock.steps == 1:
            # Until the first step since the start has run, a stop has nothing to save and
            # ends the process at once, even inside this step's compile (``stop_signal``);
            # from then on it checkpoints. Waited for once, here.
            xla.sync()
            xla.wait()
            stop_signal.step_trained()
            state.clock.to_first_step = process_age()
        agreed = hooks.decide()
        if agreed.stop:
            xla.sync()
            return True
        if hooks.on_step is not None:
            hooks.on_step(state, agreed.checkpoint)
    xla.sync()
    xla.wait()  # once per epoch: the epoch's time ends when its last step has finished
    state.clock.stop()
    return False


def evaluate(steps: Steps, batches: Iterable, stop: Callable[[], bool] = lambda: False,
             input_wait: Callable[[], ContextManager] = contextlib.nullcontext
             ) -> Optional[Dict[str, float]]:
    """Top-k accuracy (and the loss, where ``steps`` sums it: ``Steps.results``) over
    ``batches``; counts stay on the device until the end. None when
    ``stop()`` turns true first, or a stop signal ends a wait for a batch (``input_wait``, as
    in ``train_epoch``): SIGTERM, since a long evaluation, such as ImageNet's 50,000 images,
    can outlast the platform's grace period."""
    steps.model.eval()
    counts = steps.zero_counts()
    loaded = iter(batches)
    while True:
        try:
            with input_wait():
                batch = next(loaded, None)
        except stop_signal.Stopped:
            return None
        if batch is None:
            break
        if stop():
            return None
        x, y = batch
        counts = steps.evaluate(x, y, counts)
    xla.sync()
    return steps.results(counts)
