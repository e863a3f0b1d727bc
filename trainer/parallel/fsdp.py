"""FSDP's plan: which dimension of each parameter is split over the mesh's ``fsdp`` axis, and
what the model state (parameters, gradients, optimizer state) then takes on each device.

A tensor of at least ``MIN_SHARDED_ELEMENTS`` elements is split on its largest dimension that
the axis divides (the most rows or columns per device: the fewest, largest transfers); a
smaller one, or one no dimension of which the axis divides, is held whole on every device
(a norm's scale, a bias: their all-gathers would cost more than their bytes). Gradients and
optimizer state follow their parameter's split (XLA propagates it through the update).
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence, Tuple

import torch

from trainer.host_resources import gigabytes

# Below this many elements a tensor is not split (64 KB of float32).
MIN_SHARDED_ELEMENTS = 1 << 14


def shard_dim(shape: Sequence[int], ways: int) -> Optional[int]:
    """The dimension of a tensor of ``shape`` to split ``ways`` ways, or None: held whole."""
    elements = 1
    for size in shape:
        elements *= size
    if ways <= 1 or elements < MIN_SHARDED_ELEMENTS:
        return None
    divisible = [dim for dim, size in enumerate(shape) if size % ways == 0]
    if not divisible:
        return None
    return max(divisible, key=lambda dim: (shape[dim], -dim))


class ShardPlan:
    """``dims``: each trained or frozen parameter's split dimension by name (None: whole),
    for a ``ways``-way ``fsdp`` axis; ``slots``: the optimizer's state tensors per trained
    parameter (SGD with momentum 1, AdamW 2)."""

    def __init__(self, parameters: Iterable[Tuple[str, torch.Tensor]], ways: int,
                 slots: int) -> None:
        self.ways, self.slots = ways, slots
        self._sizes: Dict[str, Tuple[int, bool]] = {}  # bytes, trained
        self.dims: Dict[str, Optional[int]] = {}
        for name, parameter in parameters:
            self.dims[name] = shard_dim(tuple(parameter.shape), ways)
            self._sizes[name] = (parameter.numel() * parameter.element_size(),
                                 parameter.requires_grad)

    def state_bytes(self) -> Tuple[int, int]:
        """(the model state's bytes on each device, its bytes in all, as one device would
        hold it): parameters, and for each trained one its gradient and optimizer state."""
        per_device = whole = 0
        for name, (size, trained) in self._sizes.items():
            copies = 1 + (1 + self.slots if trained else 0)
            whole += copies * size
            per_device += copies * (size // self.ways if self.dims[name] is not None else size)
        return per_device, whole

    def describe(self) -> str:
        """``model state 1.4 GB per device of 5.6 GB (12 of 40 parameters held whole ...)``."""
        per_device, whole = self.state_bytes()
        whole_tensors = sum(dim is None for dim in self.dims.values())
        return "model state {} per device of {} ({} of {} parameters held whole: too small " \
            "or indivisible)".format(gigabytes(per_device), gigabytes(whole), whole_tensors,
                                     len(self.dims))


def replicated_bytes(parameters: Iterable[torch.Tensor], slots: int) -> int:
    """The model state's bytes on each device without sharding (``--sharding=auto``)."""
    return sum(parameter.numel() * parameter.element_size() * (
        1 + (1 + slots if parameter.requires_grad else 0)) for parameter in parameters)

