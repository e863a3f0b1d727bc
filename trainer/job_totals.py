"""The job's running totals, over every process that trained it: a job stopped and resumed is
several processes, and the summary of the last one alone said 0 s of training after a stop in
the final evaluation.

Each checkpoint carries the totals up to its step (``job_totals``): those it was resumed
from plus what the writing process added. A process killed without a checkpoint therefore
contributes what its last checkpoint recorded; the steps it trained past that checkpoint are
trained again, and the process that resumes counts them (``steps_redone``, from the progress
lines the killed one had logged: ``outputs.RunOutputs.steps_past_resume``). A checkpoint
written before totals were recorded has none: the job's totals then start at that resume.

What the summary counts, precisely (docs/trainers.md): ``processes`` are the processes whose
totals reached a checkpoint the job went on from (the last one: its summary), and ``resumes``
those of them that started from a checkpoint, whatever ended the process before (a stop, a
kill, an error); a process that wrote no checkpoint is in neither. ``stops`` (``summary``'s
argument) are the stops that reached the training loop, each a ``stop`` line in the metrics
and a checkpoint at its step; a stop that ends the process at once (``stop_signal``: before a
step has trained since the start, a second Ctrl-C, the deadline inside a compile) leaves no
line, like a kill. ``resumes - stops`` are the restarts after those, kills and errors. A step
saved already is not written again (``resume.RunCheckpoints.save``), so what a process did
after its last checkpoint (an evaluation cut short by a stop) is not counted, as for a kill.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional


@dataclass
class JobTotals:
    """Sums over processes. ``to_first_step_seconds``: for each process in order, the time
    from its start to the end of its first step (imports, data, restore, first compile);
    ``resumes``: processes that started from a checkpoint."""

    processes: int = 0
    resumes: int = 0
    training_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    checkpoint_seconds: float = 0.0
    compile_seconds: float = 0.0
    restore_seconds: float = 0.0
    # The part of ``to_first_step_seconds`` that resumed processes took: lost to restarts.
    restart_seconds: float = 0.0
    steps_trained: int = 0
    steps_redone: int = 0
    steady_steps: int = 0
    steady_examples: int = 0
    steady_seconds: float = 0.0
    to_first_step_seconds: List[float] = field(default_factory=list)

    @classmethod
    def from_checkpoint(cls, saved: Any) -> "JobTotals":
        """The totals a checkpoint's ``job_totals`` holds; none (an older checkpoint): zero.
        Unknown names (a newer version's) are left out."""
        if not isinstance(saved, dict):
            return cls()
        known = {item.name for item in fields(cls)}
        return cls(**{name: value for name, value in saved.items() if name in known})

    def plus(self, other: "JobTotals") -> "JobTotals":
        """Both processes' totals (``self``'s first)."""
        return JobTotals(**{
            item.name: getattr(self, item.name) + getattr(other, item.name)
            for item in fields(self)})

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def summary(self, stops: int) -> Dict[str, Any]:
        """What ``summary.json`` says of the job: these totals, ``stops`` (the stops the
        job's metrics recorded), its steady rate over all processes, and the time lost to
        restarts: each resumed process's time to its first step, plus its steps redone at
        the job's steady step time."""
        steady_step_seconds = (self.steady_seconds / self.steady_steps
                               if self.steady_steps else 0.0)
        return dict(self.as_dict(), stops=stops, steady_examples_per_second=(
            self.steady_examples / self.steady_seconds if self.steady_seconds > 0 else 0.0),
            lost_to_restarts_seconds=self.restart_seconds
            + self.steps_redone * steady_step_seconds)


def process_age() -> Optional[float]:
    """Seconds since this process started (Linux: ``/proc``), or None where unknown."""
    try:
        with open("/proc/self/stat") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            now = float(uptime.read().split()[0])
        return max(0.0, now - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
