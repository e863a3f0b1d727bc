"""Trainer benchmark on the XLA CPU device (run: make bench, or python bench/trainer.py).

For MNIST (fake data; batch 128, full epochs, and batch 8, the host-bound case of
bench/step_paths.py) and ResNet-18 (fake data, small images) prints:
steady examples/s (after the first steps' compilation), examples/s including compilation,
graphs compiled for a train + eval run, device executions per epoch, and the pipeline
efficiency: steady end-to-end examples/s divided by the examples/s of the same compiled step
fed a batch that is already on the device (this device's limit). The steps take the default
path (compiled where torch_xla >= 2.1 can); bench/step_paths.py compares the two paths.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402

from trainer import imagenet, mnist, xla  # noqa: E402
from trainer.config import TrainConfig  # noqa: E402
from trainer.optim import build_optimizer  # noqa: E402
from trainer.outputs import OutputPaths  # noqa: E402
from trainer.steps import Steps  # noqa: E402


def device_limit(model: torch.nn.Module, loss_fn, config: TrainConfig, shape, classes: int,
                 steps: int, repeats: int = 3) -> float:
    """Examples/s of the training step alone: one batch already on the device, one sync per
    step, after warm-up (the graph is compiled already). The median of ``repeats`` timings:
    on a 2-core CPU device single timings vary by +-15 %."""
    dev = xla.device()
    model = model.to(dev)
    path = xla.step_path(config.step_mode)
    optimizer, rate = build_optimizer(config, model, steps)
    runner = Steps(model, optimizer, rate, loss_fn, (1,), path)
    x = torch.randn((config.batch_size,) + shape).to(dev)
    y = torch.randint(0, classes, (config.batch_size,)).to(dev)
    total = xla.device_number(0, dev)
    for step in range(3):
        total = runner.train(step, x, y, total)
        xla.sync()
    xla.wait()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for step in range(steps):
            total = runner.train(step, x, y, total)
            xla.sync()
        xla.wait()  # the last step has finished
        rates.append(steps * config.batch_size / (time.perf_counter() - start))
    return statistics.median(rates)


def report(name: str, summary: dict, limit: float) -> None:
    executions = summary["executions_per_epoch"]
    print("{}".format(name))
    print("  steady examples/s                 {:.1f}".format(
        summary["steady_examples_per_second"]))
    print("  examples/s incl. compilation      {:.1f}".format(
        summary["examples_per_second_with_compilation"]))
    print("  graphs compiled (train + eval)    {}".format(summary["compile_count"]))
    print("  device executions per epoch       {}".format(executions[-1] if executions else 0))
    print("  device-only step examples/s       {:.1f}".format(limit))
    print("  pipeline efficiency               {:.3f}".format(
        summary["steady_examples_per_second"] / limit))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resnet_steps", type=int, default=20)
    parser.add_argument("--resnet_image_size", type=int, default=64)
    args = parser.parse_args()

    for batch_size, num_steps in ((128, 0), (8, 1500)):
        config = TrainConfig(fake_data=True, batch_size=batch_size, num_epochs=2,
                             num_steps=num_steps, log_steps=0)
        summary = mnist.run(config, paths=OutputPaths())
        steps = summary["global_step"] // 2
        limit = device_limit(mnist.MnistNet(), torch.nn.functional.nll_loss, config,
                             (1, 28, 28), 10, steps=min(steps, 500))
        report("MNIST, fake data, batch {}, 2 epochs of {} steps".format(batch_size, steps),
               summary, limit)

    config = TrainConfig(fake_data=True, model="resnet18", image_size=args.resnet_image_size,
                         batch_size=32, num_epochs=2, num_steps=args.resnet_steps, log_steps=0,
                         num_workers=0, warmup_epochs=0.5, label_smoothing=0.1)
    summary = imagenet.run(config, paths=OutputPaths())
    limit = device_limit(imagenet.build_model(config, imagenet.NUM_CLASSES),
                         torch.nn.CrossEntropyLoss(label_smoothing=0.1), config,
                         (3, config.image_size, config.image_size), imagenet.NUM_CLASSES,
                         steps=args.resnet_steps)
    report("ResNet-18, fake data, {}px, batch 32, 2 epochs of {} steps".format(
        config.image_size, args.resnet_steps), summary, limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
