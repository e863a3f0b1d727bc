"""Lazy vs compiled steps, and cold vs warm compile cache, as whole trainer processes on the XLA
CPU device (run: make bench, or python bench/step_paths.py [--runs N]).

Prints, for each figure, the median of ``--runs`` runs per variant, the variants interleaved
(lazy, compiled, lazy, ...) so that drifts of this 2-core machine hit both alike:

- host-bound: MNIST, fake data, batch 8, 1,500 training steps (evaluation capped the same):
  wall time of the process, training steps/s, start-up (process start to training: imports,
  model), the first steps' tracing and compilation, the exit (the last log line to the end of
  the process), and compiled/lazy as ratios;
- device-bound: MNIST, fake data, batch 128, one epoch: the same figures;
- graphs compiled and device executions per epoch of both paths;
- restart: ResNet-18, 224 px, batch 8, 30 steps, through ``--compile_cache``: wall time and
  time to the first step (start of the process to the first step's log line) with an empty
  cache and with the cache the first run left, and warm/cold as ratios.
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
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
PATHS = ("lazy", "compiled")


def trainer_run(module: str, args: List[str]) -> Dict[str, float]:
    """One trainer process: its summary, wall time, time to the first step's log line and
    from the last log line ("done: ...") to the end of the process."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    with tempfile.TemporaryDirectory(prefix="bench-steps-") as job:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", module, "--job_dir=" + job] + args,
                                   cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        first_step = done = None
        for line in process.stdout:
            if first_step is None and " step 1/" in line:
                first_step = time.perf_counter() - start
            if " done: " in line:
                done = time.perf_counter() - start
        if process.wait() != 0:
            raise SystemExit("{} {} failed".format(module, " ".join(args)))
        wall = time.perf_counter() - start
        with open(os.path.join(job, "summary.json")) as handle:
            summary = json.load(handle)
    return dict(summary, wall=wall, first_step=first_step or float("nan"),
                exit=wall - done if done is not None else float("nan"))


def batch_of(args: List[str]) -> int:
    return int(next(a for a in args if a.startswith("--batch_size=")).split("=")[1])


def compile_seconds(summary: dict, batch: int) -> float:
    """Training time beyond what the steady rate accounts for: the first steps' capture and
    compilation."""
    examples = summary["global_step"] * batch
    return (examples / summary["examples_per_second_with_compilation"]
            - examples / summary["steady_examples_per_second"])


def compare_paths(title: str, args: List[str], runs: int) -> Dict[str, List[dict]]:
    results: Dict[str, List[dict]] = {path: [] for path in PATHS}
    for _ in range(runs):
        for path in PATHS:
            results[path].append(trainer_run("trainer.mnist", args + ["--step_mode=" + path]))
    print(title)
    medians = {}
    for path in PATHS:
        runs_of_path = results[path]
        wall = statistics.median(r["wall"] for r in runs_of_path)
        steps = statistics.median(r["steady_examples_per_second"] / batch_of(args)
                                  for r in runs_of_path)
        medians[path] = (wall, steps)
        print("  {:9s} wall {:6.2f} s   steady {:7.1f} steps/s   start-up {:5.2f} s   "
              "compiling the first steps {:5.2f} s   exit {:4.2f} s".format(
                  path, wall, steps, statistics.median(r["wall"] - r["wall_time_seconds"] -
                                                       r["exit"] for r in runs_of_path),
                  statistics.median(compile_seconds(r, batch_of(args))
                                    for r in runs_of_path),
                  statistics.median(r["exit"] for r in runs_of_path)))
    print("  compiled / lazy: whole process {:.2f}x as fast, steady steps/s {:.2f}x".format(
        medians["lazy"][0] / medians["compiled"][0], medians["compiled"][1] / medians["lazy"][1]))
    return results


def graph_counts(results: Dict[str, List[dict]]) -> None:
    print("Graphs compiled and device executions per epoch (host-bound run)")
    for path in PATHS:
        summary = results[path][0]
        print("  {:9s} graphs {:3d}   executions per epoch {}".format(
            path, summary["compile_count"], summary["executions_per_epoch"][-1]))


def restart(runs: int) -> None:
    args = ["--fake_data", "--model=resnet18", "--image_size=224", "--batch_size=8",
            "--num_epochs=1", "--num_steps=30", "--log_steps=1", "--num_workers=0",
            "--warmup_epochs=0"]
    cold, warm = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
            cold.append(trainer_run("trainer.imagenet", args + ["--compile_cache=" + cache]))
            warm.append(trainer_run("trainer.imagenet", args + ["--compile_cache=" + cache]))
    print("Restart: ResNet-18, 224 px, batch 8, 30 steps, --compile_cache")
    figures = {}
    for name, results in (("cold", cold), ("warm", warm)):
        wall = statistics.median(r["wall"] for r in results)
        first = statistics.median(r["first_step"] for r in results)
        cache = results[-1]["compile_cache"] or {}
        figures[name] = (wall, first)
        print("  {}  wall {:6.2f} s   to first step {:6.2f} s   entries at start {}, loaded {}"
              .format(name, wall, first, cache.get("entries_at_start"), cache.get("loaded")))
    print("  warm / cold: wall {:.2f}, time to first step {:.2f}".format(
        figures["warm"][0] / figures["cold"][0], figures["warm"][1] / figures["cold"][1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per variant (median)")
    parser.add_argument("--restart_runs", type=int, default=1)
    args = parser.parse_args()
    host = compare_paths("Host-bound: MNIST, fake data, batch 8, 1500 steps",
                         ["--fake_data", "--batch_size=8", "--num_epochs=1",
                          "--num_steps=1500", "--log_steps=0"], args.runs)
    compare_paths("Device-bound: MNIST, fake data, batch 128, one epoch",
                  ["--fake_data", "--batch_size=128", "--num_epochs=1", "--log_steps=0"],
                  args.runs)
    graph_counts(host)
    restart(args.restart_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
