"""What a platform detector yields: the ``Platform`` the job runs on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

EXPLICIT = "explicit"
TPU_NODE = "tpu-node"
TPU_VM = "tpu-vm"
LOCAL = "local"


@dataclass(frozen=True)
class TpuNodeRef:
    """A Cloud TPU node to resolve; zone/project None means "ask the GCE metadata server"."""

    name: str
    zone: Optional[str] = None
    project: Optional[str] = None

    def __str__(self) -> str:
        return "{} (zone {}, project {})".format(
            self.name, self.zone or "from metadata", self.project or "from metadata")


@dataclass(frozen=True)
class Platform:
    """Where the job runs and what the launcher knows about it.

    ``kind`` is one of EXPLICIT, TPU_NODE, TPU_VM, LOCAL. ``facts`` are ordered
    ``(label, value)`` pairs for the start-up summary; ``warnings`` are sanity-check findings
    that do not stop the job. ``user_settings`` are runtime variables the user set explicitly:
    they are kept as they are and reported, never overwritten. ``tpu_chips``: one label per
    local TPU chip (a TPU VM), such as ``"TPU v5e"``.
    """

    kind: str
    description: str
    tpu_node: Optional[TpuNodeRef] = None
    facts: Tuple[Tuple[str, str], ...] = ()
    warnings: Tuple[str, ...] = ()
    user_settings: Tuple[Tuple[str, str], ...] = ()
    tpu_chips: Tuple[str, ...] = ()
