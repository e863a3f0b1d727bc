"""What an epoch's start costs a host of a slice training on a large token corpus: the
training order cut into this host's rows of each step (``batches.host_rows`` through
``DatasetSource.train_batches``), for 100 B tokens in windows of 2,048 (48.8 M windows) on
host 3 of 64, a global batch of 512 (run: make bench, or python bench/epoch_rows.py
[--windows N] [--against CHECKOUT]).

Each measurement is a process of its own (the data is items that read nothing): the seconds
``train_batches`` takes and the process's peak resident memory above what it held before
(``ru_maxrss``). ``--against CHECKOUT``: the same in that checkout, interleaved, 3 runs each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ONE = """
import json, resource, sys, time
import torch
from trainer.batches import HostPart
from trainer.dataset_source import DatasetSource

class Windows(torch.utils.data.Dataset):
    def __len__(self):
        return {windows}
    def __getitem__(self, index):
        return torch.zeros(8, dtype=torch.long), torch.zeros(8, dtype=torch.long)

source = DatasetSource(Windows(), None, 512, 512, seed=1, host=HostPart(3, 64))
held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
batches = source.train_batches(0)
seconds = time.perf_counter() - started
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - held
print(json.dumps({{"seconds": seconds, "grown_mb": grown / 1024}}))
"""


def measure(checkout: Path, windows: int) -> dict:
    done = subprocess.run([sys.executable, "-c", ONE.format(windows=windows)], cwd=str(checkout),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=100_000_000_000 // 2048)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    checkouts = {"this": REPO}
    if args.against is not None:
        checkouts["that"] = args.against
    found = {name: [] for name in checkouts}
    for _ in range(args.runs):
        for name, checkout in checkouts.items():
            found[name].append(measure(checkout, args.windows))
    for name, runs in found.items():
        print("{}: {:,} windows, host 3 of 64: {:.2f} s, {:.0f} MB more memory at its peak "
              "(medians of {})".format(name, args.windows,
                                       statistics.median(r["seconds"] for r in runs),
                                       statistics.median(r["grown_mb"] for r in runs),
                                       len(runs)))


if __name__ == "__main__":
    main()
