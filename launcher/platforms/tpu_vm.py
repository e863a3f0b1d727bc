"""TPU VM (Vertex AI, GKE, a TPU VM you ssh into): the TPU chips are local to this machine.

Detected by local TPU chips: PCI devices of Google's vendor id 0x1ae0 with a TPU device id
(the ids torch_xla 2.9 counts) under ``/sys/bus/pci/devices``, or ``/dev/accel*``, or numbered
``/dev/vfio/N`` entries. Google makes other PCI devices too, on machines without TPUs: the
gVNIC network card (``1ae0:0042``, on every C3/N4/C4 VM) and the Persistent Disk NVMe
controller (``1ae0:001f``); they and any id nobody knows are never counted as chips. When the
environment says TPUs are expected (``TPU_ACCELERATOR_TYPE``, ``TPU_WORKER_ID``,
``TPU_WORKER_HOSTNAMES``, or a TPU machine in Vertex's ``CLUSTER_SPEC``) but no chip is
visible, detection fails loudly instead of letting the job fall back to the CPU; in a dry run
(``rehearsal``) it says so in a warning and shows what a host of the slice would get, so a
slice's environment can be rehearsed on a machine without TPUs (docs/gke.md).

On a multi-host slice (GKE's ``TPU_WORKER_ID`` and ``TPU_WORKER_HOSTNAMES``) the summary says
which host this is and how many the slice has. On a GKE TPU pod (``TPU_SKIP_MDS_QUERY``) the
slice's bounds, host list, accelerator type and this host's chips must agree
(``launcher.gke_topology``), in a dry run too (without chips, less the chips).
"""

from __future__ import annotations

import os
from typing import List, Optional, Tuple

from launcher.errors import ConfigError
from launcher.job_env import JobEnvironment
from launcher.platforms.base import TPU_VM, Platform

GOOGLE_PCI_VENDOR = "0x1ae0"
# PCI device ids of TPU chips: torch_xla/_internal/tpu.py of v2.9.0 counts exactly these.
TPU_PCI_DEVICES = {"0x0027": "v2/v3", "0x005e": "v4", "0x0062": "v5p", "0x0063": "v5e",
                   "0x006f": "v6e", "0x0056": "device 0x0056", "0x0076": "TPU7x"}
# Google PCI devices that are not TPUs.
OTHER_GOOGLE_DEVICES = {"0x0042": "gVNIC network card", "0x001f": "Persistent Disk NVMe"}


def detect(job_env: JobEnvironment, root: str) -> Optional[Platform]:
    """A TPU_VM platform when TPU chips are visible under ``root``, else None.

    Raises ConfigError when the environment expects TPUs but none is visible.
    """
    google_ids = _google_device_ids(root)  # one scan of the PCI bus for both uses below
    chips = find_tpu_chips(root, google_ids)
    others = _not_tpus(google_ids)
    hints = _tpu_hints(job_env)
    slice_facts = (("slice", job_env.slice_host.describe()),) if job_env.slice_host else ()
    topology = job_env.gke_topology
    if topology is not None:
        topology.check(job_env.slice_host.hostnames if job_env.slice_host else (),
                       _chip_count(chips))
        slice_facts += (("GKE slice", topology.describe()),)
    if not chips:
        if hints:
            missing = NoTpuChipsError(
                "{} says this job has TPUs, but no TPU chip is visible (no TPU device of PCI "
                "vendor {} under {}{}, no /dev/accel*, no /dev/vfio/N)".format(
                    hints[0], GOOGLE_PCI_VENDOR, os.path.join(root, "sys/bus/pci/devices"),
                    "; only " + ", ".join(others) if others else ""),
                "give the container the TPU devices (docker run --privileged or --device), or "
                "remove the TPU settings to train on the CPU")
            raise missing.with_rehearsal(Platform(
                kind=TPU_VM, description="TPU VM (dry run: no TPU chip is visible here)",
                facts=slice_facts + tuple(("hint", hint) for hint in hints),
                warnings=("dry run without TPU chips: a real run stops here (exit {}): "
                          "{}".format(missing.exit_code, missing.message),)))
        return None
    facts = [("TPU chips", "{} ({})".format(len(chips), ", ".join(sorted(set(chips)))))]
    facts.extend(slice_facts)
    facts.extend(("hint", hint) for hint in hints)
    facts.extend(("not a TPU", other) for other in others)
    return Platform(kind=TPU_VM, description="TPU VM with local chips", facts=tuple(facts),
                    tpu_chips=chips)


class NoTpuChipsError(ConfigError):
    """The environment expects TPU chips and none is visible. ``rehearsal``: the platform a
    host with chips would be, which a dry run shows instead of failing."""

    rehearsal: Optional[Platform] = None

    def with_rehearsal(self, platform: Platform) -> "NoTpuChipsError":
        self.rehearsal = platform
        return self


def find_tpu_chips(root: str, google_ids: Optional[List[str]] = None) -> Tuple[str, ...]:
    """One label per local TPU chip seen under ``root`` (e.g. ``"TPU v4"``,
    ``"/dev/accel0"``); ``google_ids``: the PCI scan, when the caller has made it."""
    ids = _google_device_ids(root) if google_ids is None else google_ids
    chips = tuple("TPU " + TPU_PCI_DEVICES[device_id] for device_id in ids
                  if device_id in TPU_PCI_DEVICES)
    if chips:
        return chips
    dev = os.path.join(root, "dev")
    accel = sorted("/dev/" + name for name in _listdir(dev) if name.startswith("accel"))
    if accel:
        return tuple(accel)
    vfio = sorted("/dev/vfio/" + name for name in _listdir(os.path.join(dev, "vfio"))
                  if name.isdigit())
    return tuple(vfio)


def other_google_devices(root: str) -> Tuple[str, ...]:
    """Google PCI devices under ``root`` that are not TPU chips, each named with its id
    (``"1ae0:0042 (gVNIC network card)"``; an unknown id says so)."""
    return _not_tpus(_google_device_ids(root))


def _not_tpus(google_ids: List[str]) -> Tuple[str, ...]:
    return tuple("{}:{} ({})".format(GOOGLE_PCI_VENDOR[2:], device_id[2:],
                                     OTHER_GOOGLE_DEVICES.get(device_id, "unknown, not a TPU "
                                                              "torch_xla knows"))
                 for device_id in google_ids if device_id not in TPU_PCI_DEVICES)


def _chip_count(chips: Tuple[str, ...]) -> Optional[int]:
    """The local chips, when they are known as chips (PCI ids), else None."""
    if chips and all(chip.startswith("TPU ") for chip in chips):
        return len(chips)
    return None


def _google_device_ids(root: str) -> List[str]:
    """The device ids of Google's PCI devices under ``root``, in bus order."""
    devices_dir = os.path.join(root, "sys", "bus", "pci", "devices")
    ids = []
    for device in sorted(_listdir(devices_dir)):
        device_path = os.path.join(devices_dir, device)
        if _read(os.path.join(device_path, "vendor")) == GOOGLE_PCI_VENDOR:
            ids.append(_read(os.path.join(device_path, "device")))
    return ids


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
