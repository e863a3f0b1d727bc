"""Activation checkpointing (``--remat=block``): each block of the model keeps only its
inputs from the forward pass, and the backward pass runs the block forward again to get the
activations its gradients need. A step then holds one block's activations at a time instead
of every block's, for about a third more compute (a second forward of the blocks).

Which modules are blocks (``find_blocks``): the elements of the model's repeated stacks,
those of a ``ModuleList`` or ``Sequential`` holding two or more modules of one class (of
several such classes, the one holding the most parameters), at the shallowest depth where
there are any: the decoder's ``blocks``, a Hugging Face model's
``model.layers``, timm's ``blocks``, all four stages of a ResNet. A model without such a stack:
its top-level children that hold parameters.

How (``_Recomputed``): a block's call is one autograd function of the block's inputs and of
its parameters and buffers, passed explicitly, so that both step paths see them as the
tensors they trace (the compiled path traces with other tensors in the parameters' places)
and the block gets its gradients even where its input needs none (the first block after a
frozen embedding). The backward pass puts an optimization barrier (``xla.recompute_barrier``)
on what it recomputes from: without it XLA would see the same computation twice in one
graph and merge the second into the first, keeping every activation after all.

Not recomputable: dropout (a second forward would draw other masks, and the gradients would
not be those of the forward pass). A block holding a ``Dropout`` module with ``p > 0`` is
refused; dropout called as a function inside a block cannot be seen: set its rate to 0 (the
decoder here has none, as is usual for language models trained on TPUs).
"""

from __future__ import annotations

import copyreg
import logging
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

import torch

from trainer import xla
from trainer.config import REMAT_CHOICES
from trainer.errors import TrainerError

log = logging.getLogger("trainer")

NONE, BLOCK = REMAT_CHOICES

_STACKS = (torch.nn.ModuleList, torch.nn.Sequential)


