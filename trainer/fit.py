"""``fit()``: the run shared by every trainer. Resume from the newest valid checkpoint, train
epoch by epoch with progress lines, evaluate, checkpoint, write outputs, and on SIGTERM finish
the current step, checkpoint and stop.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from trainer import stop_signal, xla
from trainer.batches import DataSource
from trainer.checkpoints import CheckpointStore, checkpoint_name, mismatch, to_cpu
from trainer.config import TrainConfig
from trainer.errors import EX_PREEMPTED, DataError, TrainerError
from trainer.loop import LoopState, evaluate, train_epoch
from trainer.outputs import OutputPaths, RunOutputs, checkpoint_directory

log = logging.getLogger("trainer")


@dataclass
class TrainSpec:
    """What a trainer contributes: its model, data and loss; ``fit`` does the rest."""

    name: str
    model: torch.nn.Module
    data: DataSource
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    topk: Sequence[int] = (1,)


class Preempted(TrainerError):
    """SIGTERM arrived; a checkpoint was written."""

    exit_code = EX_PREEMPTED


def build_optimizer(config: TrainConfig, model: torch.nn.Module, steps_per_epoch: int):
    """SGD with momentum and weight decay; per-step linear warmup then cosine decay."""
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay)
    total = max(1, config.num_epochs * steps_per_epoch)
    warmup = int(config.warmup_epochs * steps_per_epoch)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)  # never exactly 0: no special-scalar graph
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def fit(config: TrainConfig, spec: TrainSpec, paths: OutputPaths) -> Dict[str, Any]:
    """Train ``spec`` as ``config`` says; returns the summary (also written to the job dir)."""
    started = time.time()
    compiles_before = xla.compile_count()  # the count is per process: report this run's
    dev = xla.device()
    model = spec.model.to(dev)
    data = spec.data
    steps_per_epoch = min(data.steps_per_epoch, config.num_steps or data.steps_per_epoch)
    optimizer, scheduler = build_optimizer(config, model, steps_per_epoch)
    store = _checkpoint_store(paths, config)
    state = LoopState()
    restored_total = 0.0
    if store is not None:
        restored = store.load_latest()
        if restored is not None:
            _refuse_foreign(store, restored, model)
            _restore(restored[1], model, optimizer, scheduler, state, dev)
            restored_total = restored[1].get("loss_total", 0.0)
            log.info("resumed from %s: epoch %d, step %d", store.directory.join(
                checkpoint_name(restored[0])), state.epoch + 1, state.global_step)
    outputs = RunOutputs(paths, resume_step=state.global_step,
                         hypertune_tag=config.hypertune_metric)
    log.info("%s on %s (%s): %d steps/epoch x %d epochs, batch %d", spec.name, dev,
             xla.device_kind(dev), steps_per_epoch, config.num_epochs, data.batch_size)
    compiles_after_epoch = []
    executions_per_epoch = []
    accuracy: Dict[str, float] = {}
    progress = _ProgressLog(state, data.batch_size, steps_per_epoch, config.num_epochs,
                            outputs, initial_total=restored_total)
    # The entry modules catch SIGTERM from start-up on; this also covers in-process callers
    # and gives the previous handler back afterwards.
    with stop_signal.caught():
        try:
            if stop_signal.received():  # during start-up: nothing new to checkpoint
                raise Preempted("stopped by SIGTERM before training resumed at step {}".format(
                    state.global_step), "the platform restarts the job, which starts again here")
            while state.epoch < config.num_epochs:
                executions_before = xla.execute_count()
                batches = _limited(data.train_batches(state.epoch, state.step_in_epoch),
                                   steps_per_epoch - state.step_in_epoch)
                interrupted = train_epoch(
                    model, optimizer, scheduler, spec.loss_fn, xla.device_loader(batches, dev),
                    state, config.log_steps, progress, stop_signal.received,
                    on_step=_every(config.checkpoint_steps, lambda s: _save(
                        store, s, model, optimizer, scheduler, outputs)))
                if interrupted:
                    path = _save(store, state, model, optimizer, scheduler, outputs)
                    raise Preempted("stopped by SIGTERM at step {}; checkpoint {}".format(
                        state.global_step, path or "not written (no job dir)"),
                        "the platform restarts the job, which resumes from the checkpoint")
                eval_batches = _limited(data.eval_batches(),
                                        config.num_steps or data.eval_steps)
                accuracy = evaluate(model, xla.device_loader(eval_batches, dev), spec.topk)
                executions_per_epoch.append(xla.execute_count() - executions_before)
                compiles_after_epoch.append(xla.compile_count() - compiles_before)
                state.epoch += 1
                state.step_in_epoch = 0
                _log_epoch(state, accuracy, outputs)
                if store is None:
                    outputs.flush()
                else:
                    _save(store, state, model, optimizer, scheduler, outputs)  # also flushes
        finally:
            outputs.flush()
    outputs.save_model(to_cpu(model.state_dict()))
    summary = {
        "trainer": spec.name,
        "device": str(xla.device_kind(dev)),
        "final_accuracy": accuracy.get("top1"),
        "final_top5": accuracy.get("top5"),
        "epochs": state.epoch,
        "global_step": state.global_step,
        "steady_examples_per_second": state.clock.rate(data.batch_size),
        "examples_per_second_with_compilation": state.clock.rate(data.batch_size,
                                                                 steady=False),
        "compile_count": xla.compile_count() - compiles_before,
        "compiles_after_each_epoch": compiles_after_epoch,
        "executions_per_epoch": executions_per_epoch,
        "wall_time_seconds": time.time() - started,
    }
    outputs.write_summary(summary)
    outputs.close()
    log.info("done: accuracy %s, %.1f examples/s steady, %d graphs compiled",
             summary["final_accuracy"], summary["steady_examples_per_second"],
             summary["compile_count"])
    return summary


class _ProgressLog:
    """The step closure that prints progress and records metrics (runs after the step)."""

    def __init__(self, state: LoopState, batch_size: int, steps_per_epoch: int,
                 num_epochs: int, outputs: RunOutputs, initial_total: float = 0.0) -> None:
        self.state, self.batch_size = state, batch_size
        self.total_steps = steps_per_epoch * num_epochs
        self.outputs = outputs
        self.last_time = time.perf_counter()
        self.last_step = state.global_step
        self.last_total = initial_total  # loss_total is a running sum over the whole run

    def __call__(self, step: int, loss_total: torch.Tensor) -> None:
        now = time.perf_counter()
        total = float(loss_total.item())  # in a step closure: the step has run already
        steps = max(1, step - self.last_step)
        rate = steps * self.batch_size / max(now - self.last_time, 1e-9)
        eta = (self.total_steps - step) * self.batch_size / rate if rate > 0 else 0.0
        loss = (total - self.last_total) / steps
        log.info("step %d/%d  loss %.4f  %.1f examples/s  ETA %s", step, self.total_steps,
                 loss, rate, _duration(eta))
        self.outputs.record("train", {"loss": loss, "examples_per_second": rate}, step)
        self.last_time, self.last_step, self.last_total = now, step, total


def _log_epoch(state: LoopState, accuracy: Dict[str, float], outputs: RunOutputs) -> None:
    line = "  ".join("{} {:.2%}".format(name, value) for name, value in accuracy.items())
    log.info("epoch %d done (step %d): eval %s", state.epoch, state.global_step, line)
    outputs.record("eval", dict(accuracy, epoch=state.epoch), state.global_step)
    if "top1" in accuracy:
        outputs.report_hypertune(accuracy["top1"], state.global_step)


def _checkpoint_store(paths: OutputPaths, config: TrainConfig) -> Optional[CheckpointStore]:
    directory = checkpoint_directory(paths)
    if directory is None:
        log.warning("no --job_dir (nor AIP_CHECKPOINT_DIR): checkpoints are not written")
        return None
    return CheckpointStore(directory, keep=config.keep_checkpoints)


def _save(store: Optional[CheckpointStore], state: LoopState, model: torch.nn.Module,
          optimizer: torch.optim.Optimizer, scheduler: Any, outputs: RunOutputs) -> Optional[str]:
    if store is None:
        return None
    xla.sync()  # cut the step graph as the loader would, so the reads below compile nothing
    path = store.save(state.global_step, {
        "model": to_cpu(model.state_dict()), "optimizer": to_cpu(optimizer.state_dict()),
        "scheduler": scheduler.state_dict(), "epoch": state.epoch,
        "step_in_epoch": state.step_in_epoch, "step": state.global_step,
        "loss_total": float(state.loss_total.item()) if state.loss_total is not None else 0.0,
        "torch_rng": torch.get_rng_state()})
    outputs.flush()  # metrics up to this step are durable together with the checkpoint
    log.info("checkpoint %s", path)
    return path


def _refuse_foreign(store: CheckpointStore, restored: Tuple[int, Dict[str, Any]],
                    model: torch.nn.Module) -> None:
    """Stop before training when the newest checkpoint belongs to another model: starting
    over would rotate that run's checkpoints away."""
    problem = mismatch(model, restored[1])
    if problem is not None:
        raise DataError("checkpoint {} was written by another model: {}".format(
            store.directory.join(checkpoint_name(restored[0])), problem),
            "use a new --job_dir for this model, or move the old checkpoints away")


def _restore(saved: Dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             scheduler: Any, state: LoopState, dev: torch.device) -> None:
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])  # moves state to the parameters' device
    scheduler.load_state_dict(saved["scheduler"])
    state.epoch, state.step_in_epoch = saved["epoch"], saved["step_in_epoch"]
    state.global_step = saved["step"]
    state.loss_total = torch.tensor([saved.get("loss_total", 0.0)]).to(dev)
    torch.set_rng_state(saved["torch_rng"])


def _every(steps: int, action: Callable[[LoopState], Any]) -> Optional[Callable[[LoopState],
                                                                                 None]]:
    if not steps:
        return None

    def maybe(state: LoopState) -> None:
        if state.global_step % steps == 0:
            action(state)

    return maybe


def _limited(batches, count: int):
    for index, batch in enumerate(batches):
        if index >= count:
            return
        yield batch


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return "{}:{:02d}:{:02d}".format(seconds // 3600, seconds // 60 % 60, seconds % 60)
