"""What SPMD over several devices costs, on the XLA CPU device (run: make bench, or
python bench/spmd.py [--runs N] [--reference-examples DIR]).

On this 2-core machine 1, 2 and 4 CPU devices (``CPU_NUM_DEVICES``) share the same cores, so
there is no speed-up to measure; what is measured is the overhead the partitioned program
adds. For MNIST and ResNet-18 at 64 px, fake data, the same global batch on every device
count, whole trainer processes, the median of ``--runs`` runs with the device counts
interleaved:

- steady examples/s, as a ratio to 1 device (goal >= 0.9);
- device executions per training step (goal 1) and graphs compiled;
- host milliseconds per step of the input path alone: taking a global batch from the data
  source and copying it to the devices, split over them (goal: not growing with the devices).

With ``--reference-examples DIR`` (pytorch/xla's ``examples/`` folder of the installed
version; for example ``git show v2.9.0:examples/...`` of a pytorch/xla checkout): pytorch/xla's
SPMD data-parallel example against our ImageNet trainer, both ResNet-18 at 64 px on 4 devices
with the same global batch and number of steps, whole-process wall time as a ratio (goal:
ours no slower). The example's model, image size, batch and steps are hard-coded
(ResNet-50, 224 px, 300 steps); this script sets them to the same figures as ours, and
nothing else. Ours also evaluates (as many steps as it trains).
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
DEVICE_COUNTS = (1, 2, 4)
# name: (trainer module, flags without --batch_size, global batch, training steps, the fake
# data's evaluation examples: evaluation runs min(steps, examples // batch) steps)
WORKLOADS = {
    "MNIST": ("trainer.mnist", ["--fake_data"], 256, 60, 10000),
    "ResNet-18 64px": ("trainer.imagenet", ["--fake_data", "--model=resnet18",
                                            "--image_size=64", "--warmup_epochs=0"], 32, 20, 50000),
}


def run_trainer(module: str, flags: List[str], devices: int) -> Dict[str, float]:
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    with tempfile.TemporaryDirectory(prefix="bench-spmd-") as job:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", module, "--job_dir=" + job,
                                 "--log_steps=0", "--num_epochs=1"] + flags, cwd=str(REPO),
                                env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit("{} failed: {}".format(module, result.stderr[-2000:]))
        with open(os.path.join(job, "summary.json")) as handle:
            return dict(json.load(handle), wall=wall)


def input_ms_per_step(module: str, flags: List[str], devices: int, steps: int) -> float:
    """Host ms per step of the input path alone, measured in a process of its own."""
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    result = subprocess.run([sys.executable, __file__, "--input-worker", module,
                             str(steps)] + flags, cwd=str(REPO), env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("input worker failed: {}".format(result.stderr[-2000:]))
    return float(result.stdout.split()[-1])


def input_worker(module: str, steps: int, flags: List[str]) -> None:
    """Print ms per step to take ``steps`` global batches from the trainer's data source and
    copy each to the devices as the trainer's loader does (split over them)."""
    import importlib

    sys.path.insert(0, str(REPO))
    from trainer import devices, xla
    from trainer.cli import parse_config

    trainer = importlib.import_module(module)
    trainer.define_flags()
    config = parse_config([module] + flags)
    topology = devices.detect(config.devices)
    data = trainer.build_data(config, topology)
    sharding = devices.batch_sharding(topology)
    dev = xla.device()

    def copy(batch):
        if sharding is None:
            return [tensor.to(dev) for tensor in batch]
        return [sharding.to_device(tensor, dev) for tensor in batch]

    batches = data.train_batches(0)
    copy(next(batches))
    xla.wait()
    start = time.perf_counter()
    for _ in range(steps):
        copy(next(batches))
    xla.wait()
    print(1000 * (time.perf_counter() - start) / steps)


def reference_wall(examples: Path, global_batch: int, steps: int, devices: int) -> float:
    """Whole-process wall time of pytorch/xla's SPMD data-parallel example, set to ResNet-18,
    64 px, ``global_batch`` and ``steps``."""
    driver = (
        "import sys, runpy, torchvision; sys.path.insert(0, {base!r}); "
        "import train_resnet_base as base; "
        "torchvision.models.resnet50 = torchvision.models.resnet18; "
        "original = base.TrainResNetBase.__init__\n"
        "def init(self):\n"
        "    original(self); self.img_dim = 64; self.batch_size = {per_device}; "
        "self.num_steps = {steps}\n"
        "base.TrainResNetBase.__init__ = init\n"
        "sys.argv = [{script!r}]; runpy.run_path({script!r}, run_name='__main__')").format(
        base=str(examples), per_device=global_batch // devices, steps=steps,
        script=str(examples / "data_parallel" / "train_resnet_spmd_data_parallel.py"))
    env = dict(os.environ, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise SystemExit("the reference example failed: {}".format(result.stderr[-2000:]))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reference-examples", type=Path)
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS),
                        help="run only these (repeatable; default: all)")
    parser.add_argument("--input-worker", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.input_worker:
        module, steps, *flags = args.input_worker
        input_worker(module, int(steps), flags)
        return
    for name, (module, flags, global_batch, steps, eval_examples) in WORKLOADS.items():
        if args.workload and name not in args.workload:
            continue
        runs: Dict[int, List[Dict[str, float]]] = {count: [] for count in DEVICE_COUNTS}
        for _ in range(args.runs):
            for count in DEVICE_COUNTS:
                runs[count].append(run_trainer(module, flags + [
                    "--batch_size={}".format(global_batch // count),
                    "--num_steps={}".format(steps)], count))
        base = statistics.median(run["steady_examples_per_second"] for run in runs[1])
        print("{}, global batch {}, {} steps:".format(name, global_batch, steps))
        for count in DEVICE_COUNTS:
            rate = statistics.median(run["steady_examples_per_second"] for run in runs[count])
            last = runs[count][-1]
            # The epoch's executions: its training steps and its evaluation steps.
            eval_steps = min(steps, eval_examples // global_batch)
            per_step = last["executions_per_epoch"][0] / (steps + eval_steps)
            host = input_ms_per_step(module, flags + [
                "--batch_size={}".format(global_batch // count)], count, steps)
            print("  {} device{}: {:8.1f} examples/s  ratio {:.2f}  executions/step {:.2f}  "
                  "graphs {}  input host ms/step {:.2f}".format(
                      count, " " if count == 1 else "s", rate, rate / base, per_step,
                      last["compile_count"], host))
    if args.reference_examples:
        global_batch, steps, count = 32, 20, 4
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(run_trainer("trainer.imagenet", WORKLOADS["ResNet-18 64px"][1] + [
                "--batch_size={}".format(global_batch // count),
                "--num_steps={}".format(steps)], count)["wall"])
            theirs.append(reference_wall(args.reference_examples, global_batch, steps, count))
        print("pytorch/xla SPMD example vs ours, ResNet-18 64 px, {} devices, global batch {}, "
              "{} steps: wall {:.1f} s vs {:.1f} s, ours/theirs {:.2f}".format(
                  count, global_batch, steps, statistics.median(theirs),
                  statistics.median(ours), statistics.median(ours) / statistics.median(theirs)))


if __name__ == "__main__":
    main()
