"""What an epoch boundary costs, in steady training steps (run: make bench, or python
bench/epoch_boundary.py [--rounds N] [--before CHECKOUT]).

Whole trainer processes (``python -m trainer.imagenet``: ResNet-18 at 16 px, batch 8, 2 data
workers) on real photographs in shards (``tests/photos.py``: JPEGs of about 500x375, 8
classes), each run in a fresh job dir, so every epoch ends with its checkpoint and its one
evaluation step:

- A: 6 epochs of 39 steps (312 training images);
- B: 1 epoch of 234 steps (1,872 images): the same 234 steps and global batch as A;
- C: 1 epoch of 39 steps (A's images): with B, the steady step, ``(B - C) / 195``.

A has 5 boundaries more than B (each: the epoch's end, its checkpoint, its evaluation, the
next epoch's start), so a boundary costs ``(A - B) / 5``, reported in steady steps (goal: at
most 3). Rounds are interleaved (A, B, C in a rotating order), medians reported; and since
the machine's speed drifts between rounds more than a boundary costs, also the median of each
round's own ``(A - B) / 5``, its A and B having run in the same round. Compiling the run's graphs
(about half of C, and the same graphs in A, B and C) is most of that drift, so every figure
is given twice: from wall seconds, and from wall seconds less the compilation each run
reported (``compile_seconds`` in its ``summary.json``).

The third estimator is measured inside A, where neither start-up, compilation nor the drift
between processes reaches it: every run logs a progress line each 13th step, and the bench
notes when each line arrives. A window between two lines holds 13 steps; the window after
each epoch's last step also holds a boundary. A boundary is the median of those windows less
the median of A's windows without one, divided by a steady step (that median / 13); the
first epoch and the first boundary (the evaluation's compilation) are left out, so 4
boundary windows meet 10 steady ones, all from the same process. With ``--before CHECKOUT``
(a worktree of an older commit sharing this venv) each round runs the same three there too,
so the figures are paired.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import photos  # noqa: E402
from trainer.data.make_shards import convert  # noqa: E402

RUNS = {"A": ("small", 6), "B": ("large", 1), "C": ("small", 1)}  # name: (shard set, epochs)
TRAIN_PER_CLASS = {"small": 39, "large": 234}  # 8 classes, batch 8: 39 and 234 steps
STEPS = 234


def shard_set(folder: Path, per_class: int) -> Path:
    tree = photos.build(folder / "tree", train=per_class, val=1)
    convert(str(tree), str(folder / "shards"), shard_size=64, workers=2)
    return folder / "shards"


LOG_STEPS = 13  # three progress lines an epoch of 39 steps
PROGRESS_LINE = re.compile(r"\bstep \d+/\d+\b")


class Run(NamedTuple):
    """One whole trainer process: its wall seconds, those less the compilation it reported in
    its ``summary.json``, the graphs it compiled, and the seconds between its consecutive
    progress lines (one every ``LOG_STEPS`` steps) as they reached the bench."""

    seconds: float
    less_compilation: float
    graphs: int
    windows: List[float]


def run_once(checkout: Path, data: Path, epochs: int, scratch: Path) -> Run:
    """Train once with ``checkout``'s trainer in a fresh job dir."""
    job = Path(tempfile.mkdtemp(dir=str(scratch)))
    command = [sys.executable, "-m", "trainer.imagenet", "--data_dir=" + str(data),
               "--model=resnet18", "--image_size=16", "--batch_size=8", "--num_workers=2",
               "--num_epochs={}".format(epochs), "--warmup_epochs=0",
               "--log_steps={}".format(LOG_STEPS), "--job_dir=" + str(job)]
    environ = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=str(checkout),
                   PYTHONUNBUFFERED="1")
    started = time.perf_counter()
    arrivals, output = [], []
    with subprocess.Popen(command, cwd=str(checkout), env=environ, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as process:
        for line in process.stdout:
            if PROGRESS_LINE.search(line):
                arrivals.append(time.perf_counter())
            output.append(line)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit("{} failed: {}".format(" ".join(command), "".join(output)[-2000:]))
    expected = epochs * TRAIN_PER_CLASS[data.parent.name] // LOG_STEPS
    if len(arrivals) != expected:
        raise SystemExit("{} logged {} progress lines, not {}".format(
            " ".join(command), len(arrivals), expected))
    summary = json.loads((job / "summary.json").read_text())
    windows = [later - earlier for earlier, later in zip(arrivals, arrivals[1:])]
    # Checkouts older than issue 31's item 3 report no compilation: nan, printed as such.
    return Run(seconds, seconds - summary.get("compile_seconds", float("nan")),
               summary.get("compile_count", -1), windows)


def in_process(a: Run) -> float:
    """A boundary in steady steps from A's windows alone (``windows[i]`` ends at step
    ``LOG_STEPS * (i + 2)``), leaving out the first epoch and the first boundary."""
    per_epoch = TRAIN_PER_CLASS["small"] // LOG_STEPS
    later = range(per_epoch, len(a.windows))  # after the first boundary's window
    crossing = [i for i in later if (i + 1) % per_epoch == 0]  # from an epoch's last step
    boundary_window = statistics.median(a.windows[i] for i in crossing)
    steady_window = statistics.median(a.windows[i] for i in later if i not in crossing)
    return (boundary_window - steady_window) / (steady_window / LOG_STEPS)


def figures(times: Dict[str, List[float]]) -> Dict[str, float]:
    """The boundary's cost from one kind of seconds per run (``times[run]``, one per round)."""
    median = {name: statistics.median(values) for name, values in times.items()}
    steady = (median["B"] - median["C"]) / (STEPS - 39)
    boundary = (median["A"] - median["B"]) / 5
    in_rounds = statistics.median((a - b) / 5 for a, b in zip(times["A"], times["B"]))
    return dict(median, steady_step=steady, boundary=boundary, boundary_steps=boundary / steady,
                round_boundary_steps=in_rounds / steady)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None,
                        help="an older checkout to pair with this one")
    args = parser.parse_args()
    checkouts = {"this": REPO}
    if args.before is not None:
        checkouts["before"] = args.before.resolve()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        data = {name: shard_set(folder / name, per_class)
                for name, per_class in TRAIN_PER_CLASS.items()}
        kinds = ("wall", "less compilation")
        times = {(label, kind): {name: [] for name in RUNS}
                 for label in checkouts for kind in kinds}
        inside = {label: [] for label in checkouts}
        order = list(RUNS)
        for round_number in range(args.rounds):
            runs: Dict[Tuple[str, str], Run] = {}
            for name in order[round_number % 3:] + order[:round_number % 3]:
                for label, checkout in checkouts.items():
                    shards, epochs = RUNS[name]
                    run = runs[label, name] = run_once(checkout, data[shards], epochs, folder)
                    times[label, "wall"][name].append(run.seconds)
                    times[label, "less compilation"][name].append(run.less_compilation)
                    print("round {} {} {}: {:.2f} s, {:.2f} s less compilation ({} graphs); "
                          "windows of {} steps {}".format(
                              round_number + 1, label, name, run.seconds, run.less_compilation,
                              run.graphs, LOG_STEPS, " ".join(
                                  "{:.2f}".format(window) for window in run.windows)),
                          flush=True)
            for label in checkouts:
                inside[label].append(in_process(runs[label, "A"]))
                print("round {} {}: inside the processes, a boundary costs {:.1f} steady steps"
                      .format(round_number + 1, label, inside[label][-1]), flush=True)
    for (label, kind), runs_by_name in times.items():
        result = figures(runs_by_name)
        print("{} ({}): A {A:.2f} s, B {B:.2f} s, C {C:.2f} s; steady step {steady_step:.3f} s; "
              "an epoch boundary costs {boundary:.2f} s = {boundary_steps:.1f} steady steps "
              "(goal <= 3); within rounds {round_boundary_steps:.1f}".format(
                  label, kind, **result))
    for label, values in inside.items():
        print("{} (inside the processes): an epoch boundary costs {:.1f} steady steps, median "
              "of {} rounds ({}; goal <= 3)".format(
                  label, statistics.median(values), len(values),
                  ", ".join("{:.1f}".format(value) for value in values)))


if __name__ == "__main__":
    main()
