"""What a run reports when it ends (``summary.json`` and the last log line), and the graph
counts behind it: graphs compiled and device executions per epoch, counted the same way on
both step paths (torch_xla's own compile and execute counters)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from trainer import xla
from trainer.loop import LoopState
from trainer.steps import headline_accuracy

log = logging.getLogger("trainer")


class GraphCounts:
    """This run's compilations and executions (the counters are per process: a run counts
    from where they stood when it started)."""

    def __init__(self) -> None:
        self._compiles_at_start = xla.compile_count()
        self._compile_seconds_at_start = xla.compile_seconds()
        self._executions_at_epoch_start = xla.execute_count()
        self.compiles_after_each_epoch: List[int] = []
        self.executions_per_epoch: List[int] = []

    def epoch_started(self) -> None:
        self._executions_at_epoch_start = xla.execute_count()

    def epoch_ended(self) -> None:
        self.executions_per_epoch.append(xla.execute_count() - self._executions_at_epoch_start)
        self.compiles_after_each_epoch.append(self.compiled())

    def compiled(self) -> int:
        return xla.compile_count() - self._compiles_at_start

    def compile_seconds(self) -> float:
        return xla.compile_seconds() - self._compile_seconds_at_start


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds the run spent outside training steps: evaluating, and checkpointing on the
    loop's path (copying the state to the host, waiting for the write before)."""

    evaluation: float = 0.0
    checkpoints: float = 0.0


def summarize(name: str, device_kind: str, step_path: str, state: LoopState, batch_size: int,
              accuracy: Dict[str, float], counts: GraphCounts, started: float,
              compile_cache: Optional[Dict[str, Any]] = None,
              phases: PhaseTimes = PhaseTimes()) -> Dict[str, Any]:
    """The summary of a finished run, logged in one line. ``input_wait`` is the share of the
    training time (the steps' wall time) the loop spent waiting for the next batch."""
    clock = state.clock
    summary = {
        "trainer": name,
        "device": device_kind,
        "step_path": step_path,
        "final_accuracy": headline_accuracy(accuracy),
        "final_top5": accuracy.get("top5"),
        "epochs": state.epoch,
        "global_step": state.global_step,
        "steady_examples_per_second": state.clock.rate(batch_size),
        "examples_per_second_with_compilation": state.clock.rate(batch_size, steady=False),
        "compile_count": counts.compiled(),
        "compiles_after_each_epoch": counts.compiles_after_each_epoch,
        "executions_per_epoch": counts.executions_per_epoch,
        "compile_cache": compile_cache,
        "wall_time_seconds": time.time() - started,
        "training_seconds": clock.seconds,
        "input_wait": min(1.0, clock.waited / clock.seconds) if clock.seconds > 0 else 0.0,
        "evaluation_seconds": phases.evaluation,
        "checkpoint_seconds": phases.checkpoints,
        "compile_seconds": counts.compile_seconds(),
    }
    if "loss" in accuracy:  # evaluation's loss, where it is reported (``trainer.train``)
        summary["final_eval_loss"] = accuracy["loss"]
    # The user's own metrics (``trainer.train(metrics=...)``), by their names.
    own = {name: value for name, value in accuracy.items()
           if name not in ("top1", "top5", "accuracy", "loss")}
    if own:
        summary["final_metrics"] = own
    # A run whose every step compiled (a smoke run, a resume at its end) has no steady rate:
    # said so, not "0.0 examples/s" (summary.json keeps 0.0, a number for its readers).
    steady = ("{:.1f} examples/s steady".format(summary["steady_examples_per_second"])
              if clock.steady_steps else "no steady rate (no step ran after the compiles)")
    log.info("done: accuracy %s, %s, %d graphs compiled (%s steps); "
             "input wait %.0f%% of %.1f s training, %.1f s evaluating, %.1f s "
             "checkpointing, %.1f s compiling", _percent(summary["final_accuracy"]),
             steady, summary["compile_count"], step_path,
             100 * summary["input_wait"], clock.seconds, phases.evaluation,
             phases.checkpoints, summary["compile_seconds"])
    return summary


def _percent(value: Optional[float]) -> str:
    return "-" if value is None else "{:.2%}".format(value)
