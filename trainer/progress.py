"""The progress line of every ``--log_steps`` window: where the time of those steps went.

Each line gives the loss, the step time, the share of it the loop waited for the next batch
(``input wait``), examples/s (and per device), the graphs compiled so far and the ETA;
TensorBoard and ``metrics.jsonl`` get the same figures (``train/...``). When the loop waited
more than ``INPUT_BOUND_SHARE`` of a window, one line containing ``input-bound`` says which
fix applies on this host (``input_bound_advice``); never where the input cannot be what the
loop waits for (``InputSetup.can_starve``: ``--fake_data``, whose one batch is always ready,
and batches cut from memory onto the host's own CPU device), nor for a window that compiled
a graph (the workers' start-up). A
window with one wait of ``STALL_SECONDS`` or more is a stall, not a lack of cores: its line
(``stall_advice``, each time) points at the data's storage instead. A window whose running
loss is nan or inf stops the run instead (``trainer.divergence``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from trainer.divergence import check_loss
from trainer.loop import LoopState
from trainer.throughput import TokenRates

log = logging.getLogger("trainer")

# The share of a window's time spent waiting for batches above which the run is input-bound.
INPUT_BOUND_SHARE = 0.10
# One wait for a batch this long is a stall of the data's reads (a storage outage: reads retry
# for up to ``TRAINER_GCS_RETRY_DEADLINE``), which no number of cores would shorten: decoding
# even a whole ImageNet batch of 1,024 in one worker takes a few seconds.
STALL_SECONDS = 10.0


@dataclass(frozen=True)
class InputSetup:
    """What decides the advice of an input-bound run: whether the data is fake (never
    input-bound), the data workers (0: decoding in the training process), the host's cores,
    and whether the batches are decoded images (ImageNet) or cut from arrays in memory
    (MNIST: no workers, nothing to decode, so worker and image advice would be wrong)."""

    fake: bool
    workers: int
    cores: int
    decodes_images: bool = True
    # Whether the devices are this host's XLA CPU device: a batch's copy to it is a host
    # memcpy that waits only for the cores the steps are computing on.
    host_device: bool = False
    # The most data workers this host's memory holds where that is fewer than its cores
    # would run (trainer.data.workers.WorkerChoice.memory_holds); None: memory is no limit.
    memory_holds: Optional[int] = None
    # Whether the images come from make_shards' shards (else class folders): where smaller
    # images are made.
    from_shards: bool = False

    @property
    def can_starve(self) -> bool:
        """Whether a wait for the next batch can be the input's slowness. Not with fake data
        (one batch, always ready), nor with batches cut from memory onto the host's CPU
        device: making one is a slice of an array (microseconds), so what the loop waited
        for was the loader's copy thread getting a core back from the steps' compute. Calling
        that input-bound sent the default MNIST run after a fix for a problem it did not
        have."""
        return not self.fake and (self.decodes_images or not self.host_device)


def input_bound_advice(share: float, steps: int, setup: InputSetup) -> str:
    """The ``input-bound`` line for a window of ``steps`` steps that waited ``share`` of its
    time for batches: the fix that applies first on this host."""
    if not setup.decodes_images:  # onto an accelerator (can_starve)
        fix = ("the batches are cut from memory (nothing to decode), so the wait is their "
               "copy to the devices: a larger --batch_size per device gives each copy and "
               "each step more work for its fixed cost")
    elif setup.workers <= 0:
        fix = ("decode in worker processes: --num_workers=-1 (one per core but the trainer's; this "
               "host has {} cores)".format(setup.cores))
    elif setup.memory_holds is not None and setup.workers >= setup.memory_holds:
        fix = ("the host's memory holds only {} data workers (now {}; this host has {} cores; "
               "the start-up line \"data workers:\" says what each takes): a smaller "
               "--batch_size (the step ring and the runs in flight shrink with it) leaves "
               "room for more, or a host or container with more memory".format(
                   setup.memory_holds, setup.workers, setup.cores))
    elif setup.workers < setup.cores - 1:
        more = setup.cores - 1
        if setup.memory_holds is not None:
            more = setup.memory_holds
        fix = ("more data workers: --num_workers={} (now {}; this host has {} cores{}; they "
               "share one ring of step buffers in /dev/shm, whatever their number)".format(
                   more, setup.workers, setup.cores,
                   "; its memory holds no more" if more < setup.cores - 1 else ""))
    else:
        smaller = ("make the shards again with --max_shorter_side=N"
                   if setup.from_shards else "make shards of these folders with python -m "
                   "trainer.data.make_shards --max_shorter_side=N")
        smaller += ", e.g. 320 for --image_size=224"
        fix = ("all {} cores of this host decode already ({} data workers): a host with more "
               "cores, or smaller images, as decoding time grows with the pixels ({})".format(
                   setup.cores, setup.workers, smaller))
    return ("input-bound: the loop waited {:.0%} of the last {} steps for the next batch; "
            "{}".format(share, steps, fix))


def stall_advice(longest: float, steps: int) -> str:
    """The ``input stalled`` line for a window of ``steps`` steps whose longest wait for a
    batch was ``longest`` seconds."""
    return ("input stalled: the loop waited {:.1f} s at once for a batch in the last {} steps: "
            "the data's reads stopped answering (a storage outage or throttling: Cloud Storage "
            "reads retry for up to TRAINER_GCS_RETRY_DEADLINE seconds), not a lack of cores; "
            "check the data's bucket and the network".format(longest, steps))


class ProgressLog:
    """The step closure that logs progress and records its figures (runs after the step).
    ``compiled()``: graphs compiled by this run so far; ``rate_at(n)``: the learning rate of
    0-based step ``n`` (``optim.LearningRate.value``), recorded for the window's last step."""

    def __init__(self, state: LoopState, batch_size: int, devices: int, total_steps: int,
                 record: Callable[[str, dict, int], None], compiled: Callable[[], int],
                 setup: InputSetup, initial_total: float = 0.0,
                 rate_at: Optional[Callable[[int], float]] = None,
                 tokens: Optional[TokenRates] = None) -> None:
        self.state, self.batch_size, self.devices = state, batch_size, max(1, devices)
        self.tokens = tokens  # a language model's: tokens/s per device and MFU
        self.total_steps = total_steps
        self.record, self.compiled, self.setup = record, compiled, setup
        self.rate_at = rate_at
        self.last_step = state.global_step
        self.last_total = initial_total  # loss_total is a running sum over the whole run
        self.last_seconds, self.last_waited = state.clock.seconds, state.clock.waited
        self.last_time = time.perf_counter()
        self.last_graphs = compiled()
        self.advised = False

    def __call__(self, step: int, loss_total: torch.Tensor,
                 grad_norm: Optional[torch.Tensor] = None) -> None:
        """The log line and ``train`` record of the steps up to ``step``: their mean loss from
        the running ``loss_total``; with ``grad_norm`` (``--clip_grad_norm``) the step's global
        gradient norm before clipping."""
        total = float(loss_total.item())  # in a step closure: the step has run already
        check_loss(self.state, total, step)
        clock, now = self.state.clock, time.perf_counter()
        steps = max(1, step - self.last_step)
        # Training time only (the clock stops for evaluations and epoch-end checkpoints);
        # wall time where the clock has not ticked (the first closure of a resumed run).
        seconds = clock.seconds - self.last_seconds or now - self.last_time
        waited = min(max(clock.waited - self.last_waited, 0.0), seconds)
        share = waited / seconds if seconds > 0 else 0.0
        rate = steps * self.batch_size / max(seconds, 1e-9)
        eta = (self.total_steps - step) * self.batch_size / rate if rate > 0 else 0.0
        loss = (total - self.last_total) / steps
        graphs = self.compiled()
        norm = None if grad_norm is None else float(grad_norm.item())
        speed = self.tokens.figures(rate / self.devices) if self.tokens is not None else {}
        log.info("step %d/%d  loss %.4f%s  %.1f ms/step  input wait %.0f%%  %.1f examples/s "
                 "(%.1f per device)%s  %d graphs  ETA %s", step, self.total_steps, loss,
                 "" if norm is None else "  grad norm {:.4g}".format(norm),
                 1000 * seconds / steps, 100 * share, rate, rate / self.devices,
                 TokenRates.describe(speed) if speed else "", graphs, _duration(eta))
        figures = {"loss": loss, "examples_per_second": rate,
                   "examples_per_second_per_device": rate / self.devices,
                   "step_seconds": seconds / steps, "input_wait": share,
                   "graphs_compiled": graphs}
        figures.update(speed)
        if self.rate_at is not None:  # the rate the window's last step updated with
            figures["learning_rate"] = self.rate_at(step - 1)
        if norm is not None:  # the window's last step's, before clipping
            figures["grad_norm"] = norm
        self.record("train", figures, step)
        if clock.longest_wait >= STALL_SECONDS:
            log.info("%s", stall_advice(clock.longest_wait, steps))
        # A window that compiled a graph is also the one the data workers started in (a
        # resume's first, too): what it waited says how fast they start, not how fast they
        # supply, and more workers would start no sooner.
        elif (share > INPUT_BOUND_SHARE and self.setup.can_starve and not self.advised
              and graphs == self.last_graphs):
            log.info("%s", input_bound_advice(share, steps, self.setup))
            self.advised = True  # once a run: each progress line shows the share anyway
        clock.longest_wait = 0.0
        self.last_step, self.last_total, self.last_graphs = step, total, graphs
        self.last_seconds, self.last_waited, self.last_time = clock.seconds, clock.waited, now


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return "{}:{:02d}:{:02d}".format(seconds // 3600, seconds // 60 % 60, seconds % 60)
