"""A training script of your own, run by the image's launcher (docs/own-code.md).

It trains a small classifier on synthetic data with every XLA device of this host (one SPMD
program: the batch is split over the devices, the parameters are replicated), saves a
checkpoint when the platform sends SIGTERM (preemption, maintenance, cancel), on Ctrl-C and
at the end, and resumes from the newest checkpoint when it starts again.
"""

import argparse
import os
import signal
import sys

import numpy as np
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr

stop_signal = None


def on_stop(signum, frame):
    # Only note it: the step in flight finishes, then the loop saves and exits.
    global stop_signal
    stop_signal = signum


def checkpoint_dir(args):
    """Vertex AI sets AIP_CHECKPOINT_DIR (gs://...) and mounts Cloud Storage at /gcs/;
    AI Platform passes --job-dir; locally, ./checkpoints."""
    where = os.environ.get("AIP_CHECKPOINT_DIR") or args.job_dir or "checkpoints"
    if where.startswith("gs://"):
        where = "/gcs/" + where[len("gs://"):]
    os.makedirs(where, exist_ok=True)
    return where


def main():
    # Both need a handler: SIGTERM's default ends the process at once, and Ctrl-C's (SIGINT)
    # raises KeyboardInterrupt wherever the script is. Either way nothing would be saved.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_stop)
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch_per_device", type=int, default=32)
    parser.add_argument("--job-dir", dest="job_dir", default="")
    args = parser.parse_args()

    xr.use_spmd()  # one program over every device of this host
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices, 1), ("data", "model"))
    device = torch_xla.device()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    path = os.path.join(checkpoint_dir(args), "checkpoint.pt")
    step = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print("resumed from step {}".format(step), flush=True)

    def save():
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "step": step}
        xm.save(state, path + ".tmp")  # moves the tensors to the CPU first
        os.replace(path + ".tmp", path)  # never a half-written checkpoint

    batch = args.batch_per_device * devices
    generator = torch.Generator().manual_seed(1)
    teacher = torch.randn(32, 4, generator=generator)
    while step < args.steps and stop_signal is None:
        x = torch.randn(batch, 32, generator=generator)
        y = (x @ teacher).argmax(dim=1)
        x, y = x.to(device), y.to(device)
        xs.mark_sharding(x, mesh, ("data", None))  # each device gets its slice of the batch
        xs.mark_sharding(y, mesh, ("data",))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        step += 1
        if step % 10 == 0:
            print("step {} loss {:.3f}".format(step, loss.item()), flush=True)

    save()
    if stop_signal is not None:
        print("stopped by {} at step {}: checkpoint saved".format(
            signal.Signals(stop_signal).name, step), flush=True)
        # Not 0 (143 or 130, as a shell reports a signal): the platform restarts the job,
        # which resumes.
        return 128 + stop_signal
    print("done at step {}".format(step), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
