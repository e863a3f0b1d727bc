"""The trainer process alone at a v6e host's rate: images/s and CPU per image of the trainer's
side of the input, fed by data workers that cost it nothing (run: make bench, or python
bench/trainer_ceiling.py [--batches 256,512,1024] [--images N] [--workers W] [--rounds N]
[--baseline-tree DIR]).

Issue 56's goal: 75,000 images/s per host at a per-host batch of 512 (an 8-chip v6e host).
The data workers are real (``trainer.data.stream``'s, forked by torch's DataLoader through
``trainer.data.loader``), on an ImageNet-shaped training split (1,281,167 examples in
make_shards' shards of 1,000, 224 px, mixing groups of ``MIXING_STEPS``), but they read and
decode nothing: each work unit's rows are left in the step ring as they are (its decode a
no-op), and only the notice that the unit is there goes to the trainer, as a real worker's
does. So everything the trainer process does per unit, per step and per image runs as in a
run: the DataLoader's hand-over of each notice, the stream's checks and hand-out of each
step as the ring's step buffer (``Stream._assembled``, ``StepRing.batch``), the lease and
its ``weakref.finalize`` releases that free each slot, and the epoch loop
(``loop.train_epoch``: its clock, its hooks, its end-of-epoch sync), with a step that does
nothing (it returns the loss total it was given), in two placements:

- ``host``: the stream's batches straight to the loop (no device: the trainer's side alone);
- ``device``: through ``xla.device_loader`` (torch_xla's ``MpDeviceLoader``, the compiled
  path's queue sizes) onto the XLA CPU device: the loader's two threads and its copy of each
  batch into a PJRT buffer. That copy stands for the host-to-device transfer, which a TPU
  does by DMA from the host's memory: the difference between the two rows is the loader and
  the copy, stated apart.

Measured from the end of the step ring's first round (the workers' start, each slot's first
mapping in this process and torch_xla's first transfer left out) to the epoch's end: wall
images/s, the trainer process's CPU (``getrusage``: user + system) per image and its minor
page faults per image, and what one core of it carries (1000 / ms per image). The workers'
CPU (reaped at ``close``) is printed beside it: what a no-op unit costs them, not decoding.

Each round runs every batch size and placement in one fresh process per checkout; with
``--baseline-tree DIR`` (a worktree of another commit sharing this venv, e.g. ``git worktree
add /work/wt-base 87494e0``) the rounds alternate this checkout and that one (ABBA), and the
medians over rounds are printed side by side. The process's torch pools are sized by
``trainer.host_threads``, as in the trainer.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
if "--child" not in sys.argv:  # a child imports the checkout its PYTHONPATH names
    sys.path.insert(0, str(REPO))

GOAL, GOAL_BATCH = 75000, 512  # issue 56: an 8-chip v6e host
SIZE = 224
TRAIN_EXAMPLES, VAL_EXAMPLES, SHARD_SIZE = 1281167, 50000, 1000  # ImageNet, make_shards' default
PLACEMENTS = ("host", "device")
# glibc >= 2.35: malloc's memory on transparent huge pages (madvise), read at the process's
# start; the device loader's copies then fault a page per 2 MB instead of per 4 KB.
HUGETLB = "glibc.malloc.hugetlb=1"


def shard_counts(examples: int) -> Tuple[int, ...]:
    """``examples`` in shards of ``SHARD_SIZE``, as make_shards cuts a split."""
    return tuple(min(SHARD_SIZE, examples - first) for first in range(0, examples, SHARD_SIZE))


class EmptyReader:
    """A shard reader that reads nothing: every example is (its key, no bytes, label 0), its
    image left in the ring as it is (``stream._decode_into`` is a no-op in ``measure``)."""

    class root:  # noqa: N801 (the reader's ``root``: only ``join`` is asked of it)
        @staticmethod
        def join(name: str) -> str:
            return name

    def read_run(self, pieces, stop) -> List[bytes]:
        return [b"" for _ in pieces]

    def unpacked(self, pieces, run) -> List[Tuple[str, bytes, int]]:
        return [("{}/{}".format(shard, example), b"", 0) for shard, first, end in pieces
                for example in range(first, end)]


def cpu_seconds(who: int) -> Tuple[float, int]:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime, usage.ru_minflt


def measure(batch: int, images: int, workers: int, placement: str) -> Dict[str, float]:
    """One epoch of ``images`` (after the ring's first round) through the trainer's side at
    per-host ``batch`` with ``workers`` no-op data workers, in this process."""
    import torch

    from trainer import xla  # the import point of torch_xla (trainer.startup)
    from trainer.batches import RunSchedule
    from trainer.data import epoch_order, plan, stream
    from trainer.loop import EpochHooks, LoopState, train_epoch

    stream._decode_into = lambda x, y, rows, examples, decode: []  # the workers inherit it
    train, val = shard_counts(TRAIN_EXAMPLES), shard_counts(VAL_EXAMPLES)
    # Left out: the ring's first round (each slot's pages are mapped in this process on their
    # first use, once a run), and with it the workers' start.
    warm = plan.ring_slots(epoch_order.MIXING_STEPS) * epoch_order.MIXING_STEPS
    steps = warm + max(1, images // batch)
    spec = stream.StreamSpec(
        stream.Split(EmptyReader(), epoch_order.ShardOrder(train, True),
                     epoch_order.Cut(TRAIN_EXAMPLES, batch), epoch_order.MIXING_STEPS),
        stream.Split(EmptyReader(), epoch_order.ShardOrder(val, False),
                     epoch_order.Cut(VAL_EXAMPLES, batch, padded=True)),
        host=0, seed=1, image_size=SIZE, workers=workers,
        schedule=RunSchedule(epochs=1, train_steps=steps, eval_steps=0))
    the_stream = stream.Stream(spec)
    device = xla.device()
    no_op = types.SimpleNamespace(  # the step: nothing traced, nothing run
        model=torch.nn.Module(), path=xla.COMPILED, device=device,
        train=lambda step, x, y, loss_total: loss_total)
    marks: List[Tuple[float, float, int]] = []

    def marked(batches: Iterator) -> Iterator:
        for number, batch_ in enumerate(batches):
            if number == warm:
                marks.append((time.perf_counter(),) + cpu_seconds(resource.RUSAGE_SELF))
            yield batch_

    batches = marked(the_stream.train(0, 0))
    if placement == "device":
        batches = xla.device_loader(batches, device, xla.COMPILED, step_path=xla.COMPILED)
    train_epoch(no_op, batches, LoopState(), EpochHooks())
    ended = (time.perf_counter(),) + cpu_seconds(resource.RUSAGE_SELF)
    the_stream.close()  # the workers reaped: their CPU is in RUSAGE_CHILDREN
    counted = (steps - warm) * batch
    trainer_cpu = ended[1] - marks[0][1]
    units = sum(1 for kind, _, unit in stream.work_units(spec, (stream.TRAIN, 0, 0))
                if kind == stream.TRAIN and unit[0] < steps)
    return {"images_per_s": counted / (ended[0] - marks[0][0]),
            "trainer_ms": 1000 * trainer_cpu / counted,
            "faults": (ended[2] - marks[0][2]) / counted,
            "units_per_step": units / steps, "copied": the_stream.copied,
            "drawn": steps * batch}


def child(batches: List[int], images: int, workers: int, placements: List[str]) -> None:
    """Every batch size and placement in this process; one JSON line of figures."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    from trainer import host_threads, xla  # noqa: F401 (xla first: the import point)
    from trainer.data.workers import host_cores

    host_threads.apply(host_threads.choose(host_cores()))
    import trainer

    figures = {}
    for batch, placement in itertools.product(batches, placements):
        before = cpu_seconds(resource.RUSAGE_CHILDREN)[0]
        result = measure(batch, images, workers, placement)
        result["workers_ms"] = 1000 * (cpu_seconds(resource.RUSAGE_CHILDREN)[0] - before
                                       ) / result["drawn"]
        figures["{} {}".format(batch, placement)] = result
    print(json.dumps({"trainer": trainer.__file__, "figures": figures}))


def run_child(tree: Path, env: Dict[str, str], *options) -> Dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(options)],
                         check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=dict(os.environ, PYTHONPATH=str(tree), **env)).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["trainer"].startswith(str(tree)), (result["trainer"], tree)
    return result["figures"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="256,512,1024", help="per-host batches")
    parser.add_argument("--images", type=int, default=32768,
                        help="images measured per batch size and placement")
    parser.add_argument("--workers", type=int, default=16,
                        help="no-op data workers (a step is cut into at most this many units)")
    parser.add_argument("--placements", default=",".join(PLACEMENTS),
                        help="host (the stream to the loop), device (through the device "
                             "loader onto the XLA CPU device)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline-tree", type=Path,
                        help="another checkout to pair with, whole processes alternating")
    parser.add_argument("--glibc-hugetlb", action="store_true",
                        help="also this checkout with GLIBC_TUNABLES={} (glibc's malloc on "
                             "transparent huge pages)".format(HUGETLB))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*json.loads(args.child))
        return
    batches = [int(b) for b in args.batches.split(",")]
    placements = args.placements.split(",")
    # Each variant: (checkout, environment added to its processes).
    trees: Dict[str, Tuple[Path, Dict[str, str]]] = {"now": (REPO, {})}
    if args.baseline_tree:
        trees["baseline"] = (args.baseline_tree.resolve(), {})
    if args.glibc_hugetlb:
        trees["hugetlb"] = (REPO, {"GLIBC_TUNABLES": HUGETLB})
    runs: Dict[str, List[Dict]] = {name: [] for name in trees}
    for round_number in range(args.rounds):
        names = list(trees) if round_number % 2 == 0 else list(trees)[::-1]
        for name in names:
            runs[name].append(run_child(trees[name][0], trees[name][1], batches, args.images,
                                        args.workers, placements))
    print("the trainer process alone: {} images per measurement at {} px, {} no-op data "
          "workers, a no-op step; medians of {} round{} ({})".format(
              args.images, SIZE, args.workers, args.rounds, "" if args.rounds == 1 else "s",
              ", ".join("{} {}{}".format(name, tree, "".join(
                  " {}={}".format(*item) for item in env.items()))
                        for name, (tree, env) in trees.items())))
    print("{:8s} {:>5s} {:7s} {:>10s} {:>10s} {:>13s} {:>9s} {:>8s} {:>10s}".format(
        "tree", "batch", "place", "images/s", "ms CPU/img", "1 core: img/s", "faults/img",
        "units/st", "workers ms"))
    carried: Dict[Tuple[str, str], float] = {}
    for batch, placement, name in itertools.product(batches, placements, trees):
        key = "{} {}".format(batch, placement)
        rate, cpu, faults, units, workers_ms = (
            statistics.median(figures[key][field] for figures in runs[name])
            for field in ("images_per_s", "trainer_ms", "faults", "units_per_step",
                          "workers_ms"))
        print("{:8s} {:5d} {:7s} {:10,.0f} {:10.4f} {:13,.0f} {:9.2f} {:8.1f} {:10.4f}".format(
            name, batch, placement, rate, cpu, 1000 / cpu, faults, units, workers_ms))
        if batch == GOAL_BATCH:
            carried[name, placement] = 1000 / cpu
    for name, placement in carried:
        print(verdict(name, placement, carried[name, placement]))


def verdict(name: str, placement: str, per_core: float) -> str:
    """One line: what one core of the trainer process carries at ``GOAL_BATCH`` against
    ``GOAL``, and the cores the goal takes where one is not enough."""
    met = per_core >= GOAL
    return "verdict {} {} at batch {}: one core of the trainer process carries {:,.0f} " \
           "images/s against {:,}: {}".format(
               name, placement, GOAL_BATCH, per_core, GOAL, "met" if met else
               "not met; the goal needs {:.1f} cores of it".format(GOAL / per_core))

if __name__ == "__main__":
    main()
