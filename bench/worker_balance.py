"""How evenly the stream's work units fall on its data workers, by worker count: arithmetic on
the epoch's order, no image decoded (run: python bench/worker_balance.py [--train N] [--val N]
[--batch B] [--shard-size N] [--epochs N] [--workers 1,3,7,...]).

The defaults are issue 49's host run (``shared/tools/feed-bench``'s: 4,000 training photographs
in shards of 250, batch 256: 15 steps an epoch; 500 for evaluation). Each step's
pieces (runs of a block of ``epoch_order.BLOCK_EXAMPLES`` examples) are cut into at most one
unit per worker (``epoch_order.units``) and the units dealt to the workers in turn across the
epochs and evaluations (``stream.worker_items``: worker ``p`` builds units ``p``, ``p + W``,
...). Printed per worker count: the images each worker decodes over the epochs (the fewest,
the most, the mean) and the mean over the most: the share of the workers' time the busiest
leaves the others when they all decode at one rate and the stream moves at the pace of the
busiest (its ring lets the others run ahead only a few steps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))

from trainer.data import epoch_order  # noqa: E402


def counts(examples: int, shard_size: int) -> List[int]:
    return [shard_size] * (examples // shard_size) + (
        [examples % shard_size] if examples % shard_size else [])


def loads(train: int, val: int, batch: int, shard_size: int, epochs: int, workers: int
          ) -> List[int]:
    """The images each of ``workers`` decodes over ``epochs`` epochs and their evaluations."""
    found, number = [0] * workers, 0
    for epoch in range(epochs):
        for order, cut in ((epoch_order.train_order(counts(train, shard_size), 0, epoch),
                            epoch_order.Cut(train, batch)),
                           (epoch_order.eval_order(counts(val, shard_size)),
                            epoch_order.Cut(val, batch, padded=True))):
            for _, _, _, pieces in epoch_order.units(order, cut, 0, 0, workers):
                found[number % workers] += sum(end - first for _, first, end in pieces)
                number += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=4000)
    parser.add_argument("--val", type=int, default=500)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--shard-size", type=int, default=250)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", default="1,3,5,7,9,11,13,15")
    args = parser.parse_args()
    print("{} training and {} evaluation images, batch {}, shards of {}: {} steps an epoch; "
          "images per worker over {} epochs".format(args.train, args.val, args.batch,
                                                    args.shard_size, args.train // args.batch,
                                                    args.epochs))
    for workers in [int(count) for count in args.workers.split(",")]:
        each = loads(args.train, args.val, args.batch, args.shard_size, args.epochs, workers)
        mean = sum(each) / workers
        print("  {:3d} workers: fewest {:6d}, most {:6d}, mean {:8.1f}: mean/most {:.2f}".format(
            workers, min(each), max(each), mean, mean / max(each)))


if __name__ == "__main__":
    main()
