"""Moving a model to the XLA device, and back to the host, with its tied weights still tied.

A parameter held by two modules (input and output embeddings tied: GPT-2, T5, most language
models; ``head.weight = tok.weight``) is one tensor, trained once with the sum of both uses'
gradients. ``Module.to`` keeps such a tie only where it can swap a parameter's data in place:
from the host to an XLA device it cannot, and makes a new parameter for each module that held
it, so the two copies then train apart (torch_xla's documentation asks for ``tie_weights()``
after the move). ``to_device`` puts the one parameter back in every place.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Mapping, Tuple

import torch

Place = Tuple[torch.nn.Module, str]  # a module and the name it holds a parameter under


def shared_places(model: torch.nn.Module) -> List[List[Place]]:
    """For each parameter that ``model`` holds in more than one place, every place, in the
    order ``model.modules()`` meets them."""
    places: Dict[int, List[Place]] = OrderedDict()
    for module in model.modules():
        for name, parameter in module._parameters.items():
            if parameter is not None:
                places.setdefault(id(parameter), []).append((module, name))
    return [held for held in places.values() if len(held) > 1]


def to_device(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model.to(device)`` with every parameter it shared still one parameter: the first
    place's, set again in the others."""
    shared = shared_places(model)
    model = model.to(device)
    for (first, first_name), *others in shared:
        parameter = first._parameters[first_name]
        for module, name in others:
            module._parameters[name] = parameter
    return model


def onto_host(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """``model`` back on the host holding ``state``, its own ``state_dict()`` fetched to the
    CPU after training: each parameter and buffer of the state dict becomes that entry, with
    no second copy from the device (nor a gather of a split one from other hosts), and a
    parameter held in several places is still one parameter in all of them. Buffers the state
    dict leaves out (non-persistent: a rotary embedding's frequencies) are copied over."""
    moved: Dict[int, torch.Tensor] = {}  # a device tensor's id -> its host replacement
    for prefix, module in model.named_modules():
        for slots, make in ((module._parameters, _parameter_like), (module._buffers, _same)):
            for name, tensor in slots.items():
                if tensor is None:
                    continue
                if id(tensor) not in moved:
                    key = prefix + "." + name if prefix else name
                    host = state[key] if key in state else tensor.detach().cpu()
                    moved[id(tensor)] = make(host, tensor)
                slots[name] = moved[id(tensor)]


def _parameter_like(value: torch.Tensor, parameter: torch.Tensor) -> torch.Tensor:
    return torch.nn.Parameter(value, requires_grad=parameter.requires_grad)


def _same(value: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    return value
