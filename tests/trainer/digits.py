"""Random 28x28 "digits" for in-process MNIST runs whose data only has to flow: the tests that
stop, resume or summarise a run check what the loop does, not what it learns."""

import torch

from trainer.batches import TensorSource


def random_digits(train, evaluate, batch_size, eval_batch_size=8, source=TensorSource):
    """``source`` (``TensorSource`` or a subclass that injects a fault) over ``train`` and
    ``evaluate`` random images with labels 0-9, the same ones every call (seed 4)."""
    generator = torch.Generator().manual_seed(4)
    return source(torch.randn(train, 1, 28, 28, generator=generator),
                  torch.randint(0, 10, (train,)),
                  torch.randn(evaluate, 1, 28, 28, generator=generator),
                  torch.randint(0, 10, (evaluate,)),
                  batch_size=batch_size, eval_batch_size=eval_batch_size)
