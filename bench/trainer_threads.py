"""Which threads of the trainer process work on the XLA CPU device, and what its torch pools'
size costs there (run: make bench, or python bench/trainer_threads.py [--rounds N]).

Whole ImageNet trainer runs (``trainer.imagenet``: ResNet-18 at 64 px, batch 32, 2 data
workers, one epoch of ``--num_steps`` steps and its evaluation) on real photographs in shards
(``tests/photos.py``), each in a fresh process, paired in rounds:

- ``rule``: the trainer as it is (``trainer.host_threads``: one intra-op, one inter-op thread);
- ``default``: the same with torch's own pools (a thread per core), the rule switched off.

Each prints the steady examples/s from its ``summary.json`` and, at its end, the CPU seconds
of each of the trainer process's threads (``/proc/self/task``; XLA's and torch's pool threads
all keep the main thread's name, so they are told apart by how many there are and what they
used: the rule leaves torch's intra-op pool at the main thread alone).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

SETTINGS = ("rule", "default")


def thread_seconds() -> Dict[str, List[float]]:
    """CPU seconds of each of this process's threads, grouped by the thread's name."""
    tick = os.sysconf("SC_CLK_TCK")
    groups: Dict[str, List[float]] = collections.defaultdict(list)
    for task in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/{}/stat".format(task)) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open("/proc/self/task/{}/comm".format(task)) as comm:
                name = comm.read().strip()
        except OSError:  # it ended meanwhile
            continue
        groups[name].append((int(fields[11]) + int(fields[12])) / tick)
    return dict(groups)


def child(setting: str, data_dir: str, job_dir: str, steps: int) -> None:
    """One trainer run in this process; prints its figures as one JSON line."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import torch

    from trainer import host_threads, imagenet, xla  # noqa: F401  (xla: the import point)

    if setting == "default":  # the rule off: torch's pools as torch sizes them
        host_threads.choose = lambda cores: host_threads.HostThreads(
            torch.get_num_threads(), torch.get_num_interop_threads())
    code = imagenet.main(["imagenet", "--data_dir=" + data_dir, "--job-dir=" + job_dir,
                          "--model=resnet18", "--image_size=64", "--batch_size=32",
                          "--num_workers=2", "--num_epochs=1", "--num_steps={}".format(steps),
                          "--log_steps=0", "--warmup_epochs=0"])
    threads = thread_seconds()
    if code:
        raise SystemExit("the trainer exited {}".format(code))
    with open(os.path.join(job_dir, "summary.json")) as summary_file:
        summary = json.load(summary_file)
    print(json.dumps({"code": code, "rate": summary["steady_examples_per_second"],
                      "intra_op": torch.get_num_threads(), "threads": threads}))


def run(setting: str, data_dir: Path, steps: int) -> Dict:
    with tempfile.TemporaryDirectory() as job_dir:
        out = subprocess.run([sys.executable, __file__, "--child", setting, str(data_dir),
                              job_dir, str(steps)], check=True, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--work", type=Path, help="keep the photographs here")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return
    sys.path.insert(0, str(REPO / "bench"))
    from feed_cpu import shards

    with tempfile.TemporaryDirectory() as scratch:
        data_dir = shards(args.work or Path(scratch), 192)
        runs: Dict[str, List[Dict]] = {setting: [] for setting in SETTINGS}
        for round_number in range(args.rounds):
            for setting in (SETTINGS if round_number % 2 == 0 else SETTINGS[::-1]):
                runs[setting].append(run(setting, data_dir, args.steps))
    for setting in SETTINGS:
        figures = runs[setting]
        print("{:8s} (intra-op {:2d}): {:.1f} examples/s steady (median of {}: {})".format(
            setting, figures[0]["intra_op"],
            statistics.median(f["rate"] for f in figures), len(figures),
            ", ".join("{:.1f}".format(f["rate"]) for f in figures)))
        threads = sorted((seconds for group in figures[-1]["threads"].values()
                          for seconds in group), reverse=True)
        print("  last run's trainer process: {} threads, CPU seconds of those above 0.05 s: {}"
              .format(len(threads), ", ".join("{:.1f}".format(t) for t in threads if t >= 0.05)))

if __name__ == "__main__":
    main()
