"""trainer.lm's speed and FSDP's cost, as whole trainer processes on the XLA CPU device (run:
python bench/lm.py [--runs N] [--steps N]).

- One device: the ``tiny`` and ``small`` presets, 128 tokens a window, 8 windows a step, fake
  tokens: steady tokens/s and the model FLOPs of a token (no MFU: the CPU device's peak is
  not known); start-up: from the process's start to its first step's log line (imports, the
  data, the model, the first step's compile), ``tiny``, median of ``--runs``.
- Four devices (``CPU_NUM_DEVICES=4``, one SPMD program), the ``small`` preset, 4 windows a
  device, interleaved ``--runs`` times: ``--sharding=dp``, ``--sharding=fsdp``, ``fsdp`` with
  ``--remat=block``, and the plain torch_xla FSDPv2 loop of ``bench/fsdpv2_loop.py`` on the
  same decoder: steady tokens/s per device (medians and their ratios) and the model state the
  first device holds at the end (``summary.json``'s ``model_state_bytes``: parameters,
  AdamW's moments, measured). Four CPU devices share this machine's cores, so fsdp/dp is the
  collectives' and partitioning's host cost, not a TPU interconnect's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_paths import trainer_run  # noqa: E402

ARMS = ("dp", "fsdp", "fsdp+remat", "fsdpv2 loop")
LOOP = Path(__file__).resolve().parent / "fsdpv2_loop.py"


def four_devices(arm: str, steps: int) -> Dict[str, Any]:
    """One run of ``arm`` on 4 devices: {tokens_per_second_per_device, held (bytes or
    None)}."""
    if arm == "fsdpv2 loop":
        done = subprocess.run([sys.executable, str(LOOP), "--preset=small", "--seq_len=128",
                               "--batch_size=4", "--steps={}".format(steps)],
                              env=dict(os.environ, PJRT_DEVICE="CPU"), capture_output=True,
                              text=True, check=True)
        return dict(json.loads(done.stdout.splitlines()[-1]), held=None)
    sharding, _, remat = arm.partition("+")
    summary = trainer_run("trainer.lm", COMMON + [
        "--max_steps={}".format(steps), "--preset=small", "--batch_size=4",
        "--sharding=" + sharding, "--remat=" + ("block" if remat else "none")])
    assert summary["devices"] == 4 and summary["sharding"] == sharding
    return dict(summary, held=summary["model_state_bytes"]["per_device_measured"])


COMMON = ["--fake_data", "--seq_len=128", "--num_epochs=1", "--log_steps=0"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    os.environ.pop("CPU_NUM_DEVICES", None)
    print("one device, 128 tokens a window, 8 a step, {} steps:".format(args.steps))
    for preset in ("tiny", "small"):
        summary = trainer_run("trainer.lm", COMMON + [
            "--max_steps={}".format(args.steps), "--preset=" + preset, "--batch_size=8"])
        print("  {:6s} {:8.0f} tokens/s  {:.3g} model FLOPs a token".format(
            preset, summary["tokens_per_second_per_device"], summary["model_flops_per_token"]))
    starts = [trainer_run("trainer.lm", COMMON[:-1] + [
        "--log_steps=1", "--max_steps=2", "--preset=tiny", "--batch_size=8"])["first_step"]
        for _ in range(args.runs)]
    print("  start-up to the first step's line (tiny): {} s (median {:.2f})".format(
        ", ".join("{:.2f}".format(start) for start in starts), statistics.median(starts)))
    os.environ["CPU_NUM_DEVICES"] = "4"
    rates: Dict[str, List[float]] = {arm: [] for arm in ARMS}
    held: Dict[str, Any] = {}
    for run in range(args.runs):
        for arm in (ARMS if run % 2 == 0 else ARMS[::-1]):
            found = four_devices(arm, args.steps)
            rates[arm].append(found["tokens_per_second_per_device"])
            held[arm] = found["held"]
    print("four devices, the small preset, 4 windows a device, {} runs each:".format(args.runs))
    median = {arm: statistics.median(rates[arm]) for arm in ARMS}
    for arm in ARMS:
        print("  {:12s} {} tokens/s per device (median {:.0f}){}".format(
            arm, ", ".join("{:.0f}".format(rate) for rate in rates[arm]), median[arm],
            "; model state on a device {:.1f} MB".format(held[arm] / 1e6)
            if held[arm] is not None else ""))
    print("  fsdp / dp: tokens/s {:.3f}x, state on a device {:.3f}x".format(
        median["fsdp"] / median["dp"], held["fsdp"] / held["dp"]))
    print("  fsdp / the fsdpv2 loop: tokens/s {:.3f}x".format(
        median["fsdp"] / median["fsdpv2 loop"]))
    print("  fsdp+remat / fsdp: tokens/s {:.3f}x".format(median["fsdp+remat"] / median["fsdp"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