def find_blocks(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """(name, module) of ``model``'s blocks (the module docstring says which), in order."""
    level = [("", model)]
    while level:
        found = []
        for name, module in level:
            if isinstance(module, _STACKS):
                found.extend(_repeated(name, module))
        if found:
            return found
        level = [(_join(name, child_name), child) for name, module in level
                 for child_name, child in module.named_children()]
    return [(name, child) for name, child in model.named_children()
            if any(True for _ in child.parameters())]


def _repeated(name: str, stack: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """The children of ``stack`` of one class that it holds two or more of (of several such
    classes, the one whose modules hold the most parameters: the blocks, not the small
    layers between them)."""
    children = [(_join(name, child_name), child) for child_name, child in stack.named_children()
                if any(True for _ in child.parameters())]
    counts = Counter(type(child) for _, child in children)
    sizes = Counter()  # type: Counter
    for _, child in children:
        sizes[type(child)] += sum(parameter.numel() for parameter in child.parameters())
    repeated = [kind for kind, count in counts.items() if count >= 2]
    if not repeated:
        return []
    kind = max(repeated, key=lambda candidate: sizes[candidate])
    return [(child_name, child) for child_name, child in children if type(child) is kind]


def _join(prefix: str, name: str) -> str:
    return prefix + "." + name if prefix and name else prefix or name


def recompute_blocks(model: torch.nn.Module, remat: str) -> None:
    """With ``remat`` ``block``: each of ``model``'s blocks recomputed in the backward pass
    (its class becomes a subclass that does so: names, parameters and state dict unchanged),
    and the choice logged. A usage error on torch_xla 1.x, for a model without blocks and for
    a block with dropout."""
    if remat == NONE:
        return
    if xla.recompute_barrier() is None:
        raise TrainerError("--remat=block needs torch_xla 2.x (this is torch_xla {})".format(
            xla.torch_xla_version()), "use --remat=none on this image, or the pjrt image")
    blocks = find_blocks(model)
    if not blocks:
        raise TrainerError("--remat=block found no blocks in {}: it has no child module "
                           "with parameters".format(type(model).__name__),
                           "use --remat=none")
    for name, block in blocks:
        for inner, module in block.named_modules():
            rate = _drop_rate(module)
            if rate:
                raise TrainerError(
                    "--remat=block would recompute {} with {} {} (p={:g}): the second "
                    "forward pass would draw other masks".format(
                        name, type(module).__name__, _join(name, inner), rate),
                    "set the model's dropout and drop-path rates to 0 (timm: drop_path_rate=0; "
                    "torchvision: stochastic_depth_prob=0), or use --remat=none")
        if type(block) not in _CLASSES.values():  # not swapped already (a second run)
            block.__class__ = _recomputing_class(type(block))
    kinds = sorted({type(block).__mro__[1].__name__ for _, block in blocks})
    log.info("--remat=block: %d blocks (%s, %s ... %s) recompute their activations in the "
             "backward pass", len(blocks), "/".join(kinds), blocks[0][0], blocks[-1][0])


# Modules that draw random masks in training, by class name where the class is a library's
# (torchvision's StochasticDepth, timm's DropPath), with the attribute holding their rate.
_RANDOM_DROPS = {"StochasticDepth": "p", "DropPath": "drop_prob", "DropBlock2d": "drop_prob"}


def _drop_rate(module: torch.nn.Module) -> float:
    """The rate at which ``module`` drops at random in training (0: it draws nothing)."""
    if isinstance(module, torch.nn.modules.dropout._DropoutNd):
        return float(module.p)
    attribute = _RANDOM_DROPS.get(type(module).__name__)
    return float(getattr(module, attribute, 0) or 0) if attribute else 0.0


_CLASSES: Dict[type, type] = {}
_CALLER = "_remat_caller"  # the attribute of a block holding its _OwnForward


def _recomputing_class(kind: type) -> type:
    """``kind`` with a forward that goes through ``_Recomputed`` when gradients are on (one
    subclass per class, so that a model's blocks share it)."""
    if kind not in _CLASSES:
        _CLASSES[kind] = type(kind.__name__, (kind,), {
            "forward": _forward, "_remat_forward": kind.forward, "__reduce_ex__": _reduce_ex,
            "__module__": kind.__module__, "__qualname__": kind.__qualname__})
    return _CLASSES[kind]


def _reduce_ex(self: torch.nn.Module, protocol: int) -> Any:
    """Pickled (``torch.save(model)``, ``copy.deepcopy``) as the block it was: its own class,
    its state, without the recomputation, loadable where this module is not."""
    state = dict(self.__dict__)
    state.pop(_CALLER, None)
    return copyreg._reconstructor, (type(self).__mro__[1], object, None), state


def _forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    if not torch.is_grad_enabled():  # evaluation: nothing to keep or recompute
        return self._remat_forward(*args, **kwargs)
    named = list(self.named_parameters()) + list(self.named_buffers())
    leaves, structure = torch.utils._pytree.tree_flatten((args, kwargs))
    places = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    if _CALLER not in self.__dict__:  # not a submodule: the state dict stays the model's
        self.__dict__[_CALLER] = _OwnForward(self)
    call = _BlockCall(self.__dict__[_CALLER], [name for name, _ in named], leaves, structure,
                      places)
    outputs = _Recomputed.apply(call, *[tensor for _, tensor in named],
                                *[leaves[i] for i in places])
    return call.rebuild(outputs)


class _OwnForward(torch.nn.Module):
    """Runs a block's own forward: not through the block's ``__call__``, so that its hooks
    fire once, for the call that reached ``_forward``, and not again for its runs here."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.block._remat_forward(*args, **kwargs)


class _BlockCall:
    """One call of a block: ``run(tensors)`` calls its own forward with ``tensors`` (its
    parameters and buffers, then the tensors among the call's arguments) in their places;
    the arguments that are no tensors, and the output's structure, stay as they were."""

    def __init__(self, caller: _OwnForward, names: Sequence[str], leaves: List[Any],
                 structure: Any, places: Sequence[int]) -> None:
        self.caller, self.names, self.leaves = caller, ["block." + name for name in names], \
            leaves
        # The forward's autocast (--precision=bf16), for the recomputation to run under the
        # same: the backward pass runs outside it.
        self.autocast = (torch.is_autocast_enabled(xla.DEVICE_TYPE),
                         torch.get_autocast_dtype(xla.DEVICE_TYPE))
        self.structure, self.places = structure, list(places)
        self.output_leaves: List[Any] = []
        self.output_places: List[int] = []
        self.output_structure: Any = None

    def run(self, tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """The block's output tensors, in order (the rest remembered for ``rebuild``)."""
        state = dict(zip(self.names, tensors[:len(self.names)]))
        leaves = list(self.leaves)
        for place, tensor in zip(self.places, tensors[len(self.names):]):
            leaves[place] = tensor
        args, kwargs = torch.utils._pytree.tree_unflatten(leaves, self.structure)
        enabled, dtype = self.autocast
        with torch.autocast(xla.DEVICE_TYPE, dtype=dtype, enabled=enabled):
            output = torch.func.functional_call(self.caller, state, tuple(args), kwargs)
        self.output_leaves, self.output_structure = torch.utils._pytree.tree_flatten(output)
        self.output_places = [i for i, leaf in enumerate(self.output_leaves)
                              if isinstance(leaf, torch.Tensor)]
        return [self.output_leaves[i] for i in self.output_places]

    def rebuild(self, tensors: Sequence[torch.Tensor]) -> Any:
        leaves = list(self.output_leaves)
        for place, tensor in zip(self.output_places, tensors):
            leaves[place] = tensor
        return torch.utils._pytree.tree_unflatten(leaves, self.output_structure)


class _Recomputed(torch.autograd.Function):
    """Forward: the block without keeping its activations. Backward: the block again from
    its saved inputs (behind the optimization barrier), differentiated there."""

    @staticmethod
    def forward(ctx: Any, call: _BlockCall, *tensors: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        ctx.call = call
        ctx.save_for_backward(*tensors)
        arguments = tensors[len(call.names):]
        versions = [tensor._version for tensor in arguments]
        outputs = tuple(call.run(tensors))
        # An input the block changed in place would be saved changed, and changed again by
        # the recomputation: its gradients would be wrong, so it is refused.
        if [tensor._version for tensor in arguments] != versions:
            raise TrainerError("--remat=block cannot recompute {}: it changes its input in "
                               "place".format(type(call.caller.block).__name__),
                               "make the block's first operation out of place (x = x + ..., "
                               "not x += ...), or use --remat=none")
        return outputs

    @staticmethod
    def backward(ctx: Any, *output_gradients: torch.Tensor) -> Tuple[Any, ...]:
        wanted = ctx.needs_input_grad[1:]
        # Copies: what the recomputation writes to its buffers (batch norm's running
        # statistics) stays off the model's, which the forward pass updated once already.
        saved = xla.recompute_barrier()(list(ctx.saved_tensors))
        inputs = [tensor.detach().requires_grad_(need) for tensor, need in zip(saved, wanted)]
        with torch.enable_grad():
            outputs = ctx.call.run(inputs)
        pairs = [(output, gradient) for output, gradient in zip(outputs, output_gradients)
                 if output.requires_grad and gradient is not None]
        needing = [tensor for tensor in inputs if tensor.requires_grad]
        found = iter(torch.autograd.grad([output for output, _ in pairs], needing,
                                         [gradient for _, gradient in pairs],
                                         allow_unused=True) if pairs and needing
                     else [None] * len(needing))
        return (None,) + tuple(next(found) if tensor.requires_grad else None
                               for tensor in inputs)
