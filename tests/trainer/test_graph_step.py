"""trainer.graph_step: its update is torch.optim.SGD's, it runs a training step as one device
execution that uploads nothing but its batch, and it continues from a restored optimizer
state (the lazy path's checkpoint) at the rates the lazy path uses."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch_xla.debug.metrics as met  # noqa: E402

from agreement import (  # noqa: E402
    DTYPE,
    assert_same_training,
    assert_training_differs,
    host_state,
)
from trainer import mnist, xla  # noqa: E402
from trainer.graph_step import (  # noqa: E402
    OneGraphTrainStep,
    adamw_step,
    clipped,
    sgd_settings,
    sgd_step,
)
from trainer.optim import LearningRate, adamw  # noqa: E402


@pytest.mark.parametrize("momentum,weight_decay", [(0.9, 5e-4), (0.0, 0.0), (0.5, 0.0)])
def test_the_update_is_torch_sgd_with_a_changing_rate(momentum, weight_decay):
    generator = torch.Generator().manual_seed(0)
    ours = [torch.randn(4, 3, generator=generator), torch.randn(5, generator=generator)]
    theirs = [torch.nn.Parameter(tensor.clone()) for tensor in ours]
    optimizer = torch.optim.SGD(theirs, lr=0.1, momentum=momentum,
                                weight_decay=weight_decay)
    buffers = [torch.zeros_like(tensor) for tensor in ours] if momentum else []
    for rate in (0.1, 0.05, 0.2, 0.01):
        gradients = [torch.randn(tensor.shape, generator=generator) for tensor in ours]
        for parameter, gradient in zip(theirs, gradients):
            parameter.grad = gradient.clone()
        optimizer.param_groups[0]["lr"] = rate
        optimizer.step()
        ours, buffers = sgd_step(ours, gradients, buffers, torch.tensor(rate), momentum,
                                 weight_decay)
    for mine, reference in zip(ours, theirs):
        assert torch.allclose(mine, reference.detach(), rtol=1e-6, atol=1e-7)


def test_the_adamw_update_is_torch_adamw_with_a_changing_rate_in_float64():
    # Two groups as optim.adamw makes them: decay on the matrix, none on the vector.
    generator = torch.Generator().manual_seed(0)
    ours = [torch.randn(4, 3, generator=generator, dtype=torch.float64),
            torch.randn(5, generator=generator, dtype=torch.float64)]
    theirs = [torch.nn.Parameter(tensor.clone()) for tensor in ours]
    optimizer = torch.optim.AdamW([{"params": [theirs[0]], "weight_decay": 0.05},
                                   {"params": [theirs[1]], "weight_decay": 0.0}],
                                  lr=0.1, betas=(0.9, 0.999), eps=1e-8)
    avgs = [torch.zeros_like(tensor) for tensor in ours]
    sqs = [torch.zeros_like(tensor) for tensor in ours]
    for number, rate in enumerate((0.1, 0.05, 0.2, 0.01), start=1):
        gradients = [torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
                     for tensor in ours]
        for parameter, gradient in zip(theirs, gradients):
            parameter.grad = gradient.clone()
        for group in optimizer.param_groups:
            group["lr"] = rate
        optimizer.step()
        ours, avgs, sqs = adamw_step(ours, gradients, avgs, sqs,
                                     torch.tensor(float(number), dtype=torch.float64),
                                     torch.tensor(rate, dtype=torch.float64), (0.9, 0.999),
                                     1e-8, (0.05, 0.0))
    # float64: the two differ only in the order of a few roundings (2^-53 each).
    for mine, reference, avg, sq in zip(ours, theirs, avgs, sqs):
        assert torch.allclose(mine, reference.detach(), rtol=1e-12, atol=1e-14)
        assert torch.allclose(avg, optimizer.state[reference]["exp_avg"], rtol=1e-12)
        assert torch.allclose(sq, optimizer.state[reference]["exp_avg_sq"], rtol=1e-12)


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clipping_is_torch_clip_grad_norm_in_float64(max_norm):
    """--clip_grad_norm in the graph: the gradients scaled as ``clip_grad_norm_`` scales them,
    over all of them together; a norm above every gradient's leaves them as they are."""
    generator = torch.Generator().manual_seed(0)
    gradients = [torch.randn(4, 3, generator=generator, dtype=torch.float64) * 3,
                 torch.randn(5, generator=generator, dtype=torch.float64)]
    theirs = [torch.nn.Parameter(torch.zeros_like(g)) for g in gradients]
    for parameter, gradient in zip(theirs, gradients):
        parameter.grad = gradient.clone()
    returned = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    # The two sum the same 17 squares in other orders (torch's foreach norm, ours per tensor
    # then stacked): at most 17 roundings of 2^-53 apart in the norm, so in the scale, under
    # 2e-15 relative on any CPU; 1e-13 leaves room.
    mine_clipped, before = clipped(gradients, max_norm)
    assert float(before) == pytest.approx(float(returned), rel=1e-13)  # the norm logged
    for mine, reference in zip(mine_clipped, theirs):
        assert torch.allclose(mine, reference.grad, rtol=1e-13, atol=0)
    norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in gradients])))
    total = float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in theirs])))
    # Clipped to the bound (within clip_grad_norm_'s 1e-6 in the divisor), or untouched.
    assert total == pytest.approx(min(norm, max_norm), rel=1e-5)


