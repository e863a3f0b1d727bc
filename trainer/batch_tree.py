"""Inputs and outputs as the ecosystem passes them (``trainer.train``): a batch's input is a
tensor, a tuple or list of them, or a dict of them (nested alike), each batched on its first
dimension; a model's output is a tensor, a tuple, a dict or a Hugging Face ``ModelOutput``.

- ``call_model``: ``model(x)`` for a tensor, ``model(*x)`` for a tuple or list, ``model(**x)``
  for a dict (a Hugging Face row: ``input_ids``, ``attention_mask``, ``labels`` ...);
- ``logits_of``: what the accuracy is counted on: the tensor itself, the ``logits`` of a dict
  or ``ModelOutput``, the first element of a tuple or list;
- ``output_loss``: the loss a model computed itself (a ``ModelOutput``'s or dict's ``loss``),
  the default ``loss_fn`` for dict items, as Hugging Face's ``Trainer`` takes it;
- ``BatchLoss``, ``loss_of``: a ``loss_fn`` given for dict items, called on the whole batch;
- ``flatten``/``unflatten``: an input as a flat list of tensors and back (the compiled step
  traces tensors only), ``describe``: an input's dtypes and shapes, for error lines;
- ``micro_batch``: one of a step's micro-batches (``--grad_accum_steps``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten


def arguments(model: Callable, inputs: Any) -> Tuple[tuple, Dict[str, Any]]:
    """(positional, keyword) arguments of ``model`` for ``inputs``: a dict as keyword
    arguments, a tuple or list as positional ones, anything else (a tensor) as the one
    argument. A dict's get ``use_cache=False`` where the model's ``forward`` takes
    ``use_cache`` and the dict does not set it: a Hugging Face model, whose config asks for a
    cache of keys and values by default. Training never reads that cache; it would hold every
    layer's keys and values, and a block recomputed by ``--remat=block`` would append to it a
    second time (Hugging Face's own gradient checkpointing turns it off too)."""
    if isinstance(inputs, dict):
        kwargs = dict(inputs)
        if "use_cache" not in kwargs and _takes_use_cache(type(model)):
            kwargs["use_cache"] = False
        return (), kwargs
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def call_model(model: Callable, inputs: Any) -> Any:
    """``model`` on ``inputs`` (``arguments``)."""
    args, kwargs = arguments(model, inputs)
    return model(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _takes_use_cache(kind: type) -> bool:
    """Whether ``kind``'s ``forward`` has a ``use_cache`` parameter (asked once a class)."""
    try:
        parameters = inspect.signature(kind.forward).parameters
    except (AttributeError, TypeError, ValueError):  # no forward, or one inspect cannot read
        return False
    return "use_cache" in parameters


def to_device(inputs: Any, device: Any) -> Any:
    return tree_map(lambda value: value.to(device) if isinstance(value, torch.Tensor)
                    else value, inputs)


def flatten(inputs: Any) -> Tuple[List[torch.Tensor], Any]:
    """(the tensors of ``inputs`` in a fixed order, the structure to rebuild it with: None for
    one tensor, the common case, which then costs nothing per step)."""
    if isinstance(inputs, torch.Tensor):
        return [inputs], None
    return tree_flatten(inputs)


def unflatten(tensors: List[torch.Tensor], structure: Any) -> Any:
    if structure is None:
        return tensors[0]
    return tree_unflatten(list(tensors), structure)


def micro_batch(inputs: Any, part: int, parts: int, groups: int = 1) -> Any:
    """Micro-batch ``part`` of ``parts`` of a batch (every tensor of ``inputs`` cut alike on
    its first dimension), whose rows are ``groups`` equal blocks (one per device: the batch is
    sharded so over the SPMD mesh): the ``part``-th of each block's ``parts`` equal slices, so
    each device's micro-batch is its own rows and no row moves between devices. Every row is
    in exactly one micro-batch."""
    def rows(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        per, left = divmod(value.shape[0], groups * parts)
        if left:
            raise RuntimeError("a batch of {} rows cannot be cut into {} micro-batches on {} "
                               "device(s)".format(value.shape[0], parts, groups))
        rest = tuple(value.shape[1:])
        return value.reshape((groups, parts, per) + rest)[:, part].reshape(
            (groups * per,) + rest)
    return tree_map(rows, inputs)


def logits_of(outputs: Any) -> Any:
    """The scores in a model's ``outputs`` that accuracy is counted on: a tensor as it is, a
    dict's or ``ModelOutput``'s ``logits``, a tuple's or list's first element (as timm's and
    torchvision's auxiliary-head models return them); None where there are none."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, dict):  # ModelOutput is an OrderedDict
        return outputs.get("logits")
    if isinstance(outputs, (tuple, list)) and outputs:
        return logits_of(outputs[0])
    return None


def output_loss(outputs: Any, targets: Any = None) -> torch.Tensor:
    """The loss a model returned with its outputs (``outputs.loss`` or ``outputs["loss"]``):
    the default ``loss_fn`` for dict items, as Hugging Face's ``Trainer`` reads it. A
    ``ValueError`` where there is none (``own_loop`` turns it into one line)."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else getattr(outputs, "loss", None)
    if not isinstance(loss, torch.Tensor):
        raise ValueError("the model's outputs hold no loss (a {} without 'loss')".format(
            type(outputs).__name__))
    return loss


class BatchLoss:
    """A ``loss_fn`` of the model's outputs and the whole batch, ``loss_fn(outputs, batch)``:
    how one given for dict items (Hugging Face rows) is called, as a ``Trainer.compute_loss``
    sees the batch: its ``labels``, its ``attention_mask``, everything the rows hold."""

    def __init__(self, function: Callable) -> None:
        self.function = function

    def __call__(self, outputs: Any, batch: Any) -> torch.Tensor:
        return self.function(outputs, batch)

    def to(self, device: Any) -> "BatchLoss":
        """Itself, its function moved to ``device`` where that is a Module holding tensors
        (class weights): as ``fit`` moves a loss that is a Module."""
        if isinstance(self.function, torch.nn.Module):
            self.function = self.function.to(device)
        return self


def loss_of(loss_fn: Callable, outputs: Any, inputs: Any, targets: Any) -> torch.Tensor:
    """The loss of a batch: ``loss_fn(outputs, targets)``, or for a ``BatchLoss``
    ``loss_fn(outputs, inputs)`` (the rows, their labels among them)."""
    if isinstance(loss_fn, BatchLoss):
        return loss_fn(outputs, inputs)
    return loss_fn(outputs, targets)


def describe(inputs: Any) -> str:
    """``inputs``' dtypes and shapes in one line: ``torch.float32 of shape (2, 6)``; for a
    tuple ``(torch.float32 (2, 6), torch.int64 (2,))``; for a dict ``{input_ids: torch.int64
    (2, 16), ...}``."""
    if isinstance(inputs, torch.Tensor):
        return "{} of shape {}".format(inputs.dtype, tuple(inputs.shape))
    return _short(inputs)


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return "{} {}".format(value.dtype, tuple(value.shape))
    if isinstance(value, dict):
        return "{" + ", ".join("{}: {}".format(key, _short(part))
                               for key, part in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_short(part) for part in value) + ")"
    return type(value).__name__
