"""Host 0 of a v5e-256 slice, scaled to this machine: is the device ever left waiting, at an
epoch's end and its evaluation included? (run: make bench, or python bench/host_simulation.py
[--epochs N] [--batch B --image-size S])

On v5e-256 (64 hosts x 4 chips, 128 images per chip) host 0 trains 39 steps an epoch with a
local batch of 512 and evaluates 2 steps, with 32 data workers; a ResNet-50 step takes about
64 ms of device time, and one worker decodes a local batch in about 0.8 s, so the workers
together supply a batch every 25 ms: supply takes 0.39 of the device's step time. Here: the
real pipeline (``ShardSource`` over real photographs in shards, 2 workers on this machine's
2 cores, 39 steps an epoch, 2 evaluation steps, at 224 px) and a stand-in device that sleeps
a step's time, the step time set so that supply takes the same 0.39 of it (the workers'
supply rate measured first: two epochs and evaluations drawn flat out).

The local batch (32) is what makes the stand-in step about as long as a TPU step (45-90 ms
here with the machine's load, against 64 ms): what a segment's start costs the host (a
device loader's threads, its first batch's way through them: 10-35 ms here) does not shrink
with the batch, so a much shorter stand-in step would weigh it several times more than a
TPU step does (at 16 images of 64 px the step is about 19 ms on an idle machine). The
scaling is still harsher than the host in one way: 2 workers busy 0.39 of the time use 78 %
of 2 cores, 32 workers about 11 % of a v5e host's 112 vCPUs, so the trainer process's
threads find less CPU here.

The batches reach the stand-in device as they reach the trainer's steps (``trainer.fit``):
each segment is asked for once the one before it has been consumed, and goes through
torch_xla's device loader (``xla.device_loader``, here on the CPU device: its reading
thread and queues are the trainer's; the copy is small against a step).

Reported per epoch: the share of its wall time (its steps, the boundary, the evaluation) the
device was busy (goal >= 0.95, epochs after the first, whose start is the run's start), the
longest wait for a batch and where it was, and how often the stream's workers were started
(1 for the run: none after the first epoch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator, List, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import photos  # noqa: E402
from trainer import xla  # noqa: E402  (before the data modules, as the trainers do)
from trainer.data.make_shards import convert  # noqa: E402
from trainer.data.shard_source import ShardSource  # noqa: E402

STEPS, EVAL_STEPS, WORKERS = 39, 2, 2
BATCH, SIZE = 32, 224  # defaults of --batch, --image-size
SUPPLY_SHARE = 25 / 64  # v5e-256 host: a batch every 25 ms from 32 workers, 64 ms steps


def segments(data: ShardSource, epoch: int) -> Iterator[Tuple[str, Iterable]]:
    """An epoch's training batches, then its evaluation's, each asked for only once the one
    before it has been consumed, on the device (as ``trainer.fit`` does: asking for the
    evaluation while the epoch is still being drawn is a different request, which ends the
    epoch's batches and starts the workers again at the evaluation)."""
    yield "step", _limited(data.train_batches(epoch), data.steps_per_epoch)
    yield "evaluation step", _limited(data.eval_batches(), data.eval_steps)


def _limited(batches: Iterable, count: int) -> Iterator:
    """``trainer.fit``'s: at most ``count`` batches, and the source drawn to its end."""
    for index, batch in enumerate(batches):
        if index >= count:
            return
        yield batch


class Workers:
    """How often the stream's data workers have been started: each start is a new loader
    (``Stream.items``)."""

    def __init__(self, data: ShardSource) -> None:
        self.data, self.seen, self.starts = data, data.stream.items, 0

    def count(self) -> int:
        items = self.data.stream.items
        if items is not None and items is not self.seen:
            self.starts += 1
        self.seen = items
        return self.starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=BATCH, help="local batch (a multiple of 8)")
    parser.add_argument("--image-size", type=int, default=SIZE)
    args = parser.parse_args()
    device = xla.device()
    with tempfile.TemporaryDirectory() as temp:
        # 8 classes of photographs: exactly STEPS and EVAL_STEPS batches.
        tree = photos.build(Path(temp) / "tree", train=STEPS * args.batch // 8,
                            val=EVAL_STEPS * args.batch // 8)
        convert(str(tree), str(Path(temp) / "shards"), shard_size=64, workers=2)
        data = ShardSource(str(Path(temp) / "shards"), args.image_size, args.batch, WORKERS,
                           1)
        assert (data.steps_per_epoch, data.eval_steps) == (STEPS, EVAL_STEPS)
        try:
            # The supply rate: epochs and evaluations drawn as fast as they come, after a
            # first one (the prefetched few batches are small against 82 steps).
            for _, segment in segments(data, 100):
                for _ in segment:
                    pass
            started, drawn = time.perf_counter(), 0
            for epoch in (101, 102):
                for _, segment in segments(data, epoch):
                    drawn += sum(1 for _ in segment)
            supply = (time.perf_counter() - started) / drawn
            step = supply / SUPPLY_SHARE
            print("local batch {} at {} px: supply {:.1f} ms a batch ({} drawn); stand-in "
                  "step {:.1f} ms".format(args.batch, args.image_size, supply * 1e3, drawn,
                                          step * 1e3), flush=True)
            shares = _epochs(data, device, step, args.epochs)
        finally:
            data.close()
    print("device busy, epochs after the first: median {:.1%}, lowest {:.1%} (goal >= 95 %)"
          .format(statistics.median(shares), min(shares)))


def _epochs(data: ShardSource, device, step: float, epochs: int) -> List[float]:
    """The stand-in device's epochs 0..``epochs - 1``; the busy share of each after the
    first."""
    shares, workers = [], Workers(data)
    for epoch in range(epochs):
        started, busy, longest, where = time.perf_counter(), 0.0, 0.0, ""
        for kind, segment in segments(data, epoch):
            batches = iter(xla.device_loader(segment, device, xla.COMPILED))
            index = 0
            while True:
                asked = time.perf_counter()
                batch = next(batches, None)
                waited = time.perf_counter() - asked
                if waited > longest:
                    longest, where = waited, "{} {}".format(kind, index)
                if batch is None:
                    break
                time.sleep(step)  # the device computing the step
                busy += time.perf_counter() - asked - waited
                index += 1
        share = busy / (time.perf_counter() - started)
        print("epoch {}: device busy {:.1%} of its wall time; longest wait {:.0f} ms (before "
              "{}); workers started {} time(s) so far".format(
                  epoch, share, longest * 1e3, where, workers.count()), flush=True)
        if epoch:
            shares.append(share)
    return shares


if __name__ == "__main__":
    main()
