"""Gradient accumulation's cost per example, as whole trainer processes on the XLA CPU device
(run: python bench/grad_accum.py [--runs N] [--steps N] [--step_mode compiled|lazy]).

ResNet-18 at 64 px, fake data, one device: a global batch of 128 in one step (``--batch_size=128``)
against the same 128 as ``--grad_accum_steps=4`` micro-batches of 32, the two processes
alternating ``--runs`` times. Printed: each run's steady examples per second (after the
first steps' compilation), the medians, and accumulated/whole as the time per example: how
much four forward and backward passes of 32 cost against one of 128 (issue 54 asks within
1.3x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_paths import trainer_run  # noqa: E402

VARIANTS = {"whole": ["--batch_size=128"],
            "accumulated": ["--batch_size=32", "--grad_accum_steps=4"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--step_mode", default="compiled", choices=("compiled", "lazy"))
    args = parser.parse_args()
    common = ["--fake_data", "--model=resnet18", "--image_size=64", "--num_epochs=1",
              "--num_steps={}".format(args.steps), "--log_steps=0", "--num_workers=0",
              "--warmup_epochs=0", "--devices=1", "--step_mode=" + args.step_mode]
    rates = {name: [] for name in VARIANTS}
    for run in range(args.runs):
        order = list(VARIANTS) if run % 2 == 0 else list(VARIANTS)[::-1]
        for name in order:
            summary = trainer_run("trainer.imagenet", common + VARIANTS[name])
            assert summary["global_batch"] == 128, summary["global_batch"]
            rates[name].append(summary["steady_examples_per_second"])
    print("ResNet-18, 64 px, global batch 128, {} steps, {} path, {} runs each".format(
        args.steps, args.step_mode, args.runs))
    for name, found in rates.items():
        print("  {:11s} {} examples/s (median {:.1f})".format(
            name, ", ".join("{:.1f}".format(rate) for rate in found), statistics.median(found)))
    print("  accumulated / whole, time per example: {:.3f}x".format(
        statistics.median(rates["whole"]) / statistics.median(rates["accumulated"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
