"""``--model=tiny_model:build`` (this folder on ``sys.path``, or on ``PYTHONPATH`` for a trainer
process): an image classifier of a few hundred weights for the tests whose claim is about the
run (its data order, its stops, its resume), not about a network. One strided convolution: it
builds, compiles and steps in about a second where ResNet-18 spends half a minute compiling."""

import torch


def build(num_classes, image_size):
    """The trainers' ``PACKAGE.MODULE:CALLABLE`` form; any ``image_size`` of 1 px or more."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes))