@pytest.mark.parametrize("options", [dict(nesterov=True, momentum=0.9), dict(dampening=0.1),
                                     dict(maximize=True)])
def test_sgd_variants_it_does_not_compute_are_refused(options):
    parameter = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="plain SGD"):
        sgd_settings(torch.optim.SGD([parameter], lr=0.1, **options))
    with pytest.raises(ValueError, match="plain SGD"):
        sgd_settings(torch.optim.Adam([parameter]))
    with pytest.raises(ValueError, match="one momentum in every parameter group"):
        sgd_settings(torch.optim.SGD([{"params": [parameter]},
                                      {"params": [torch.nn.Parameter(torch.zeros(1))],
                                       "momentum": 0.5}], lr=0.1, momentum=0.9))


def batches(count, seed=1, size=16, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 1, 28, 28, generator=generator, dtype=dtype),
             torch.randint(0, 10, (size,), generator=generator)) for _ in range(count)]


def schedule(optimizer):
    """A rate that changes at every step: warmup over 4 steps, then cosine decay to step 12."""
    return LearningRate(optimizer, 0.05, warmup_steps=4, total_steps=12)


def lazy_steps(model, optimizer, data, first_step):
    dev = xla.device()
    rate = schedule(optimizer)
    for step, (x, y) in enumerate(data, start=first_step):
        rate.set(step)
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(x.to(dev)), y.to(dev)).backward()
        optimizer.step()
        xla.sync()


def transfers_to_device():
    data = met.metric_data("TransferToDeviceTime")
    return int(data[0]) if data else 0


def test_a_training_step_is_one_device_execution_with_no_upload_and_compiles_once():
    dev = xla.device()
    torch.manual_seed(0)
    model = mnist.MnistNet().to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = OneGraphTrainStep(model, optimizer, F.nll_loss, schedule(optimizer).rate_at)
    total = xla.device_number(0, dev)
    data = [(x.to(dev), y.to(dev)) for x, y in batches(8)]
    xla.sync()
    for number, (x, y) in enumerate(data[:2]):
        total = step(number, x, y, total)
    xla.wait()
    compiles, executions = xla.compile_count(), xla.execute_count()
    uploads = transfers_to_device()
    for number, (x, y) in enumerate(data[2:], start=2):
        total = step(number, x, y, total)
    xla.wait()
    assert xla.execute_count() - executions == len(data) - 2
    assert xla.compile_count() == compiles
    # The rate changes every step, computed in the graph: nothing is uploaded for it.
    assert transfers_to_device() == uploads
    assert torch.isfinite(total.cpu()).all() and float(total.cpu()) > 0


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)


def adamw_optimizer(model):
    return adamw(model, 0.05, 0.05)


def continue_on_one_graph(model_state, optimizer_state, data, first_step, make=sgd):
    """A fresh float64 model and optimizer (``make``) loaded from the states, trained on
    ``data`` by the one-graph step from step ``first_step``; returns the model's state on the
    host."""
    dev = xla.device()
    model = mnist.MnistNet().to(DTYPE).to(dev)
    model.load_state_dict(model_state)
    optimizer = make(model)
    optimizer.load_state_dict(optimizer_state)
    step = OneGraphTrainStep(model, optimizer, F.nll_loss, schedule(optimizer).rate_at)
    total = xla.device_number(0, dev, DTYPE)
    for number, (x, y) in enumerate(data, start=first_step):
        total = step(number, x.to(dev), y.to(dev), total)
    xla.sync()
    return host_state(model)


@pytest.mark.numeric
@pytest.mark.parametrize("make", [sgd, adamw_optimizer])
def test_it_continues_from_the_lazy_paths_state_at_the_same_rates(make):
    """Resumed mid-schedule from the lazy path's optimizer state (momentum; AdamW's step and
    moments) and batch-norm state, the one-graph steps (rate computed in the graph) end where
    the lazy steps (rate set by the host) do, in float64 and within the bound ``agreement``
    derives: an AdamW run resumed mid-run on the other path equals the uninterrupted one."""
    dev = xla.device()
    torch.manual_seed(0)
    model = mnist.MnistNet().to(DTYPE).to(dev)
    optimizer = make(model)
    lazy_steps(model, optimizer, batches(3, dtype=DTYPE), first_step=0)
    start = host_state(model)
    optimizer_state = copy.deepcopy(optimizer.state_dict())

    later = batches(4, seed=2, dtype=DTYPE)  # steps 3 to 6: the end of warmup, start of decay
    lazy_steps(model, optimizer, later, first_step=3)
    expected = host_state(model)

    assert_same_training(continue_on_one_graph(start, optimizer_state, later, first_step=3,
                                               make=make), expected, start)
    # Without the restored optimizer state, or at other rates, the same steps end elsewhere.
    forgetful = continue_on_one_graph(start, dict(optimizer_state, state={}), later,
                                      first_step=3, make=make)
    early = continue_on_one_graph(start, optimizer_state, later, first_step=0, make=make)
    for other in (forgetful, early):
        assert_training_differs(other, expected, start, "fc2.weight")
