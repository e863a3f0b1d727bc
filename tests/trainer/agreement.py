"""How closely two computations of the same training must agree, and why.

The step paths are different XLA graphs of the same training, and the XLA CPU backend's
rounding depends on the graph and on the CPU's vector width (AVX2, AVX-512): in float32 a
rounding difference can flip a max-pool or ReLU decision and then grow with every step, so no
float32 tolerance holds on every machine. The equivalence tests therefore train in float64,
where a rounding difference is ~1e-16 relative and sums of up to ~10^4 terms, in any order and
any vector width, stay below ~1e-12 relative.

One difference is by design: the compiled graph computes the learning rate in float32 from its
step counter (a division, a cosine and a product: relative error below 4 x 2^-24 ≈ 2.4e-7;
IEEE-754 rounds these the same on every x86 CPU, and a vectorised cosine differs by an ulp at
most), the lazy path in float64 on the host. A relative error e in the rate changes each update
by e times its size, so after N steps a tensor differs by at most about e times how far the
training moved it. Could that flip a max-pool or ReLU decision and grow? The weights move
apart by e x (one update) ≈ 2.4e-7 x 0.05 x 0.1 ≈ 1e-9, so a flip needs two of a window's
activations (order 1) within ~1e-9 of each other: about 1e-9 per window, times 23,040 windows
and 7 steps, a chance near 2e-4 for given data, the same on any CPU. ``RELATIVE`` allows 40
times the rate's bound, and what the tests exist to catch (lost
momentum, a shifted schedule, a rate that does not change) moves tensors by far more:
``assert_training_differs`` demands 100 times ``RELATIVE`` of such a variant, so a test built
on these two checks can fail both ways.

The same bound holds four devices (SPMD) to one on the same global batch: the partitioned
program computes the same sums in another order (each device's quarter of the batch, then an
all-reduce over the devices), a float64 rounding difference like any other. A gradient summed
over the devices instead of averaged is four times one device's, far outside the bound.
"""

from typing import Dict

import torch

DTYPE = torch.float64
RELATIVE = 1e-5

State = Dict[str, torch.Tensor]


def _deviation(state: State, reference: State, start: State, name: str) -> float:
    """max |state - reference| of tensor ``name``, in units of how far training moved it
    from ``start`` to ``reference``."""
    moved = (reference[name] - start[name]).abs().max().item()
    assert moved > 0, "{} did not move: nothing to compare".format(name)
    return (state[name] - reference[name]).abs().max().item() / moved


def assert_same_training(state: State, reference: State, start: State) -> None:
    """Every floating-point tensor of ``state`` is within ``RELATIVE`` of ``reference``, in
    units of its movement since ``start``."""
    for name, value in reference.items():
        if value.is_floating_point():
            assert value.dtype == DTYPE, "{} is {}, not {}".format(name, value.dtype, DTYPE)
            deviation = _deviation(state, reference, start, name)
            assert deviation <= RELATIVE, "{}: {:.2e} of its movement".format(name, deviation)


def assert_training_differs(state: State, reference: State, start: State, name: str) -> None:
    """Tensor ``name`` of ``state`` is more than 100 x ``RELATIVE`` of its movement away from
    ``reference``: a variant the agreement check must be able to tell apart."""
    deviation = _deviation(state, reference, start, name)
    assert deviation > 100 * RELATIVE, "{}: only {:.2e} of its movement".format(name, deviation)


def host_state(model: torch.nn.Module) -> State:
    """The model's parameters and buffers, copied to the host."""
    return {name: value.cpu().clone() for name, value in model.state_dict().items()}
