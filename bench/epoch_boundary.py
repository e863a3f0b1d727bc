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
reported (``compile_seconds`` in its ``summary.json``). With
``--before CHECKOUT`` (a worktree of an older commit sharing this venv) each round runs the
same three there too, so the figures are paired.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

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


def run_seconds(checkout: Path, data: Path, epochs: int,
                scratch: Path) -> Tuple[float, float, int]:
    """Wall seconds of one whole trainer process from ``checkout`` (fresh job dir), those
    seconds less the compilation the run reported in its ``summary.json``, and the number of
    graphs it compiled."""
    job = Path(tempfile.mkdtemp(dir=str(scratch)))
    command = [sys.executable, "-m", "trainer.imagenet", "--data_dir=" + str(data),
               "--model=resnet18", "--image_size=16", "--batch_size=8", "--num_workers=2",
               "--num_epochs={}".format(epochs), "--warmup_epochs=0", "--log_steps=0",
               "--job_dir=" + str(job)]
    environ = dict(os.environ, PJRT_DEVICE="CPU", PYTHONPATH=str(checkout))
    started = time.perf_counter()
    result = subprocess.run(command, cwd=str(checkout), env=environ, capture_output=True,
                            text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit("{} failed: {}".format(" ".join(command), result.stderr[-2000:]))
    summary = json.loads((job / "summary.json").read_text())
    return seconds, seconds - summary["compile_seconds"], summary["compile_count"]


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
        order = list(RUNS)
        for round_number in range(args.rounds):
            for name in order[round_number % 3:] + order[:round_number % 3]:
                for label, checkout in checkouts.items():
                    shards, epochs = RUNS[name]
                    result = run_seconds(checkout, data[shards], epochs, folder)
                    for kind, value in zip(kinds, result):
                        times[label, kind][name].append(value)
                    print("round {} {} {}: {:.2f} s, {:.2f} s less compilation ({} graphs)"
                          .format(round_number + 1, label, name, *result), flush=True)
    for (label, kind), runs in times.items():
        result = figures(runs)
        print("{} ({}): A {A:.2f} s, B {B:.2f} s, C {C:.2f} s; steady step {steady_step:.3f} s; "
              "an epoch boundary costs {boundary:.2f} s = {boundary_steps:.1f} steady steps "
              "(goal <= 3); within rounds {round_boundary_steps:.1f}".format(
                  label, kind, **result))

if __name__ == "__main__":
    main()
