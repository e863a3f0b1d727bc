"""What a checkpoint costs the training loop: copying the model's and optimizer's state from the
XLA device to host memory, one ``.cpu()`` per tensor against ``xla.to_host``'s one request for
all (run: make bench, or python bench/checkpoint_copy.py [--repeats N]).

ResNet-18 and ResNet-50 (1,000 classes) after two SGD steps with momentum on the XLA CPU device;
each way timed ``--repeats`` times, alternating, medians reported with their ratio. On a TPU the
per-tensor way pays a device round trip per tensor (ResNet-50: 481 of them), so the ratio here,
where the device is host memory, is the least the change gains.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torchvision  # noqa: E402

from trainer import xla  # noqa: E402
from trainer.checkpoints import to_cpu  # noqa: E402


def trained_state(name: str):
    """A model's and its SGD optimizer's state on the device, after two steps."""
    dev = xla.device()
    model = getattr(torchvision.models, name)(num_classes=1000).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(2, 3, 32, 32).to(dev)
    y = torch.tensor([1, 2]).to(dev)
    for _ in range(2):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        xla.sync()
    xla.wait()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else (
        value if isinstance(value, (list, tuple)) else [])
    return [tensor for item in items for tensor in _tensors(item)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for name in ("resnet18", "resnet50"):
        state = trained_state(name)
        tensors = [tensor for part in ("model", "optimizer") for tensor in _tensors(state[part])]
        megabytes = sum(t.numel() * t.element_size() for t in tensors) / 1e6
        times = {"each": [], "together": []}
        for _ in range(args.repeats):
            for way, fetch in (("each", None), ("together", xla.to_host)):
                started = time.perf_counter()
                to_cpu(state, fetch)
                times[way].append(time.perf_counter() - started)
        each, together = (statistics.median(times[way]) for way in ("each", "together"))
        print("{}: {} tensors, {:.0f} MB: one .cpu() per tensor {:.0f} ms, one request "
              "{:.0f} ms (ratio {:.2f})".format(name, len(tensors), megabytes, 1e3 * each,
                                               1e3 * together, each / together))


if __name__ == "__main__":
    main()
