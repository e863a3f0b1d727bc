"""Where a run's time goes, as whole trainer processes on the XLA CPU device (run: make bench,
or python bench/run_timing.py [--runs N] [--against CHECKOUT]).

Prints ``summary.json``'s ``input_wait`` (the share of training time the loop waited for
the next batch) and its seconds in training, evaluation, checkpoints and compilation, for:

- MNIST on ``--fake_data`` (batch 8, 1,500 steps) and ResNet-18 on ``--fake_data`` (16 px,
  batch 4): the batch is always ready, so the wait should be near 0;
- ResNet-18 starved on purpose: 16 px, batch 4, one data worker decoding JPEGs of noise of
  3,000 x 2,250 px (about 60 ms each here; ``tests/photos.py build_noise``): the wait should
  be high, and the run should log ``input-bound``.

With ``--against CHECKOUT`` (e.g. /work/main), the step loop's speed against that checkout's
trainer, paired: MNIST on fake data at batch 8 (the host-bound case, where per-step host
work shows most), 1,500 steps, on both step paths, the two checkouts interleaved ``--runs``
times; medians of steady examples/s and of the process's wall time, and this/that as ratios.
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
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

MNIST_HOST_BOUND = ["--fake_data", "--batch_size=8", "--num_epochs=1", "--num_steps=1500",
                    "--log_steps=100"]
RESNET = ["--model=resnet18", "--image_size=16", "--batch_size=4", "--warmup_epochs=0",
          "--log_steps=2"]


def run(checkout: Path, module: str, args: List[str]) -> Dict[str, object]:
    """One trainer process of ``checkout``: its summary, wall time and log."""
    env = dict(os.environ, PJRT_DEVICE="CPU")
    with tempfile.TemporaryDirectory(prefix="bench-timing-") as job:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", module, "--job_dir=" + job] + args,
                                cwd=str(checkout), env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit("{} {} failed: {}".format(module, " ".join(args),
                                                       result.stderr[-2000:]))
        with open(os.path.join(job, "summary.json")) as handle:
            summary = json.load(handle)
    return dict(summary, wall=wall, log=result.stdout)


def timing_line(name: str, summary: Dict[str, object]) -> str:
    return ("{:44s} input_wait {:5.1%}  training {:6.1f} s  evaluation {:5.1f} s  "
            "checkpoints {:4.2f} s  compiling {:5.1f} s  input-bound logged: {}".format(
                name, summary["input_wait"], summary["training_seconds"],
                summary["evaluation_seconds"], summary["checkpoint_seconds"],
                summary["compile_seconds"], "yes" if "input-bound" in summary["log"] else "no"))


def input_wait(runs: int) -> None:
    import photos
    from trainer.data.make_shards import convert

    with tempfile.TemporaryDirectory(prefix="bench-noise-") as folder:
        images, shards = Path(folder) / "images", Path(folder) / "shards"
        photos.build_noise(images)
        convert(str(images), str(shards), shard_size=8, workers=1)
        cases = [
            ("MNIST, fake data, batch 8, 1,500 steps", "trainer.mnist", MNIST_HOST_BOUND),
            ("ResNet-18, fake data, 16 px, batch 4", "trainer.imagenet",
             RESNET + ["--fake_data", "--num_epochs=1", "--num_steps=12"]),
            ("ResNet-18 starved: 1 worker, 3,000 px JPEGs", "trainer.imagenet",
             RESNET + ["--data_dir=" + str(shards), "--num_workers=1", "--num_epochs=3"]),
        ]
        print("input wait ({} run(s) each, the median run by input_wait):".format(runs))
        for name, module, args in cases:
            results = sorted((run(REPO, module, args) for _ in range(runs)),
                             key=lambda summary: summary["input_wait"])
            print("  " + timing_line(name, results[len(results) // 2]))


def step_loop(against: Path, runs: int, paths: List[str]) -> None:
    print("step loop, this checkout / {} (MNIST, fake data, batch 8, 1,500 steps; median of "
          "{} interleaved runs each):".format(against, runs))
    for path in paths:
        args = MNIST_HOST_BOUND + ["--step_mode=" + path]
        rates: Dict[str, List[float]] = {"this": [], "that": []}
        walls: Dict[str, List[float]] = {"this": [], "that": []}
        for _ in range(runs):
            for name, checkout in (("this", REPO), ("that", against)):
                summary = run(checkout, "trainer.mnist", args)
                rates[name].append(summary["steady_examples_per_second"])
                walls[name].append(summary["wall"])
        rate = {name: statistics.median(values) for name, values in rates.items()}
        wall = {name: statistics.median(values) for name, values in walls.items()}
        print("  {:8s} steady examples/s {:7.1f} vs {:7.1f} (ratio {:.3f}); wall {:5.1f} s vs "
              "{:5.1f} s (ratio {:.3f})".format(path, rate["this"], rate["that"],
                                               rate["this"] / rate["that"], wall["this"],
                                               wall["that"], wall["this"] / wall["that"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout (with its .venv's packages importable) to "
                             "compare the step loop's speed with")
    parser.add_argument("--paths", default="compiled,lazy",
                        help="the step paths to compare (--against)")
    parser.add_argument("--skip_input_wait", action="store_true")
    args = parser.parse_args()
    if not args.skip_input_wait:
        input_wait(args.runs)
    if args.against is not None:
        step_loop(args.against, args.runs, args.paths.split(","))
    return 0


if __name__ == "__main__":
    sys.exit(main())
