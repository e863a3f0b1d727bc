"""trainer.xla.device_loader on the real XLA CPU device: the batches arrive on the device, and
an exception of the batches (raised in torch_xla's loader thread) reaches the training loop
after the batches before it, instead of ending the data early without a word; a fixed batch
(--fake_data) is copied once and handed out per step."""

import os
import threading

import pytest
import torch

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer import xla  # noqa: E402
from trainer.device_prefetch import LOADER_PREFETCH_BATCHES, TRANSFER_BATCHES  # noqa: E402
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


def test_the_first_batch_reaches_the_device_before_the_second_is_built():
    # torch_xla's default loader collected 8 host batches before its first copy to the
    # device: a slow pipeline's first step waited for 8 batches instead of one (the compiled
    # path's; the lazy path copies 4 at a time, device_prefetch says why).
    first_arrived = threading.Event()
    waited_in_vain = []

    def slow_batches():
        for number in range(3):
            yield torch.full((2, 3), float(number)), torch.tensor([number, number])
            if number == 0 and not first_arrived.wait(20):
                waited_in_vain.append(True)

    loaded = iter(xla.device_loader(slow_batches(), xla.device(), xla.COMPILED))
    _, y = next(loaded)
    first_arrived.set()
    assert int(y.cpu()[0]) == 0 and [int(y.cpu()[0]) for _, y in loaded] == [1, 2]
    assert not waited_in_vain


def test_a_torch_xla_without_the_prefetch_sizes_keeps_its_own_and_says_so(caplog):
    for path in (xla.COMPILED, xla.LAZY):
        assert xla.prefetch_options(["self", "loader", "devices", "loader_prefetch_size",
                                     "device_prefetch_size"], path) == {
            "loader_prefetch_size": LOADER_PREFETCH_BATCHES,
            "device_prefetch_size": TRANSFER_BATCHES[path]}
    with caplog.at_level("WARNING", logger="trainer"):
        assert xla.prefetch_options(["self", "loader", "devices"]) == {}
    assert "takes no device_prefetch_size, loader_prefetch_size" in caplog.text


@pytest.mark.parametrize("path", [xla.LAZY, xla.COMPILED])
def test_a_fixed_batch_is_copied_to_the_device_once_and_handed_out_per_step(path):
    # --fake_data: one copy, then the same device tensors for each of the 5 steps, which the
    # host batches only count; on the lazy path a step traced on one batch is cut (run)
    # before the next is handed out, as by the device loader; on the compiled path never.
    fixed = (torch.arange(6.0).reshape(2, 3), torch.tensor([3, 4]))
    handed, runs = [], []
    for x, y in xla.resident_batches(iter([("not", "used")] * 5), fixed, xla.device(), path):
        xla.wait()  # an execution is counted once it has finished
        runs.append(xla.execute_count())
        handed.append((x, y))
        step = x * 2  # a step's pending graph  # noqa: F841
    assert len(handed) == 5 and all(x is handed[0][0] and y is handed[0][1]
                                    for x, y in handed)
    x, y = handed[0]
    assert x.device.type == "xla" and torch.equal(x.cpu(), fixed[0])
    assert torch.equal(y.cpu(), fixed[1])
    grew = [later - earlier for earlier, later in zip(runs, runs[1:])]
    assert grew == ([1] * 4 if path == xla.LAZY else [0] * 4), grew


def test_to_host_fetches_device_tensors_together_and_copies_host_ones_in_order():
    on_device = [torch.arange(4.0).to(xla.device()), torch.tensor([7, 8]).to(xla.device())]
    on_host = torch.ones(3)
    copies = xla.to_host([on_device[0], on_host, on_device[1]])
    assert [copy.device.type for copy in copies] == ["cpu"] * 3
    assert torch.equal(copies[0], torch.arange(4.0)) and copies[2].tolist() == [7, 8]
    assert copies[2].dtype == torch.int64
    assert torch.equal(copies[1], on_host) and copies[1].data_ptr() != on_host.data_ptr()


def test_attention_under_bf16_autocast_runs_in_bfloat16_as_on_every_other_device():
    """A float32 query and key (out of a float32 rotary embedding) with a bfloat16 value (a
    projection under autocast): torch_xla's autocast leaves the attention out and torch
    refused the mix; --precision=bf16 casts its floating inputs, the mask's too, as CPU and
    CUDA autocast do: the attention of the inputs cast by hand, autocast off, exactly."""
    generator = torch.Generator().manual_seed(0)
    query, key = (torch.randn(2, 4, 6, 8, generator=generator) for _ in range(2))
    value = torch.randn(2, 4, 6, 8, generator=generator).bfloat16()
    mask = torch.randn(2, 1, 6, 6, generator=generator)
    device = xla.device()
    on_device = [tensor.to(device) for tensor in (query, key, value, mask)]
    with xla.mixed_precision(xla.BF16)():
        found = torch.nn.functional.scaled_dot_product_attention(*on_device[:3],
                                                                 attn_mask=on_device[3])
    expected = torch.nn.functional.scaled_dot_product_attention(
        *[tensor.bfloat16() for tensor in on_device[:3]], attn_mask=on_device[3].bfloat16())
    assert found.dtype == torch.bfloat16
    assert torch.equal(found.cpu(), expected.cpu())
    with xla.mixed_precision(xla.BF16)():  # registered once: a second run changes nothing
        again = torch.nn.functional.scaled_dot_product_attention(*on_device[:3],
                                                                 attn_mask=on_device[3])
    assert torch.equal(again.cpu(), expected.cpu())
