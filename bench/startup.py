"""Trainer start-up on the XLA CPU device (run: make bench, or python bench/startup.py
[--runs N] [--trainer imagenet] [--baseline CHECKOUT]).

The one-device, host-bound MNIST run (fake data, batch 8) as a whole process, as the launcher
execs it, ``--runs`` times (default 5): seconds from process start to the trainer's first log
line and to the end of its first training step (the step's log line), the median and each
run. ``--trainer imagenet``: ResNet-50 on fake 64 px images, batch 2, instead (its start-up
builds and checks a torchvision model). ``--baseline CHECKOUT``: the same runs of another
checkout of the project (``git worktree add /tmp/base COMMIT``) interleaved with this tree's,
each figure's median for both and this tree's over the baseline's as a ratio: the paired
before/after of a change to start-up. Without a baseline, the same process once more under
``strace -f -c``: its mmap, munmap and total system calls (start-up, one training and one
evaluation step, a checkpoint; nearly all of them start-up), or why none were counted. A loop
that maps a frame chunk on every call shows as over 100,000 mmap calls (trainer/startup.py).

Then how fast each command answers from its flags alone (``--help``, an unknown flag, a value
the config refuses: ``FLAG_ANSWERS``), wall seconds from process start to exit, the median of
``--runs``, paired with the baseline where one is given; the goal is at most 1 s on an idle
2-core machine (the flags are checked before torch and torch_xla are imported).
About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import syscalls  # noqa: E402

FLAGS = ["--fake_data", "--batch_size=8", "--num_epochs=1", "--num_steps=1", "--log_steps=1"]
TRAINERS = {"mnist": FLAGS,
            "imagenet": FLAGS[:1] + ["--batch_size=2", "--image_size=64", "--model=resnet50",
                                     "--num_workers=0"] + FLAGS[2:]}
FIRST_STEP = "trainer: step 1/"  # the first step's log line: printed once it has finished
# (module, arguments, its exit code): commands that answer from their flags alone.
FLAG_ANSWERS = [
    ("trainer.imagenet", ["--help"], 0),
    ("trainer.mnist", ["--num_epochs=-1"], 64),
    ("trainer.imagenet", ["--no_such_flag"], 64),
    ("trainer.data.plan", ["--help"], 0),
    ("trainer.data.make_shards", ["--help"], 0),
]
FLAG_ANSWER_GOAL_S = 1.0


def trainer_argv(job_dir: str, trainer: str = "mnist") -> List[str]:
    return [sys.executable, "-m", "trainer." + trainer, "--job_dir=" + job_dir] + \
        TRAINERS[trainer]


def environ() -> dict:
    return dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")


def timed_start(trainer: str = "mnist", checkout: Path = REPO) -> Tuple[float, float]:
    """(seconds to the first log line, seconds to the end of the first step) of one run of
    ``checkout``'s trainer (``python -m`` from its folder imports its ``trainer``)."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as job:
        start = time.perf_counter()
        process = subprocess.Popen(trainer_argv(job, trainer), cwd=str(checkout),
                                   env=environ(), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        first_line = first_step = None
        for line in process.stdout:
            now = time.perf_counter() - start
            first_line = now if first_line is None else first_line
            if FIRST_STEP in line:
                first_step = now
        _, err = process.communicate()
        if process.returncode != 0 or first_step is None:
            raise SystemExit("trainer.{} in {} failed ({}): {}".format(
                trainer, checkout, process.returncode, err[-2000:]))
        return first_line, first_step


def timed_answer(module: str, args: List[str], code: int, checkout: Path = REPO) -> float:
    """Wall seconds of ``python -m module args`` in ``checkout``, start to exit."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", module] + args, cwd=str(checkout),
                            env=environ(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != code:
        raise SystemExit("{} {} in {} exited {}, not {}: {}".format(
            module, " ".join(args), checkout, result.returncode, code, result.stderr[-2000:]))
    return seconds


def print_flag_answers(checkouts: List[Path], runs: int) -> None:
    """Each ``FLAG_ANSWERS`` command's median wall time in each checkout, interleaved."""
    print("answers from the flags alone (wall s, median of {}; goal <= {:g} s)".format(
        runs, FLAG_ANSWER_GOAL_S))
    for module, args, code in FLAG_ANSWERS:
        times = {checkout: [] for checkout in checkouts}  # type: dict
        for number in range(runs):
            for checkout in (checkouts if number % 2 == 0 else checkouts[::-1]):
                times[checkout].append(timed_answer(module, args, code, checkout))
        medians = [statistics.median(times[checkout]) for checkout in checkouts]
        line = "  {:<45} {:.2f} s".format("{} {}".format(module, " ".join(args)), medians[0])
        if len(medians) > 1:
            line += " (baseline {:.2f} s: {:.2f}x)".format(medians[1], medians[0] / medians[1])
        print(line + ("" if medians[0] <= FLAG_ANSWER_GOAL_S else "  OVER THE GOAL"))


def counted_calls() -> str:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as job:
        try:
            result, counts = syscalls.count(trainer_argv(job), cwd=str(REPO), env=environ(),
                                            capture_output=True, text=True)
        except syscalls.StraceUnavailable as error:
            return "not counted: {}".format(error)
    if result.returncode != 0:
        raise SystemExit("trainer.mnist under strace failed: " + result.stderr[-2000:])
    return "mmap {}, munmap {}, total {}".format(counts.get("mmap", 0),
                                                 counts.get("munmap", 0), counts["total"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trainer", choices=sorted(TRAINERS), default="mnist")
    parser.add_argument("--baseline", type=Path, help="another checkout, run interleaved")
    args = parser.parse_args()
    checkouts = [REPO] + ([args.baseline.resolve()] if args.baseline else [])
    runs = {checkout: [] for checkout in checkouts}  # type: dict
    for number in range(args.runs):  # interleaved, alternating which goes first
        for checkout in (checkouts if number % 2 == 0 else checkouts[::-1]):
            runs[checkout].append(timed_start(args.trainer, checkout))
    print("{} start-up, 1 CPU device, fake data, {} (Python {}, {} runs{})".format(
        args.trainer, " ".join(TRAINERS[args.trainer][1:3]), sys.version.split()[0], args.runs,
        ", interleaved with {}".format(args.baseline) if args.baseline else ""))
    for label, column in (("first log line", 0), ("first training step", 1)):
        medians = []
        for checkout in checkouts:
            values = [run[column] for run in runs[checkout]]
            medians.append(statistics.median(values))
            print("  {:<38} {:.2f} s median ({}){}".format(
                "process start -> " + label, medians[-1],
                ", ".join("{:.2f}".format(v) for v in values),
                "" if checkout == REPO else " baseline"))
        if args.baseline:
            print("  {:<38} {:.3f}x the baseline's".format("", medians[0] / medians[1]))
    if not args.baseline:
        print("  {:<38} {}".format("system calls (strace -f -c)", counted_calls()))
    print_flag_answers(checkouts, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
