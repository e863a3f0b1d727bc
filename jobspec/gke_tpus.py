"""TPU slices as GKE names them: the accelerator and topology node labels a pod selects, the
hosts and chips per host each topology has, and Kubernetes quantities in bytes.

GKE (Cloud TPU docs, "Plan TPUs in GKE"): v5e is ``tpu-v5-lite-podslice``, v6e
``tpu-v6e-slice``; topologies 1x1, 2x2 and 2x4 are one host with all of the chips
(``ct5lp-hightpu-1t/4t/8t``, ``ct6e-standard-1t/4t/8t``), larger ones are hosts of 4 chips
(``ct5lp-hightpu-4t``: 112 vCPUs; ``ct6e-standard-4t``: 180 vCPUs), e.g. 4x4 = 16 chips on 4
hosts. Every chip of these is one XLA device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"
MULTI_HOST_CHIPS = 4  # chips per host of every multi-host v5e/v6e slice


@dataclass(frozen=True)
class Accelerator:
    tpu: str
    host_cores: int  # vCPUs of a multi-host slice's host (the trainer's data workers)
    topologies: tuple


_TWO_D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
ACCELERATORS: Dict[str, Accelerator] = {
    "tpu-v5-lite-podslice": Accelerator("v5e", 112, _TWO_D),
    "tpu-v6e-slice": Accelerator("v6e", 180, _TWO_D),
}


@dataclass(frozen=True)
class SliceShape:
    chips: int
    hosts: int

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts


def slice_shape(topology: str) -> SliceShape:
    """Chips and hosts of a known topology (``AxB``)."""
    chips = 1
    for size in topology.split("x"):
        chips *= int(size)
    return SliceShape(chips, 1 if chips <= 8 else chips // MULTI_HOST_CHIPS)


_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
                       r"(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")
_SUFFIXES = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
             "Ei": 2 ** 60, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9,
             "T": 1e12, "P": 1e15, "E": 1e18}


def quantity(value: object) -> Optional[float]:
    """A Kubernetes quantity (``8Gi``, ``7G``, ``1e9``, a number) as a plain number, or None
    when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        return None
    return float(match.group(1)) * _SUFFIXES.get(match.group(2) or "", 1)


def gib(count: float) -> str:
    """Bytes as the whole GiB a sizeLimit would say (rounded up)."""
    return "{}Gi".format(max(1, -(-int(count) // 2 ** 30)))


def as_mapping(value: Any) -> Dict[str, Any]:
    """``value`` when it is a mapping, else an empty one: the rules read around values of the
    wrong type, which the schema reports."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []
