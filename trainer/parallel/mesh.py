"""``--sharding=dp|fsdp|auto`` and ``--mesh=data:D,fsdp:F``: the job's devices as a mesh of two
axes, ``data`` and ``fsdp``.

- ``dp`` (the default): every device holds the whole model; the batch is split over all of
  them (``data`` is every device, ``fsdp`` 1).
- ``fsdp``: parameters, gradients and optimizer state are split over the ``fsdp`` axis
  (``trainer.parallel.fsdp``: each large tensor on one dimension, small ones whole); the batch
  over both axes, as in ``dp``: each device still takes its own rows. By default ``fsdp`` is
  every device (ZeRO-3 over the job); ``--mesh=data:2,fsdp:4`` on 8 devices shards over
  groups of 4 and replicates the shards over 2 (each device then holds a quarter).
- ``auto``: ``fsdp`` where the model state replicated would take more than
  ``AUTO_STATE_SHARE`` of a device's memory (``trainer.chips``), else ``dp``; ``dp``
  where the memory is unknown (the CPU device).

A mesh whose axes do not multiply to the job's device count is a usage error (exit 64).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from trainer.chips import chip
from trainer.errors import EX_USAGE, TrainerError

DP, FSDP, AUTO = "dp", "fsdp", "auto"
SHARDINGS = (DP, FSDP, AUTO)
AXES = ("data", "fsdp")

# ``auto`` shards where the replicated model state would take more than this share of a
# device's memory: the rest is the activations', the compiler's and the batches' (a
# ResNet-50 step of 128 images a chip needs several GB of activations alone).
AUTO_STATE_SHARE = 0.5


@dataclass(frozen=True)
class MeshShape:
    """The devices as ``data`` x ``fsdp``: the parameters are split ``fsdp`` ways."""

    data: int
    fsdp: int

    @property
    def devices(self) -> int:
        return self.data * self.fsdp

    @property
    def sharded(self) -> bool:
        return self.fsdp > 1

    def describe(self) -> str:
        return "data:{},fsdp:{}".format(self.data, self.fsdp)


def parse_mesh(text: str) -> Optional[Dict[str, int]]:
    """``--mesh``: None for ""; ``data:D,fsdp:F`` (either order, either alone) as a dict; a
    usage error otherwise."""
    if not text:
        return None
    sizes: Dict[str, int] = {}
    for part in text.split(","):
        match = re.fullmatch(r"\s*([a-z]+)\s*:\s*([0-9]+)\s*", part)
        if not match or match.group(1) not in AXES or match.group(1) in sizes \
                or int(match.group(2)) < 1:
            raise TrainerError("--mesh={!r} is not data:D,fsdp:F".format(text),
                               "e.g. --mesh=data:2,fsdp:4 on 8 devices (fsdp shards the model "
                               "over groups of 4), or --mesh=fsdp:8", EX_USAGE)
        sizes[match.group(1)] = int(match.group(2))
    return sizes


def check_flags(sharding: str, mesh: str) -> None:
    """The flags alone, before anything starts: a usage error naming the one that is wrong."""
    if sharding not in SHARDINGS:
        raise TrainerError("--sharding={!r} is not one of {}".format(
            sharding, ", ".join(SHARDINGS)), "dp: every device holds the whole model; fsdp: "
            "the model's state is split over the devices; auto: fsdp where it would not fit",
            EX_USAGE)
    if parse_mesh(mesh) is not None and sharding != FSDP:
        raise TrainerError("--mesh={} is for --sharding=fsdp, not --sharding={}".format(
            mesh, sharding), "add --sharding=fsdp, or drop --mesh", EX_USAGE)


def mesh_shape(sharding: str, mesh: str, devices: int) -> MeshShape:
    """The mesh of ``devices`` for ``--sharding`` (``dp`` or ``fsdp``: ``auto`` is decided by
    ``resolve`` first) and ``--mesh``."""
    if sharding != FSDP:
        return MeshShape(devices, 1)
    sizes = parse_mesh(mesh) or {}
    fsdp = sizes.get("fsdp", max(1, devices // sizes.get("data", 1)))
    data = sizes.get("data", max(1, devices // fsdp))
    if data * fsdp != devices:
        raise TrainerError("--mesh={} is {} devices; the job has {}".format(
            mesh, data * fsdp, devices), "make data x fsdp the job's device count, e.g. "
            "--mesh=data:1,fsdp:{}".format(devices), EX_USAGE)
    return MeshShape(data, fsdp)


def device_memory(kind: str) -> Optional[int]:
    """The memory of one device of ``kind`` (``xla.device_kind``), None where unknown
    (``trainer.chips``)."""
    found = chip(kind)
    return found.memory if found is not None else None


def resolve(sharding: str, replicated_bytes: int, memory: Optional[int]) -> Tuple[str, str]:
    """(``dp`` or ``fsdp``, why) for ``--sharding``: ``auto`` from the model state's bytes
    replicated on each device against the device's ``memory``."""
    if sharding != AUTO:
        return sharding, "--sharding={}".format(sharding)
    if memory is None:
        return DP, "--sharding=auto: dp, the device's memory is unknown"
    if replicated_bytes > AUTO_STATE_SHARE * memory:
        return FSDP, "--sharding=auto: fsdp, the model state replicated ({:.1f} GB) is more " \
            "than {:.0%} of a device's {:.0f} GB".format(replicated_bytes / 1e9,
                                                         AUTO_STATE_SHARE, memory / 1e9)
    return DP, "--sharding=auto: dp, the model state ({:.1f} GB) fits a device's {:.0f} GB" \
        .format(replicated_bytes / 1e9, memory / 1e9)
