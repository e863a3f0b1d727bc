"""TPU VM (Vertex AI, GKE, a TPU VM you ssh into): the TPU chips are local to this machine.

Detected by local TPU chips: PCI devices of Google's vendor id 0x1ae0 under
``/sys/bus/pci/devices``, or ``/dev/accel*``, or numbered ``/dev/vfio/N`` entries. When the
environment says TPUs are expected (``TPU_ACCELERATOR_TYPE``, ``TPU_WORKER_ID``,
``TPU_WORKER_HOSTNAMES``, or a TPU machine in Vertex's ``CLUSTER_SPEC``) but no chip is
visible, detection fails loudly instead of letting the job fall back to the CPU.
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from launcher.errors import ConfigError
from launcher.job_env import JobEnvironment
from launcher.platforms.base import TPU_VM, Platform

GOOGLE_PCI_VENDOR = "0x1ae0"
# PCI device ids of TPU chips (PLATFORM.md section 4).
TPU_PCI_DEVICES = {"0x0027": "v2/v3", "0x005e": "v4", "0x0063": "v5e", "0x006f": "v6e"}


def detect(job_env: JobEnvironment, root: str) -> Optional[Platform]:
    """A TPU_VM platform when TPU chips are visible under ``root``, else None.

    Raises ConfigError when the environment expects TPUs but none is visible.
    """
    chips = find_tpu_chips(root)
    hints = _tpu_hints(job_env)
    if not chips:
        if hints:
            raise ConfigError(
                "{} says this job has TPUs, but no TPU chip is visible (no PCI vendor {} under "
                "{}, no /dev/accel*, no /dev/vfio/N)".format(
                    hints[0], GOOGLE_PCI_VENDOR, os.path.join(root, "sys/bus/pci/devices")),
                "give the container the TPU devices (docker run --privileged or --device), or "
                "remove the TPU settings to train on the CPU")
        return None
    facts = [("TPU chips", "{} ({})".format(len(chips), ", ".join(sorted(set(chips)))))]
    facts.extend(("hint", hint) for hint in hints)
    return Platform(kind=TPU_VM, description="TPU VM with local chips", facts=tuple(facts))


def find_tpu_chips(root: str) -> Tuple[str, ...]:
    """One label per local TPU chip seen under ``root`` (e.g. ``"v4"``, ``"/dev/accel0"``)."""
    chips = _pci_chips(os.path.join(root, "sys", "bus", "pci", "devices"))
    if chips:
        return chips
    dev = os.path.join(root, "dev")
    accel = sorted("/dev/" + name for name in _listdir(dev) if name.startswith("accel"))
    if accel:
        return tuple(accel)
    vfio = sorted("/dev/vfio/" + name for name in _listdir(os.path.join(dev, "vfio"))
                  if name.isdigit())
    return tuple(vfio)


def _pci_chips(devices_dir: str) -> Tuple[str, ...]:
    chips: List[str] = []
    for device in sorted(_listdir(devices_dir)):
        path = os.path.join(devices_dir, device)
        if _read(os.path.join(path, "vendor")) == GOOGLE_PCI_VENDOR:
            device_id = _read(os.path.join(path, "device"))
            chips.append("TPU " + TPU_PCI_DEVICES.get(device_id, "device " + device_id))
    return tuple(chips)


def _tpu_hints(job_env: JobEnvironment) -> List[str]:
    hints = ["{}={}".format(name, value) for name, value in job_env.tpu_vm_hints]
    if job_env.cluster_spec is not None and job_env.cluster_spec.requests_tpu:
        hints.append("CLUSTER_SPEC (TPU machine {})".format(
            ", ".join(job_env.cluster_spec.machine_types + job_env.cluster_spec.accelerator_types)))
    return hints


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip().lower()
    except OSError:
        return ""
