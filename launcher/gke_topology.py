"""What GKE's TPU device plugin tells a pod about its slice, read once and checked for
agreement before the trainer starts.

A container that requests ``google.com/tpu`` on GKE gets ``TPU_SKIP_MDS_QUERY`` (so libtpu
and torch_xla read the slice from the environment, not from the metadata server),
``TPU_ACCELERATOR_TYPE`` (``v5litepod-16``, ``v6e-16``, ``v4-16``, ``tpu7x-32``),
``TPU_TOPOLOGY`` (``4x4``: the slice's chips along each axis), ``TPU_HOST_BOUNDS`` and
``TPU_CHIPS_PER_HOST_BOUNDS`` (``"2,2,1"``: hosts and chips per host along each axis); GKE's
webhook adds ``TPU_WORKER_ID`` and ``TPU_WORKER_HOSTNAMES`` in an
indexed Job, or, on TPU7x, ``TPU_PROCESS_ADDRESSES`` and ``TPU_PROCESS_PORT`` instead of the
host names. A pod on the wrong node pool, or a template whose ``parallelism`` is not the
slice's hosts, gets values that disagree, and the slice would hang while forming; so on such a
pod the launcher checks that the hosts the bounds give, the host list (or the process
addresses, each listed once, with ``TPU_WORKER_ID`` one of them), the topology, the accelerator
type's chips and this host's chips (at least the bounds' chips per host) agree, and stops with
one line naming the variables when they do not (exit 78).

Chips in an accelerator type's name: v5e (``v5litepod-N``, ``v5e-N``) and v6e (``v6e-N``)
count chips; v2, v3, v4, v5p and TPU7x count TensorCores, two per chip.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from launcher.errors import ConfigError

HAND_TOPOLOGY = "TPU_SKIP_MDS_QUERY"
_CORES_PER_CHIP = {"v2": 2, "v3": 2, "v4": 2, "v5p": 2, "tpu7x": 2, "v5litepod": 1, "v5e": 1,
                   "v6e": 1}
_ACCELERATOR = re.compile(r"(v2|v3|v4|v5p|tpu7x|v5litepod|v5e|v6e)-(\d+)")
_HINT = ("the pod's node pool must be the slice the JobSet names (nodeSelector "
         "cloud.google.com/gke-tpu-topology), with parallelism = completions = its hosts; "
         "GKE sets these variables: do not set them by hand")


@dataclass(frozen=True)
class GkeTopology:
    """The slice as GKE describes it to this pod; None fields were not set."""

    accelerator_type: Optional[str] = None
    host_bounds: Optional[Tuple[int, ...]] = None
    chips_per_host_bounds: Optional[Tuple[int, ...]] = None
    process_addresses: Tuple[str, ...] = ()
    topology: Optional[Tuple[int, ...]] = None
    worker_id: Optional[str] = None

    @classmethod
    def parse(cls, environ: Mapping[str, str]) -> Optional["GkeTopology"]:
        """None unless ``TPU_SKIP_MDS_QUERY`` says the environment describes the slice; a
        ``ConfigError`` naming a bounds variable that is not a list of positive counts."""
        if not environ.get(HAND_TOPOLOGY):  # any value, "0" too, as torch_xla reads it
            return None
        addresses = environ.get("TPU_PROCESS_ADDRESSES", "").strip()
        return cls(accelerator_type=environ.get("TPU_ACCELERATOR_TYPE", "").strip() or None,
                   host_bounds=_bounds(environ, "TPU_HOST_BOUNDS"),
                   chips_per_host_bounds=_bounds(environ, "TPU_CHIPS_PER_HOST_BOUNDS"),
                   process_addresses=tuple(a.strip() for a in addresses.split(","))
                   if addresses else (),
                   topology=_topology(environ),
                   worker_id=environ.get("TPU_WORKER_ID", "").strip() or None)

    @property
    def hosts(self) -> Optional[int]:
        return _product(self.host_bounds)

    @property
    def chips_per_host(self) -> Optional[int]:
        return _product(self.chips_per_host_bounds)

    def check(self, hostnames: Tuple[str, ...], local_chips: Optional[int]) -> None:
        """Raise ``ConfigError`` naming the variables that disagree: the hosts of
        ``TPU_HOST_BOUNDS`` against ``TPU_WORKER_HOSTNAMES`` (``hostnames``; empty: not set)
        or ``TPU_PROCESS_ADDRESSES``, hosts x ``TPU_CHIPS_PER_HOST_BOUNDS`` against the chips
        of ``TPU_ACCELERATOR_TYPE``, and the chips per host against ``local_chips`` (the TPU
        chips visible here, at least as many; None: not known, as in a dry run without
        chips)."""
        hosts, per_host = self.hosts, self.chips_per_host
        bounds = "TPU_HOST_BOUNDS={}".format(_text(self.host_bounds))
        for listed, variable in ((hostnames, "TPU_WORKER_HOSTNAMES"),
                                 (self.process_addresses, "TPU_PROCESS_ADDRESSES")):
            if hosts is not None and listed and len(listed) != hosts:
                raise ConfigError("{} lists {} host{} but {} makes the slice {} host{}".format(
                    variable, len(listed), _s(len(listed)), bounds, hosts, _s(hosts)), _HINT)
        self._check_process_addresses()
        self._check_topology()
        chips = accelerator_chips(self.accelerator_type)
        if chips is not None and hosts is not None and per_host is not None \
                and hosts * per_host != chips:
            raise ConfigError("TPU_ACCELERATOR_TYPE={} has {} chips but {} x "
                              "TPU_CHIPS_PER_HOST_BOUNDS={} make {}".format(
                                  self.accelerator_type, chips, bounds,
                                  _text(self.chips_per_host_bounds), hosts * per_host), _HINT)
        # More chips than that can be visible: /sys shows the whole host's PCI devices to a
        # pod given some of them (TPU_VISIBLE_CHIPS).
        if per_host is not None and local_chips is not None and local_chips < per_host:
            raise ConfigError("TPU_CHIPS_PER_HOST_BOUNDS={} gives this host {} chip{}, but only "
                              "{} {} visible here".format(
                                  _text(self.chips_per_host_bounds), per_host, _s(per_host),
                                  local_chips, "is" if local_chips == 1 else "are"),
                              "request google.com/tpu: {} (every chip of the host) in the "
                              "trainer's container; ".format(per_host) + _HINT)

    def _check_process_addresses(self) -> None:
        """On TPU7x the hosts come as ``TPU_PROCESS_ADDRESSES``: each once, and
        ``TPU_WORKER_ID`` one of them (``SliceHost`` checks the same for host names)."""
        addresses = self.process_addresses
        if not addresses:
            return
        repeated = first_repeat(addresses)
        if repeated is not None or not all(addresses):
            raise ConfigError("TPU_PROCESS_ADDRESSES={!r} {}".format(
                ",".join(addresses), "lists {} twice".format(repeated) if repeated is not None
                else "has an empty address"), _HINT)
        worker = self.worker_id
        if worker is not None and (not (worker.isdigit() and worker.isascii())
                                   or int(worker) >= len(addresses)):
            raise ConfigError("TPU_WORKER_ID={!r} is not a worker of the {} host{} "
                              "TPU_PROCESS_ADDRESSES lists (0 to {})".format(
                                  worker, len(addresses), _s(len(addresses)),
                                  len(addresses) - 1), _HINT)

    def _check_topology(self) -> None:
        """``TPU_TOPOLOGY`` (chips along each axis) against the host bounds times the chips
        per host bounds, axis by axis. Compared as sorted sizes with the axes of size 1
        left out: ``4x4`` is ``2,2,1`` x ``2,2,1``, and a name's axis order is not one this
        launcher could check against every TPU generation's plugin."""
        if self.topology is None or self.host_bounds is None \
                or self.chips_per_host_bounds is None:
            return
        length = max(len(self.host_bounds), len(self.chips_per_host_bounds))
        hosts = self.host_bounds + (1,) * (length - len(self.host_bounds))
        chips = self.chips_per_host_bounds + (1,) * (length - len(self.chips_per_host_bounds))
        product = tuple(host * chip for host, chip in zip(hosts, chips))
        if _shape(product) != _shape(self.topology):
            raise ConfigError("TPU_TOPOLOGY={} does not match TPU_HOST_BOUNDS={} x "
                              "TPU_CHIPS_PER_HOST_BOUNDS={} ({} chips along the axes)".format(
                                  "x".join(str(size) for size in self.topology),
                                  _text(self.host_bounds), _text(self.chips_per_host_bounds),
                                  "x".join(str(size) for size in product)), _HINT)

    def describe(self) -> str:
        """One line for the start-up summary."""
        parts = ["TPU_ACCELERATOR_TYPE=" + self.accelerator_type] if self.accelerator_type \
            else []
        if self.hosts is not None:
            parts.append("{} host{} (TPU_HOST_BOUNDS={})".format(
                self.hosts, _s(self.hosts), _text(self.host_bounds)))
        if self.chips_per_host is not None:
            parts.append("{} chip{} per host (TPU_CHIPS_PER_HOST_BOUNDS={})".format(
                self.chips_per_host, _s(self.chips_per_host),
                _text(self.chips_per_host_bounds)))
        return ", ".join(parts) or "TPU_SKIP_MDS_QUERY set, no bounds"


