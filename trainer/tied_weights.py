"""Moving a model to the XLA device with its tied weights still tied.

A parameter held by two modules (input and output embeddings tied: GPT-2, T5, most language
models; ``head.weight = tok.weight``) is one tensor, trained once with the sum of both uses'
gradients. ``Module.to`` keeps such a tie only where it can swap a parameter's data in place:
from the host to an XLA device it cannot, and makes a new parameter for each module that held
it, so the two copies then train apart (torch_xla's documentation asks for ``tie_weights()``
after the move). ``to_device`` puts the one parameter back in every place.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Tuple

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
