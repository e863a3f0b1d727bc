"""Your own model and data on the project's loop: ``trainer.train`` (docs/own-code.md).

A 1-D convolutional classifier of short time series: which of three frequencies a noisy
sine wave has. The data is synthetic, made in memory as a ``TensorDataset``; any map-style
Dataset of ``(input, target)`` pairs goes the same way. Run it as a script, with the
trainers' flags:

    python train.py --job_dir=/tmp/series --num_epochs=2

``trainer.train`` runs the trainers' loop on every local XLA device: checkpoints and resume in
--job_dir, the stop on SIGTERM or Ctrl-C, metrics.jsonl, TensorBoard, summary.json, model.pt.
"""

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset

import trainer

LENGTH = 64  # time steps per series
CLASSES = 3  # frequencies: 1, 2 and 3 cycles per series


def series(count, seed):
    """``count`` noisy sine waves of random phase, labelled by their frequency's class."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(CLASSES, (count,), generator=generator)
    phases = torch.rand(count, 1, generator=generator) * 2 * math.pi
    steps = torch.arange(LENGTH).float() / LENGTH
    waves = torch.sin(2 * math.pi * (labels.float() + 1).unsqueeze(1) * steps + phases)
    noise = 0.3 * torch.randn(count, LENGTH, generator=generator)
    return TensorDataset((waves + noise).unsqueeze(1), labels)  # inputs N x 1 x LENGTH


def classifier():
    """Two convolutions over time, pooled over the whole series, then class scores."""
    return nn.Sequential(
        nn.Conv1d(1, 16, 7, padding=3), nn.ReLU(), nn.Conv1d(16, 32, 7, padding=3), nn.ReLU(),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, CLASSES))


if __name__ == "__main__":
    # The model's first weights from a seed of its own: the same in every process of the job
    # and every rerun (unseeded, three runs of one command reached 84 %, 83 % and 40 %).
    torch.manual_seed(0)
    model = classifier()
    # The data's own seeds: the same examples in every process of the job and every rerun
    # (the order they are visited in follows --seed).
    summary = trainer.train(model, series(2048, seed=0), eval_set=series(512, seed=1))
    print("done: eval loss {:.4f}, accuracy {:.1%}".format(summary["final_eval_loss"],
                                                          summary["final_accuracy"]))
