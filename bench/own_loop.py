"""``trainer.train`` against a plain torch_xla loop as users write it (run: python
bench/own_loop.py [--rounds N] [--epochs N] [--examples N]).

Both train the same model (an MLP on tabular data: 32 features, 3 hidden layers of 512, 10
classes) on the same in-memory ``TensorDataset`` with SGD + momentum at the same batch and
rate for the same epochs, then evaluate once; each is a whole process, timed from its start
to its exit (imports, compilation and all), on the same device (``PJRT_DEVICE``, default
CPU). The plain loop is what pytorch/xla's examples teach: a shuffling ``DataLoader``,
``MpDeviceLoader``, ``zero_grad``/``backward``/``xm.optimizer_step``, the loss summed on the
device and read once per epoch. ``trainer.train`` runs without ``--job_dir`` (the plain loop
writes nothing either). Rounds interleave the two, so drift on a shared machine hits both;
printed: each one's median wall and CPU seconds, and the ratio plain / trainer.train of the
median wall times (goal >= 1: at least as fast).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent

COMMON = """
import sys, torch
examples, epochs, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
generator = torch.Generator().manual_seed(0)
x = torch.randn(examples + 2048, 32, generator=generator)
y = (x[:, :10] * torch.linspace(-1, 1, 10)).argmax(dim=1)
train_set = torch.utils.data.TensorDataset(x[:examples], y[:examples])
eval_set = torch.utils.data.TensorDataset(x[examples:], y[examples:])
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
LR, MOMENTUM = 0.05, 0.9
"""

OURS = COMMON + """
import trainer
summary = trainer.train(model, train_set, eval_set, argv=[
    "--num_epochs={}".format(epochs), "--batch_size={}".format(batch),
    "--lr={}".format(LR), "--lr_batch=0", "--momentum={}".format(MOMENTUM),
    "--weight_decay=0", "--log_steps=0", "--devices=1"])
print("accuracy", summary["final_accuracy"])
"""

PLAIN = COMMON + """
import torch_xla.core.xla_model as xm
from torch_xla.distributed.parallel_loader import MpDeviceLoader
device = xm.xla_device()
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
loss_fn = torch.nn.CrossEntropyLoss()
train_loader = MpDeviceLoader(torch.utils.data.DataLoader(
    train_set, batch_size=batch, shuffle=True, drop_last=True), device)
for epoch in range(epochs):
    model.train()
    total = torch.zeros((), device=device)
    for inputs, targets in train_loader:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        xm.optimizer_step(optimizer)
        total += loss.detach()
    print("epoch", epoch, "loss total", total.item())
model.eval()
correct = torch.zeros((), device=device, dtype=torch.int64)
with torch.no_grad():
    for inputs, targets in MpDeviceLoader(torch.utils.data.DataLoader(
            eval_set, batch_size=batch), device):
        correct += (model(inputs).argmax(dim=1) == targets).sum()
print("accuracy", correct.item() / len(eval_set))
"""


def run(code: str, examples: int, epochs: int, batch: int) -> Tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole process running ``code``."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.setdefault("PJRT_DEVICE", "CPU")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, str(examples), str(epochs),
                             str(batch)], cwd=str(REPO), env=env, capture_output=True,
                            text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit("a run failed: {}".format(result.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--examples", type=int, default=32768)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args(argv)
    times: Dict[str, List[Tuple[float, float]]] = {"trainer.train": [], "plain loop": []}
    for round_number in range(args.rounds):
        for name, code in (("trainer.train", OURS), ("plain loop", PLAIN)):
            times[name].append(run(code, args.examples, args.epochs, args.batch))
            print("round {} {}: {:.1f} s wall, {:.1f} s CPU".format(
                round_number + 1, name, *times[name][-1]), flush=True)
    medians = {name: (statistics.median(t[0] for t in runs),
                      statistics.median(t[1] for t in runs)) for name, runs in times.items()}
    for name, (wall, cpu) in medians.items():
        print("{}: median {:.1f} s wall, {:.1f} s CPU".format(name, wall, cpu))
    print("plain / trainer.train wall: {:.2f} (goal >= 1)".format(
        medians["plain loop"][0] / medians["trainer.train"][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
