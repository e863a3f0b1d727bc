"""The model on the job's mesh (``--sharding``, ``--mesh``): decides the mesh
(``trainer.parallel.mesh``), splits the parameters as FSDP's plan says
(``trainer.parallel.fsdp``) and makes the batches' placement for that mesh; then keeps the
optimizer state and the weights' averages split as their parameters are."""

from __future__ import annotations

import logging
from typing import Any, Optional, Tuple

import torch

from trainer import devices, xla
from trainer.config import TrainConfig
from trainer.parallel import fsdp, mesh

log = logging.getLogger("trainer")


def optimizer_slots(config: TrainConfig) -> int:
    """The optimizer's state tensors per trained parameter: AdamW's two moments, SGD's
    momentum buffer (none without momentum)."""
    if config.optimizer == "adamw":
        return 2
    return 1 if config.momentum else 0


def place_model(config: TrainConfig, model: torch.nn.Module, topology: devices.Topology,
                dev: torch.device) -> Tuple[Optional[xla.BatchSharding], Optional[fsdp.ShardPlan]]:
    """(how batches are split over the devices, None on one; FSDP's plan, None unless the
    parameters are split) for ``model``, already on ``dev``: its parameters split where the
    plan says, the decision and the state per device logged."""
    slots = optimizer_slots(config)
    choice, why = mesh.resolve(config.sharding,
                               fsdp.replicated_bytes(model.parameters(), slots),
                               mesh.device_memory(xla.chip_kind(dev)))
    shape = mesh.mesh_shape(choice, config.mesh, topology.devices)
    sharding = devices.batch_sharding(topology, shape.fsdp)
    if not shape.sharded or sharding is None:
        if choice == mesh.FSDP:
            log.info("%s over %s: an fsdp axis of 1, nothing to split, every tensor whole",
                     why, shape.describe())
        return sharding, None
    plan = fsdp.ShardPlan(model.named_parameters(), shape.fsdp, slots)
    for name, parameter in model.named_parameters():
        if plan.dims[name] is not None:
            sharding.shard(parameter, plan.dims[name])
    log.info("%s over %s: %s", why, shape.describe(), plan.describe())
    return sharding, plan


def follow_parameters(optimizer: Optional[torch.optim.Optimizer], average: Any = None) -> None:
    """The optimizer's state (restored from a checkpoint whole) and the weights' averages
    (``weight_average.WeightAverage``) split as their parameters are."""
    for group in optimizer.param_groups if optimizer is not None else ():
        for parameter in group["params"]:
            for value in optimizer.state.get(parameter, {}).values():
                if isinstance(value, torch.Tensor):
                    xla.shard_like(value, parameter)
    if average is not None:
        for value, parameter in zip(average.averages, average.parameters):
            xla.shard_like(value, parameter)
