"""The devices a job will train on, as the launcher can tell before the trainer starts: how
many this host has, how many the trainer will use (``--devices``, default ``auto``), and the
inherited topology variables that must not reach it.

The trainer decides for itself (``trainer.devices``), from the runtime's own counts; this is
the launcher's account of it for the log, from what it can see without torch_xla:

- PJRT on a TPU VM: every local chip's devices (a v2/v3 chip has two; later chips one) in one
  SPMD program;
- PJRT on the CPU: ``CPU_NUM_DEVICES`` devices (default 1);
- XRT (torch_xla 1.x, the TPU node image): one device; torch_xla 1.x reaches a TPU's other
  cores only with one process per core, which this image does not run.

Stale topology: torch_xla sets ``TPU_PROCESS_ADDRESSES``, ``TPU_VISIBLE_CHIPS``,
``TPU_PROCESS_BOUNDS``... for processes it starts one per chip, and keeps values it finds. Left
over in an image or a shell, they make the runtime expect other processes ("Expected 4 worker
addresses, got 1"). The trainer runs one process per host, so the launcher unsets them; the
chip and bounds variables stay when ``TPU_SKIP_MDS_QUERY`` says the environment describes the
topology (GKE's device plugin, or a user by hand). ``TPU_PROCESS_ADDRESSES`` and
``TPU_PROCESS_PORT`` stay too where GKE set them: on TPU7x it gives the slice's hosts that way
instead of ``TPU_WORKER_HOSTNAMES`` (so: ``TPU_SKIP_MDS_QUERY`` and ``TPU_HOST_BOUNDS`` set, no
host names), and ``launcher.gke_topology`` checks the addresses against ``TPU_HOST_BOUNDS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from launcher.errors import ConfigError
from launcher.gke_topology import HAND_TOPOLOGY
from launcher.platforms.base import EXPLICIT, LOCAL, TPU_VM, Platform
from launcher.runtime import PJRT, XlaRuntime

# Set by torch_xla for one process per chip: never right for one process per host.
PER_PROCESS_VARIABLES = ("TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT")
# Also set by torch_xla per process, but a user describing the topology by hand sets them too.
TOPOLOGY_VARIABLES = ("TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS")
DEVICES_PER_CHIP = {"TPU v2/v3": 2}  # two TensorCores, each its own device; later chips: one


def stale_topology(environ: Mapping[str, str]) -> Tuple[str, ...]:
    """The topology variables in ``environ`` to unset for the trainer."""
    described = bool(environ.get(HAND_TOPOLOGY))  # any value, as torch_xla reads it
    names = () if described and gke_process_addresses(environ) else PER_PROCESS_VARIABLES
    if not described:
        names += TOPOLOGY_VARIABLES
    return tuple(name for name in names if name in environ)


def gke_process_addresses(environ: Mapping[str, str]) -> bool:
    """Whether GKE gave the slice's hosts as ``TPU_PROCESS_ADDRESSES`` (TPU7x): with
    ``TPU_HOST_BOUNDS``, which they are checked against, and no ``TPU_WORKER_HOSTNAMES``."""
    return all(environ.get(name, "").strip() for name in ("TPU_PROCESS_ADDRESSES",
                                                            "TPU_HOST_BOUNDS")) \
        and not environ.get("TPU_WORKER_HOSTNAMES", "").strip()


@dataclass(frozen=True)
class DeviceCount:
    """``used`` of ``found`` devices on this host (None: not known before the runtime
    starts), and why. ``command_decides``: a command of the user's, whose use of them is its
    own (``host_devices``)."""

    used: Optional[int]
    found: Optional[int]
    why: str
    command_decides: bool = False

    def describe(self) -> str:
        if self.command_decides:
            found = self.why if self.found is None else "{} on this host ({})".format(
                self.found, self.why)
            return found + "; the command decides how many it uses"
        if self.used is None:
            return "decided by the trainer ({})".format(self.why)
        if self.found is None:
            return "the trainer uses {} ({})".format(self.used, self.why)
        text = "the trainer uses {} of {} on this host ({})".format(self.used, self.found,
                                                                    self.why)
        if self.used < self.found:
            text += "; {} idle".format(self.found - self.used)
        return text


def count_devices(platform: Platform, runtime: XlaRuntime, environ: Mapping[str, str],
                  trainer_args: Sequence[str]) -> DeviceCount:
    """The devices ``runtime`` finds on ``platform`` and the trainer will use; a
    ``CPU_NUM_DEVICES`` that is not a positive count is a ``ConfigError``."""
    requested = requested_devices(trainer_args)
    if runtime.name != PJRT:
        why = "torch_xla {} drives one device per process".format(
            runtime.torch_xla_version or "1.x")
        return DeviceCount(1, _tpu_devices(platform), why)
    found, source = _pjrt_devices(platform, environ)
    if requested in (None, "auto"):
        if found is None:
            return DeviceCount(None, None, "--devices=auto: all of " + source)
        program = "one SPMD program over " if found > 1 else ""
        return DeviceCount(found, found, "--devices=auto: " + program + source)
    if requested.isdigit() and found is not None and int(requested) in (1, found):
        return DeviceCount(int(requested), found, "--devices={}; {}".format(requested, source))
    return DeviceCount(None, found, "--devices={}, {}: the trainer checks it".format(
        requested, source))


def host_devices(platform: Platform, runtime: XlaRuntime, environ: Mapping[str, str]
                 ) -> DeviceCount:
    """The devices ``runtime`` finds on ``platform`` for a command of the user's: how many it
    uses, and whether as one SPMD program, is its own choice (``--devices`` and the SPMD
    program are the bundled trainers'), so nothing is said about it."""
    if runtime.name != PJRT:
        return DeviceCount(None, _tpu_devices(platform), "torch_xla {} drives one device per "
                           "process".format(runtime.torch_xla_version or "1.x"),
                           command_decides=True)
    found, source = _pjrt_devices(platform, environ)
    return DeviceCount(None, found, source, command_decides=True)


def requested_devices(trainer_args: Sequence[str]) -> Optional[str]:
    """The trainer's ``--devices`` value (the last one, as absl takes it), or None."""
    value = None
    for index, arg in enumerate(trainer_args):
        if arg.startswith("--devices="):
            value = arg.split("=", 1)[1]
        elif arg == "--devices" and index + 1 < len(trainer_args):
            value = trainer_args[index + 1]
    return None if value is None else value.strip().lower()


def _pjrt_devices(platform: Platform, environ: Mapping[str, str]) -> Tuple[Optional[int], str]:
    settings = dict(platform.user_settings)
    on_cpu = platform.kind == LOCAL or (platform.kind == EXPLICIT
                                        and settings.get("PJRT_DEVICE") == "CPU")
    if on_cpu:
        count = cpu_num_devices(environ)
        return count, ("the CPU device" if "CPU_NUM_DEVICES" not in environ else
                       "CPU_NUM_DEVICES={} CPU devices".format(count))
    found = _tpu_devices(platform)
    if found is None:
        return None, "the devices the runtime finds"
    chips = len(platform.tpu_chips)
    return found, "{} chip{} ({})".format(chips, "" if chips == 1 else "s",
                                          ", ".join(sorted(set(platform.tpu_chips))))


def _tpu_devices(platform: Platform) -> Optional[int]:
    """This host's TPU devices, when its chips are known (a TPU VM's PCI ids)."""
    if platform.kind != TPU_VM or not platform.tpu_chips or not all(
            chip.startswith("TPU ") for chip in platform.tpu_chips):
        return None
    return sum(DEVICES_PER_CHIP.get(chip, 1) for chip in platform.tpu_chips)


def cpu_num_devices(environ: Mapping[str, str]) -> int:
    """``CPU_NUM_DEVICES`` (default 1): the XLA CPU devices PJRT gives one process."""
    text = environ.get("CPU_NUM_DEVICES", "").strip()
    if not text:
        return 1
    if text.isdigit() and text.isascii() and int(text) > 0:
        return int(text)
    raise ConfigError("CPU_NUM_DEVICES={!r} is not a positive number of devices".format(text),
                      "e.g. CPU_NUM_DEVICES=4 gives the trainer 4 CPU devices; unset it for 1")
