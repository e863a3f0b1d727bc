"""trainer.xla.device_loader on the real XLA CPU device: the batches arrive on the device, and
an exception of the batches (raised in torch_xla's loader thread) reaches the training loop
after the batches before it, instead of ending the data early without a word."""

import os

import pytest
import torch

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer import xla  # noqa: E402
from trainer.errors import DataError  # noqa: E402


def batches(count, error=None):
    for number in range(count):
        yield torch.full((2, 3), float(number)), torch.tensor([number, number])
    if error is not None:
        raise error


@pytest.mark.parametrize("path", [xla.LAZY, xla.COMPILED])
def test_an_error_of_the_batches_is_raised_after_the_batches_before_it(path):
    error = DataError("cannot decode gs://b/s/train-000002.tar#train-000002_000005: image "
                      "file is truncated", "write the shards again")
    loaded = []
    with pytest.raises(DataError) as raised:
        for _, y in xla.device_loader(batches(3, error), xla.device(), path):
            loaded.append(int(y.cpu()[0]))
    assert raised.value is error and loaded == [0, 1, 2]
    seen = [(x.device.type, int(y.cpu()[1]))
            for x, y in xla.device_loader(batches(2), xla.device(), path)]
    assert seen == [("xla", 0), ("xla", 1)]
