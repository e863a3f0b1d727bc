"""MNIST on every XLA device of the job (``--devices``): ``python -m trainer.mnist [--flags]``.

The model is pytorch/xla's reference MNIST network (2 conv + BN, 2 fc), so figures compare.
The defaults (batch 16 per device, SGD at 0.05 per 64 examples scaled with the global batch,
momentum 0.9, weight decay 5e-4, cosine decay, random shifts of up to 2 px) are chosen to give
a good model in 5 epochs on one device or four: >= 99 % on the 8,000/2,000 MNIST subset, where
the reference's defaults get about 96.5 %. The batch is small because that subset is: at 64 per
device, four devices (a global batch of 256) get 155 steps in 5 epochs and reach only 98.8 to
99.2 %; at 16, they train on the global batch of 64 one device was tuned with.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from trainer import cli, startup, stop_signal
from trainer.config import FLAGS, define_common_flags


def define_flags(flag_values: Any = FLAGS) -> None:
    define_common_flags(exclude=("model", "model_kwargs", "image_size", "label_smoothing",
                                 "num_workers", "max_bad_images"),
                        flag_values=flag_values)


if __name__ == "__main__":
    # First of all: as PID 1 a SIGTERM during the seconds the imports below take would be lost.
    stop_signal.catch_sigterm()
    # The flags before the frameworks: --help and a bad flag answer without importing torch.
    PARSED = cli.parse_early(define_flags)

import torch
import torch.nn as nn
import torch.nn.functional as F

import trainer.xla  # noqa: F401  (first of ours, at a fixed point: trainer.startup)
from trainer import devices, mnist_data
from trainer.batches import DataSource, FakeSource, TensorSource
from trainer.config import TrainConfig
from trainer.fit import TrainSpec, fit
from trainer.outputs import OutputPaths

if __name__ == "__main__":
    startup.freeze_imports()

# Fake data: as many steps as the real training set would give at this batch size.
FAKE_TRAIN_EXAMPLES, FAKE_EVAL_EXAMPLES = 60000, 10000


class MnistNet(nn.Module):
    """pytorch/xla's reference MNIST model."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(10)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(20)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn1(F.relu(F.max_pool2d(self.conv1(x), 2)))
        x = self.bn2(F.relu(F.max_pool2d(self.conv2(x), 2)))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def build_data(config: TrainConfig, topology: devices.Topology = devices.ONE_DEVICE
               ) -> DataSource:
    """MNIST's data for ``config`` (the IDX files, or ``--fake_data``) in global batches over
    ``topology``'s devices, this host's part of each."""
    batch, eval_batch, host = devices.batch_layout(config.step_batch_size,
                                                   config.eval_batch_size or config.batch_size,
                                                   topology)
    if config.fake_data:
        return FakeSource((1, 28, 28), 10, batch, FAKE_TRAIN_EXAMPLES // batch,
                          FAKE_EVAL_EXAMPLES // eval_batch, seed=config.seed, host=host)
    (train_x, train_y), (eval_x, eval_y) = mnist_data.load_splits(config.data_dir)
    return TensorSource(train_x, train_y, eval_x, eval_y, batch, config.seed,
                        augment=mnist_data.random_shift, eval_batch_size=eval_batch, host=host,
                        devices=topology.devices)


def run(config: TrainConfig, *, data_override: Optional[DataSource] = None,
        paths: Optional[OutputPaths] = None) -> Dict[str, Any]:
    """Train and evaluate; returns the summary dict (see ``trainer.fit``)."""
    topology = devices.detect(config.devices)
    torch.manual_seed(config.seed)
    spec = TrainSpec("mnist", MnistNet(), data_override or build_data(config, topology),
                     F.nll_loss)
    return fit(config, spec, paths or OutputPaths.resolve(config.job_dir, {}), topology)


def main(argv: Optional[List[str]] = None) -> int:
    """Parse flags (``--job-dir`` spelling accepted), train, return the exit code."""
    return cli.run_main(define_flags, run, argv)


if __name__ == "__main__":
    cli.exit_process(cli.run_parsed(run, PARSED))
