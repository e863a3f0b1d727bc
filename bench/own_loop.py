"""``trainer.train`` against a plain torch_xla loop as users write it, as whole processes on the
XLA CPU device (run: make bench, or python bench/own_loop.py [--rounds N] [--epochs N]).

Both train the same model (a small convolutional net) on the same data (a ``TensorDataset``
of random 3 x 32 x 32 images in 10 classes, drawn from the same seed) with SGD at the same
rate and batch, and evaluate after every epoch:

- **plain**: the loop of pytorch/xla's examples: a ``DataLoader`` (shuffled, last ragged
  batch dropped) wrapped in ``MpDeviceLoader``, ``zero_grad``/``backward``/``optimizer_step``
  per batch, top-1 counted on the device and read once per evaluation; no checkpoints.
- **train**: ``trainer.train(model, train_set, eval_set, argv=...)`` with ``--job_dir``
  (checkpoints, metrics, summary, model.pt: what it does for a user), and
  **train-no-job-dir** (nothing written), so the machinery's own cost shows apart from its outputs.

Prints each variant's whole-process wall time and CPU time (user and system: on a shared
machine the steadier one), medians of ``--rounds`` runs, the variants interleaved so that
drifts of the machine hit all alike, and each over plain as a ratio: below 1.00 is faster
than the plain loop.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("plain", "train", "train-no-job-dir")


def _data(examples: int, seed: int):
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (examples,), generator=generator)
    # Images whose mean depends on the class, so there is something to learn.
    images = torch.randn(examples, 3, 32, 32, generator=generator) + labels.view(-1, 1, 1, 1) / 5
    return TensorDataset(images, labels)


def _model():
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(32, 10))


def run_plain(args: argparse.Namespace) -> None:
    """The loop as pytorch/xla's examples write it."""
    import torch
    import torch.nn.functional as F
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from torch.utils.data import DataLoader

    torch.manual_seed(1)
    device = xm.xla_device()
    model = _model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train_loader = DataLoader(_data(args.examples, 1), batch_size=args.batch, shuffle=True,
                              drop_last=True)
    eval_set = _data(args.examples // 4, 2)
    eval_loader = DataLoader(eval_set, batch_size=args.batch)
    for epoch in range(args.epochs):
        model.train()
        for x, y in pl.MpDeviceLoader(train_loader, device):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            xm.optimizer_step(optimizer)
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=device)
        with torch.no_grad():
            for x, y in pl.MpDeviceLoader(eval_loader, device):
                correct += model(x).argmax(1).eq(y).sum()
        print("epoch {}: top1 {:.3f}".format(epoch + 1, correct.item() / len(eval_set)))


def run_train(args: argparse.Namespace, job_dir: str) -> None:
    """The same run through ``trainer.train``."""
    import torch

    import trainer

    torch.manual_seed(1)
    argv = ["--num_epochs={}".format(args.epochs), "--batch_size={}".format(args.batch),
            "--lr={}".format(args.lr), "--lr_batch=0", "--warmup_epochs=0", "--log_steps=0"]
    if job_dir:
        argv.append("--job_dir=" + job_dir)
    trainer.train(_model(), _data(args.examples, 1), _data(args.examples // 4, 2), argv=argv)


def timed(variant: str, args: argparse.Namespace) -> Tuple[float, float]:
    """(wall seconds, CPU seconds: user and system) of one whole process running ``variant``."""
    with tempfile.TemporaryDirectory(prefix="bench-own-loop-") as job:
        command = [sys.executable, __file__, "--as", variant, "--job", job,
                   "--epochs", str(args.epochs), "--examples", str(args.examples),
                   "--batch", str(args.batch)]
        started, cpu = time.perf_counter(), _children_cpu()
        finished = subprocess.run(command, cwd=str(REPO), env=dict(os.environ,
                                  PJRT_DEVICE="CPU"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        seconds, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if finished.returncode != 0:
        sys.exit("{} failed (exit {}):\n{}".format(variant, finished.returncode,
                                                    finished.stdout[-3000:]))
    return seconds, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--examples", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--as", dest="variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant == "plain":
        return run_plain(args)
    if args.variant is not None:
        return run_train(args, args.job if args.variant == "train" else "")
    seconds: Dict[str, List[Tuple[float, float]]] = {variant: [] for variant in VARIANTS}
    for round_number in range(args.rounds):
        order = VARIANTS if round_number % 2 == 0 else VARIANTS[::-1]
        for variant in order:
            seconds[variant].append(timed(variant, args))
    plain = [statistics.median(run[kind] for run in seconds["plain"]) for kind in (0, 1)]
    print("{} epochs of {} examples, batch {}, the XLA CPU device; whole processes, medians "
          "of {} interleaved rounds:".format(args.epochs, args.examples, args.batch,
                                              args.rounds))
    for variant in VARIANTS:
        wall, cpu = [statistics.median(run[kind] for run in seconds[variant]) for kind in (0, 1)]
        print("  {:<18} wall {:6.1f} s ({}), {:.2f}x plain's; CPU {:6.1f} s, {:.2f}x plain's"
              .format(variant, wall, ", ".join("{:.1f}".format(run[0])
                                               for run in seconds[variant]),
                      wall / plain[0], cpu, cpu / plain[1]))


if __name__ == "__main__":
    # bench/ itself is off the path: its trainer.py is not the trainer package.
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
    sys.path.insert(0, str(REPO))
    main()
