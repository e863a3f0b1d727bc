"""The trainer process's CPU against its data workers' (run: make bench, or python
bench/feed_cpu.py [--rounds N] [--batches 64,512] [--images-per-class N]).

Machine-size free: whatever the host, the trainer process's share of the CPU a training image
costs says how much of a host's cores it takes from the workers that decode. Two epochs and
their evaluations are drawn through the trainer's data source (``ShardSource``: the one
stream of the run, 2 data workers, 224 px) with nothing else in the process, on real
photographs (``tests/photos.py``, made here, about 400x330 px, in shards by ``make_shards``).
Each draw runs in a fresh process:

- ``default``: torch's own pools (an intra-op thread per core), as before the thread rule;
- ``rule``: the trainer's pools as ``trainer.host_threads`` sizes them.

With ``--before CHECKOUT`` (a worktree of an older commit sharing this venv) each round draws
the same two with that checkout's data layer too, so the figures are paired.

The trainer process's CPU (user + system, ``getrusage``) and its workers' (every worker the
stream started, reaped at ``close``) are divided by the training images drawn; the figure is
the ratio of the two (goal: at most 0.10). Rounds alternate the two settings (paired); the
median of each is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
if "--child" not in sys.argv:  # a child imports the checkout its PYTHONPATH names
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))

SETTINGS = ("default", "rule")
SIZE, WORKERS, EPOCHS = 224, 2, 2


def shards(folder: Path, per_class: int) -> Path:
    """The photographs as shards in ``folder`` (made once, reused by later runs)."""
    import photos
    from trainer.data.make_shards import convert

    dest = folder / "shards-{}".format(per_class)
    if not (dest / "index.json").exists():
        tree = photos.build(folder / "tree-{}".format(per_class), train=per_class,
                            val=max(1, per_class // 4))
        convert(str(tree), str(dest), shard_size=256, workers=1)
    return dest


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def draw(data_dir: str, batch: int, threads: List[int]) -> Dict[str, float]:
    """Two epochs and their evaluations through ``ShardSource`` in this process, its torch
    pools at ``threads`` (intra-op, inter-op; empty: torch's default)."""
    import torch

    if threads:
        torch.set_num_threads(threads[0])
        torch.set_num_interop_threads(threads[1])
    from trainer.data.shard_source import ShardSource

    source = ShardSource(data_dir, SIZE, batch, WORKERS, seed=0)
    trainer_before, workers_before = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(
        resource.RUSAGE_CHILDREN)
    started, images = time.perf_counter(), 0
    for epoch in range(EPOCHS):
        for x, _ in source.train_batches(epoch):
            images += x.shape[0]
        for _ in source.eval_batches():
            pass
    source.close()  # the workers are reaped: their CPU is counted in RUSAGE_CHILDREN
    trainer_cpu = cpu_seconds(resource.RUSAGE_SELF) - trainer_before
    workers_cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - workers_before
    import trainer

    return {"trainer": trainer.__file__, "images": images,
            "seconds": time.perf_counter() - started,
            "trainer_ms": 1000 * trainer_cpu / images, "workers_ms": 1000 * workers_cpu / images,
            "share": trainer_cpu / workers_cpu, "intra_op": torch.get_num_threads()}


def measured(data_dir: Path, batch: int, setting: str, checkout: Path) -> Dict[str, float]:
    """``draw`` in a fresh process (a pool's size is the process's for good), with the data
    layer of ``checkout``."""
    from trainer import host_threads
    from trainer.host_resources import host_cores

    threads = list(host_threads.choose(host_cores())) if setting == "rule" else []
    out = subprocess.run([sys.executable, __file__, "--child", str(data_dir), str(batch),
                          json.dumps(threads)], check=True, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(checkout))).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="64,512")
    parser.add_argument("--images-per-class", type=int, default=192,
                        help="8 classes: 1,536 training images (3 steps of 512)")
    parser.add_argument("--work", type=Path, help="keep the photographs here")
    parser.add_argument("--before", type=Path, help="an older checkout to pair with")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(draw(args.child[0], int(args.child[1]), json.loads(args.child[2]))))
        return
    checkouts = {"": REPO}
    if args.before:
        checkouts["before "] = args.before.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        data_dir = shards(args.work or Path(scratch), args.images_per_class)
        print("trainer process CPU per training image against its {} workers' ({} epochs "
              "and evaluations, {} px, {}; medians of {} paired rounds)".format(
                  WORKERS, EPOCHS, SIZE, data_dir, args.rounds))
        for batch in [int(b) for b in args.batches.split(",")]:
            cases = [(name, setting) for name in checkouts for setting in SETTINGS]
            runs: Dict[tuple, List[Dict[str, float]]] = {case: [] for case in cases}
            for round_number in range(args.rounds):
                for case in (cases if round_number % 2 == 0 else cases[::-1]):
                    runs[case].append(measured(data_dir, batch, case[1], checkouts[case[0]]))
            for case in cases:
                figures = runs[case]
                assert figures[0]["trainer"].startswith(str(checkouts[case[0]])), figures[0]
                print("batch {:4d} {:15s} (intra-op {:2d}): trainer {:.3f} ms, workers {:.3f} "
                      "ms per training image: share {:.3f} (rounds: {}); {:.0f} images/s".format(
                          batch, case[0] + case[1], int(figures[0]["intra_op"]),
                          _median(figures, "trainer_ms"), _median(figures, "workers_ms"),
                          _median(figures, "share"),
                          ", ".join("{:.3f}".format(f["share"]) for f in figures),
                          statistics.median(f["images"] / f["seconds"] for f in figures)))


def _median(figures: List[Dict[str, float]], key: str) -> float:
    return statistics.median(f[key] for f in figures)


if __name__ == "__main__":
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    main()
