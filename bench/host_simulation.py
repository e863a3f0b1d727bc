"""Host 0 of a v5e-256 slice, scaled to this machine: is the device ever left waiting, at an
epoch's end and its evaluation included? (run: make bench, or python bench/host_simulation.py
[--epochs N])

On v5e-256 (64 hosts x 4 chips, 128 images per chip) host 0 trains 39 steps an epoch with a
local batch of 512 and evaluates 2 steps, with 32 data workers; a ResNet-50 step takes about
64 ms of device time, and one worker decodes a local batch in about 0.8 s, so the workers
together supply a batch every 25 ms: supply takes 0.39 of the device's step time. Here: the
real pipeline (``ShardSource`` over real photographs in shards, 2 workers on this machine's
2 cores, local batch 16, 39 steps an epoch, 2 evaluation steps at 64 px) and a stand-in
device that sleeps a step's time, the step time set so that supply takes the same 0.39 of it
(the workers' supply rate measured first: two epochs and evaluations drawn flat out).
Reported: the share of each epoch's wall time (its steps, the boundary, the evaluation) the
device was busy (goal >= 0.95), epochs after the first (whose start is the run's start).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import photos  # noqa: E402
from trainer.data.make_shards import convert  # noqa: E402
from trainer.data.shard_source import ShardSource  # noqa: E402

STEPS, EVAL_STEPS, BATCH, WORKERS, SIZE = 39, 2, 16, 2, 64
SUPPLY_SHARE = 25 / 64  # v5e-256 host: a batch every 25 ms from 32 workers, 64 ms steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        tree = photos.build(Path(temp) / "tree", train=STEPS * BATCH // 8,
                            val=EVAL_STEPS * BATCH // 8)
        convert(str(tree), str(Path(temp) / "shards"), shard_size=64, workers=2)
        data = ShardSource(str(Path(temp) / "shards"), SIZE, BATCH, WORKERS, 1)
        try:
            # The supply rate: epochs and evaluations drawn as fast as they come, after a
            # first one (the prefetched few batches are small against 80 steps).
            for segment in (data.train_batches(100), data.eval_batches()):
                for _ in segment:
                    pass
            started, drawn = time.perf_counter(), 0
            for epoch in (101, 102):
                for segment in (data.train_batches(epoch), data.eval_batches()):
                    drawn += sum(1 for _ in segment)
            supply = (time.perf_counter() - started) / drawn
            step = supply / SUPPLY_SHARE
            print("supply {:.1f} ms a batch; stand-in step {:.1f} ms".format(
                supply * 1e3, step * 1e3), flush=True)
            shares = []
            for epoch in range(args.epochs):
                started, busy = time.perf_counter(), 0.0
                for segment in (data.train_batches(epoch), data.eval_batches()):
                    for _ in segment:
                        time.sleep(step)
                        busy += step
                share = busy / (time.perf_counter() - started)
                print("epoch {}: device busy {:.1%} of its wall time".format(epoch, share),
                      flush=True)
                if epoch:
                    shares.append(share)
        finally:
            data.close()
    print("device busy, epochs after the first: median {:.1%}, lowest {:.1%} (goal >= 95 %)"
          .format(statistics.median(shares), min(shares)))


if __name__ == "__main__":
    main()
