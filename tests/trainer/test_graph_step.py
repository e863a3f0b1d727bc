"""trainer.graph_step: its update is torch.optim.SGD's, it runs a training step as one device
execution, and it continues from a restored optimizer state (the lazy path's checkpoint)."""

import copy
import os

import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer import mnist, xla  # noqa: E402
from trainer.graph_step import OneGraphTrainStep, sgd_settings, sgd_step  # noqa: E402
from trainer.optim import LearningRate  # noqa: E402
from trainer.steps import device_zero  # noqa: E402


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


@pytest.mark.parametrize("options", [dict(nesterov=True, momentum=0.9), dict(dampening=0.1),
                                     dict(maximize=True)])
def test_sgd_variants_it_does_not_compute_are_refused(options):
    parameter = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="plain SGD"):
        sgd_settings(torch.optim.SGD([parameter], lr=0.1, **options))
    with pytest.raises(ValueError, match="plain SGD"):
        sgd_settings(torch.optim.Adam([parameter]))
    with pytest.raises(ValueError, match="one parameter group"):
        sgd_settings(torch.optim.SGD([{"params": [parameter]},
                                      {"params": [torch.nn.Parameter(torch.zeros(1))]}],
                                     lr=0.1))


def batches(count, seed=1, size=16):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 1, 28, 28, generator=generator),
             torch.randint(0, 10, (size,), generator=generator)) for _ in range(count)]


def test_a_rate_that_is_a_number_is_refused():
    # It would be a constant of the traced graph: every later rate would be ignored.
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="learning rate as a device tensor"):
        OneGraphTrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), F.mse_loss)


def lazy_steps(model, optimizer, data, rate):
    dev = xla.device()
    for x, y in data:
        optimizer.param_groups[0]["lr"] = rate
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(x.to(dev)), y.to(dev)).backward()
        optimizer.step()
        xla.sync()


def test_a_training_step_is_one_device_execution_and_compiles_once():
    dev = xla.device()
    torch.manual_seed(0)
    model = mnist.MnistNet().to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    # The run's own rate: a new device tensor every step (warmup over all 8 steps).
    rate = LearningRate(optimizer, 0.1, warmup_steps=8, total_steps=8, device=dev)
    rate.set(0)
    step = OneGraphTrainStep(model, optimizer, F.nll_loss)
    total = device_zero(dev)
    data = [(x.to(dev), y.to(dev)) for x, y in batches(8)]
    xla.sync()
    for index, (x, y) in enumerate(data[:2]):
        rate.set(index)
        total = step(x, y, total)
    xla.wait()
    compiles, executions = xla.compile_count(), xla.execute_count()
    for index, (x, y) in enumerate(data[2:], start=2):
        rate.set(index)
        total = step(x, y, total)
    xla.wait()
    assert xla.execute_count() - executions == len(data) - 2
    assert xla.compile_count() == compiles
    assert torch.isfinite(total.cpu()).all() and float(total.cpu()) > 0


def continue_on_one_graph(model_state, optimizer_state, data, rate):
    """A fresh model and optimizer loaded from the states, trained on ``data`` by the one-graph
    step; returns the model's state on the host."""
    dev = xla.device()
    model = mnist.MnistNet().to(dev)
    model.load_state_dict(model_state)
    optimizer = torch.optim.SGD(model.parameters(), lr=rate, momentum=0.9, weight_decay=5e-4)
    optimizer.load_state_dict(optimizer_state)
    optimizer.param_groups[0]["lr"] = torch.tensor(rate).to(dev)
    step = OneGraphTrainStep(model, optimizer, F.nll_loss)
    total = device_zero(dev)
    for x, y in data:
        total = step(x.to(dev), y.to(dev), total)
    xla.sync()
    return {name: value.cpu() for name, value in model.state_dict().items()}


def test_it_continues_from_the_lazy_paths_momentum_and_batch_norm_state():
    dev = xla.device()
    torch.manual_seed(0)
    model = mnist.MnistNet().to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                weight_decay=5e-4)
    lazy_steps(model, optimizer, batches(3), 0.05)
    model_state = {name: value.cpu() for name, value in model.state_dict().items()}
    optimizer_state = copy.deepcopy(optimizer.state_dict())

    later = batches(3, seed=2)
    lazy_steps(model, optimizer, later, 0.02)
    expected = {name: value.cpu() for name, value in model.state_dict().items()}

    resumed = continue_on_one_graph(model_state, optimizer_state, later, 0.02)
    for name, value in resumed.items():
        assert torch.allclose(value.float(), expected[name].float(), rtol=1e-3,
                              atol=1e-5), name
    # Without the restored momentum the same steps end elsewhere, so the check can fail.
    forgetful = continue_on_one_graph(model_state, dict(optimizer_state, state={}), later,
                                      0.02)
    assert not torch.allclose(forgetful["fc2.weight"], expected["fc2.weight"], rtol=1e-3,
                              atol=1e-5)
