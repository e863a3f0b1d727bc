"""Parameter groups of ``trainer.train(..., param_groups=[...])``: a lower rate for a pretrained
backbone, a weight decay of a group's own, as torch's optimizers take groups.

Each group is a dict: ``"params"``, the parameters (or a module: its parameters) of the model
given to ``trainer.train``; ``"lr_scale"`` (default 1), the group's rate as a multiple of the
run's at every step (warmup and decay alike; 0 keeps the group where it is); and
``"weight_decay"`` (default: the trainer's rule, ``--weight_decay`` on every parameter with
SGD and on those of two or more dimensions with AdamW), which then applies to every parameter
of the group, biases and normalization weights too. The parameters in no group take the
defaults. A group is held by the names of its parameters (``check``), so it survives the
model's move to the device, and the checkpoints keep each group's settings.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from trainer.errors import EX_USAGE, TrainerError

KEYS = ("params", "lr_scale", "weight_decay")
HINT = ("e.g. param_groups=[{\"params\": model.backbone.parameters(), \"lr_scale\": 0.1}]: "
        "each group a dict of params and, optionally, lr_scale and weight_decay")


class Group(NamedTuple):
    """One group as the run keeps it: its parameters' names in ``model.named_parameters()``."""

    names: List[str]
    lr_scale: float
    weight_decay: Optional[float]  # None: the trainer's rule


def check(model: torch.nn.Module, groups: Any) -> List[Group]:
    """``groups`` (None, or a list of dicts) checked against ``model``: a usage error (64)
    naming the group and the key for anything torch's optimizers would refuse or this run
    could not honour (a parameter of another model, one in two groups, a negative or not
    finite number, a key it does not know)."""
    if groups is None:
        return []
    if isinstance(groups, dict) or not isinstance(groups, (list, tuple)):
        raise TrainerError("param_groups is a {}, not a list of dicts".format(
            type(groups).__name__), HINT, EX_USAGE)
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    taken: Dict[str, int] = {}
    checked = []
    for index, group in enumerate(groups):
        where = "param_groups[{}]".format(index)
        if not isinstance(group, dict) or "params" not in group:
            raise TrainerError("{} is not a dict with \"params\"".format(where), HINT, EX_USAGE)
        unknown = sorted(set(group) - set(KEYS))
        if unknown:
            raise TrainerError("{} has {}: not one of {}".format(
                where, ", ".join(map(repr, unknown)), ", ".join(KEYS)), HINT, EX_USAGE)
        members = _parameters(group["params"], where)
        chosen = []
        for parameter in members:
            name = names.get(id(parameter))
            if name is None:
                raise TrainerError("{} holds a parameter that is not the model's".format(where),
                                   "take the params from the model you pass to trainer.train",
                                   EX_USAGE)
            if name in taken and taken[name] != index:
                raise TrainerError("{} holds {}, which param_groups[{}] holds too".format(
                    where, name, taken[name]), "put each parameter in one group", EX_USAGE)
            taken[name] = index
            chosen.append(name)
        checked.append(Group(chosen, _number(group, "lr_scale", 1.0, where),
                             _number(group, "weight_decay", None, where)))
    return checked


Rule = Sequence[Tuple[Callable[[torch.Tensor], bool], float]]


def optimizer_groups(model: torch.nn.Module, groups: Sequence[Group],
                     default: Rule) -> List[Dict[str, Any]]:
    """torch optimizer groups for ``model``'s parameters that train: each of ``groups``
    (a frozen parameter left out), then the rest. Where a group sets no weight decay its
    parameters are split by ``default``, the trainer's rule: (which parameters, their decay)
    in order, each parameter in the first that takes it (AdamW: those of two or more
    dimensions, then the others), one group each as before groups existed, so that older
    checkpoints load. Every group carries its ``lr_scale`` (``optim.LearningRate.set`` and the
    compiled step read it); empty groups are left out."""
    parameters = dict(model.named_parameters())
    grouped = {name for group in groups for name in group.names}
    rest = Group([name for name in parameters if name not in grouped], 1.0, None)
    made: List[Dict[str, Any]] = []
    for group in list(groups) + [rest]:
        members = [parameters[name] for name in group.names if parameters[name].requires_grad]
        if group.weight_decay is not None:
            made.append({"params": members, "weight_decay": group.weight_decay,
                         "lr_scale": group.lr_scale})
            continue
        for takes, decay in default:
            made.append({"params": [p for p in members if takes(p)], "weight_decay": decay,
                         "lr_scale": group.lr_scale})
            members = [p for p in members if not takes(p)]
    return [group for group in made if group["params"]]


def lr_scale(group: Dict[str, Any]) -> float:
    """A torch optimizer group's rate as a multiple of the run's (1 for groups made
    elsewhere, a checkpoint from before groups had one)."""
    return float(group.get("lr_scale", 1.0))


def _parameters(given: Any, where: str) -> List[torch.Tensor]:
    if isinstance(given, torch.nn.Module):
        return list(given.parameters())
    if isinstance(given, torch.Tensor):
        return [given]
    try:
        found = list(given)
    except TypeError:
        raise TrainerError("{}[\"params\"] is a {}, not parameters".format(
            where, type(given).__name__), HINT, EX_USAGE)
    if not all(isinstance(parameter, torch.Tensor) for parameter in found):
        raise TrainerError("{}[\"params\"] holds something that is not a parameter".format(
            where), HINT, EX_USAGE)
    return found


def _number(group: Dict[str, Any], key: str, default: Optional[float],
            where: str) -> Optional[float]:
    value = group.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise TrainerError("{}[{!r}] must be a number of 0 or more, got {!r}".format(
            where, key, value), HINT, EX_USAGE)
    return float(value)
