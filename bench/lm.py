"""trainer.lm's speed and FSDP's cost, as whole trainer processes on the XLA CPU device (run:
python bench/lm.py [--runs N] [--steps N]).

- One device: the ``tiny`` and ``small`` presets, 128 tokens a window, 8 windows a step, fake
  tokens: steady tokens/s and the model FLOPs of a token (no MFU: the CPU device's peak is
  not known).
- Four devices (``CPU_NUM_DEVICES=4``, one SPMD program), the ``small`` preset, 4 windows a
  device: ``--sharding=dp`` against ``--sharding=fsdp``, alternating ``--runs`` times: steady
  tokens/s per device (medians, and fsdp/dp) and the model state the first device holds at
  the end (``summary.json``'s ``model_state_bytes``: parameters, AdamW's moments, measured).
  Four CPU devices share this machine's cores, so the ratio is of the collectives' and
  partitioning's host cost, not of a TPU's interconnect.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_paths import trainer_run  # noqa: E402

SHARDINGS = ("dp", "fsdp")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    common = ["--fake_data", "--seq_len=128", "--num_epochs=1", "--log_steps=0",
              "--max_steps={}".format(args.steps)]
    os.environ.pop("CPU_NUM_DEVICES", None)
    print("one device, 128 tokens a window, 8 a step, {} steps:".format(args.steps))
    for preset in ("tiny", "small"):
        summary = trainer_run("trainer.lm", common + ["--preset=" + preset, "--batch_size=8"])
        print("  {:6s} {:8.0f} tokens/s  {:.3g} model FLOPs a token".format(
            preset, summary["tokens_per_second_per_device"], summary["model_flops_per_token"]))
    os.environ["CPU_NUM_DEVICES"] = "4"
    rates = {sharding: [] for sharding in SHARDINGS}
    held = {}
    for run in range(args.runs):
        for sharding in (SHARDINGS if run % 2 == 0 else SHARDINGS[::-1]):
            summary = trainer_run("trainer.lm", common + [
                "--preset=small", "--batch_size=4", "--sharding=" + sharding])
            assert summary["devices"] == 4 and summary["sharding"] == sharding
            rates[sharding].append(summary["tokens_per_second_per_device"])
            held[sharding] = summary["model_state_bytes"]["per_device_measured"]
    print("four devices, the small preset, 4 windows a device, {} runs each:".format(args.runs))
    for sharding in SHARDINGS:
        print("  {:4s} {} tokens/s per device (median {:.0f}); model state on a device "
              "{:.1f} MB".format(sharding, ", ".join("{:.0f}".format(rate) for rate in
                                                   rates[sharding]),
                                 statistics.median(rates[sharding]), held[sharding] / 1e6))
    print("  fsdp / dp: tokens/s {:.3f}x, state on a device {:.3f}x".format(
        statistics.median(rates["fsdp"]) / statistics.median(rates["dp"]),
        held["fsdp"] / held["dp"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