def accelerator_chips(accelerator_type: Optional[str]) -> Optional[int]:
    """The chips of a TPU accelerator type (``v5litepod-16``: 16; ``v4-16``: 8), or None
    for a name this launcher does not know."""
    match = _ACCELERATOR.fullmatch((accelerator_type or "").strip().lower())
    if not match:
        return None
    return int(match.group(2)) // _CORES_PER_CHIP[match.group(1)]


def _bounds(environ: Mapping[str, str], name: str) -> Optional[Tuple[int, ...]]:
    text = environ.get(name, "").strip()
    if not text:
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() and part.isascii() and int(part) > 0 for part in parts):
        raise ConfigError("{}={!r} is not a list of positive counts".format(name, text),
                          "GKE sets e.g. {}=2,2,1; ".format(name) + _HINT)
    return tuple(int(part) for part in parts)


def _topology(environ: Mapping[str, str]) -> Optional[Tuple[int, ...]]:
    text = environ.get("TPU_TOPOLOGY", "").strip()
    if not text:
        return None
    parts = [part.strip() for part in text.lower().split("x")]
    if not all(part.isdigit() and part.isascii() and int(part) > 0 for part in parts):
        raise ConfigError("TPU_TOPOLOGY={!r} is not chips along each axis".format(text),
                          "GKE sets e.g. TPU_TOPOLOGY=4x4; " + _HINT)
    return tuple(int(part) for part in parts)


def _shape(sizes: Tuple[int, ...]) -> Tuple[int, ...]:
    """The axes' sizes in order, those of 1 left out."""
    return tuple(sorted(size for size in sizes if size != 1))


def first_repeat(names: Tuple[str, ...]) -> Optional[str]:
    """The first name ``names`` lists a second time, or None."""
    seen = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _product(bounds: Optional[Tuple[int, ...]]) -> Optional[int]:
    if bounds is None:
        return None
    result = 1
    for size in bounds:
        result *= size
    return result


def _text(bounds: Optional[Tuple[int, ...]]) -> str:
    return ",".join(str(size) for size in bounds) if bounds else "(not set)"


def _s(count: int) -> str:
    return "" if count == 1 else "s"
