"""How many processes decode images when the user does not say: one for every core this
process may use but the trainer's own, and fewer only where the memory this process may use
cannot hold them.

- Cores: the CPUs this process may run on (its affinity: a container's CPU set), and no more
  than a cgroup's CPU quota allows (``docker run --cpus``, a Kubernetes CPU limit; cgroup v1
  ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and v2 ``cpu.max``), rounded down: a worker
  past the quota is throttled and slows the trainer's own step launches with it.
- Memory: a cgroup's memory limit (v1 ``memory.limit_in_bytes``, v2 ``memory.max``), else the
  host's ``MemTotal``. Each worker takes its own process memory and the encoded runs it holds;
  the step ring they decode into and the trainer's own take the same for any number of them
  (``trainer.data.plan.data_memory`` states the arithmetic).

A host of 180 vCPUs and 720 GB (a v6e host with 8 chips) gets 179 workers: memory would hold
thousands. ``python -m trainer.data.plan --host_cores=180 --host_memory_gb=720
--devices_per_host=8`` prints the choice and what it takes for any host.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from trainer.data.plan import IMAGENET_EXAMPLE_BYTES, SliceShape, data_memory

log = logging.getLogger("trainer")

CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
MEMINFO = "/proc/meminfo"
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit number; anything this large is
# no limit.
NO_LIMIT = 2 ** 60
TRAINER_PROCESSES = 1  # the trainer's own process: it hands batches over and launches steps


@dataclass(frozen=True)
class Host:
    """What this process may use: ``cores`` (at least 1) and ``memory`` bytes (0: unknown,
    no limit from memory); ``why`` says where each came from (for the start-up line)."""

    cores: int
    memory: int
    why: str = ""


def affinity_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cgroup_cpu_limit(root: str = CGROUP_ROOT, self_cgroup: str = SELF_CGROUP) -> float:
    """The cores the CPU quota of this process's cgroup (and its parents') allows, as a
    fraction (``quota / period``); 0.0 where there is no quota or no cgroup to read."""
    limits = []
    for folder, version in _cgroup_dirs(root, self_cgroup, "cpu"):
        if version == 2:
            fields = _read(os.path.join(folder, "cpu.max")).split()
            if len(fields) == 2 and fields[0] != "max":
                limits.append(_ratio(fields[0], fields[1]))
        else:
            limits.append(_ratio(_read(os.path.join(folder, "cpu.cfs_quota_us")),
                                 _read(os.path.join(folder, "cpu.cfs_period_us"))))
    limits = [limit for limit in limits if limit > 0]
    return min(limits) if limits else 0.0


def cgroup_memory_limit(root: str = CGROUP_ROOT, self_cgroup: str = SELF_CGROUP) -> int:
    """Bytes the memory limit of this process's cgroup (and its parents') allows; 0 where
    there is none or no cgroup to read."""
    limits = []
    for folder, version in _cgroup_dirs(root, self_cgroup, "memory"):
        text = _read(os.path.join(folder, "memory.max" if version == 2
                                  else "memory.limit_in_bytes"))
        if text.isdigit() and 0 < int(text) < NO_LIMIT:
            limits.append(int(text))
    return min(limits) if limits else 0


def mem_total(meminfo: str = MEMINFO) -> int:
    """The host's ``MemTotal`` in bytes; 0 where there is no ``/proc/meminfo``."""
    for line in _read(meminfo).splitlines():
        fields = line.split()
        if fields[:1] == ["MemTotal:"] and len(fields) >= 2 and fields[1].isdigit():
            return int(fields[1]) * 1024
    return 0


def this_host(root: str = CGROUP_ROOT, self_cgroup: str = SELF_CGROUP,
              meminfo: str = MEMINFO) -> Host:
    """The cores and memory this process may use (see the module's docstring)."""
    cores, quota = affinity_cores(), cgroup_cpu_limit(root, self_cgroup)
    why = ["{} cores in its CPU affinity".format(cores)]
    if quota and int(quota) < cores:
        cores = max(1, int(quota))
        why.append("a cgroup CPU quota of {:g} cores".format(quota))
    total, limit = mem_total(meminfo), cgroup_memory_limit(root, self_cgroup)
    memory = min(value for value in (total, limit) if value) if total or limit else 0
    why.append("{} memory{}".format(
        _gb(memory), " (its cgroup's limit)" if limit and memory == limit else " (MemTotal)"
        if memory else " unknown"))
    return Host(cores, memory, ", ".join(why))


def host_cores() -> int:
    """The cores this process may use: its affinity, within a cgroup's CPU quota."""
    return this_host().cores


@dataclass(frozen=True)
class WorkerChoice:
    """The default worker count for a host and what decided it."""

    workers: int
    host: Host
    by_memory: Optional[int]  # the most workers the memory holds (None: memory unknown)
    fixed: int  # bytes the trainer and the step ring take, whatever the workers' number
    per_worker: int  # bytes each worker adds

    @property
    def memory_bound(self) -> bool:
        return self.by_memory is not None and self.by_memory < self.host.cores - 1

    @property
    def memory_holds(self) -> Optional[int]:
        """The most workers the memory holds where that is fewer than the cores would run
        (the input-bound advice must not ask for more); None where memory is no limit."""
        return max(0, self.by_memory or 0) if self.memory_bound else None

    @property
    def total(self) -> int:
        """Bytes the trainer, the ring and ``workers`` workers take on the host (estimate)."""
        return self.fixed + self.workers * self.per_worker

    def line(self) -> str:
        """The start-up line."""
        limit = ("memory holds only {}: {} each beside {} for the trainer, the step ring and "
                 "the runs in flight".format(
            max(0, self.by_memory or 0), _gb(self.per_worker), _gb(self.fixed))
            if self.memory_bound else "one per core but the trainer's{}".format(
                "; memory would hold {:,}".format(self.by_memory)
                if self.by_memory is not None else ""))
        return ("data workers: {} ({}); with them the host's data and processes take about "
                "{} (estimate); the host: {}".format(
                    self.workers, limit, _gb(self.total), self.host.why or "{} cores".format(
                        self.host.cores)))


def auto_workers(cores: int = 0, memory: int = 0, need: Tuple[int, int] = (0, 0)) -> int:
    """Data workers for a host with ``cores`` cores (default: this one's) and ``memory`` bytes
    (0: not limited by memory) where the data takes ``need`` = (fixed, per worker) bytes:
    at least 1."""
    return choose(Host(cores or host_cores(), memory), need).workers


def choose(host: Host, need: Tuple[int, int]) -> WorkerChoice:
    """``host``'s cores less the trainer's, fewer where ``need`` = (fixed bytes, bytes per
    worker) leaves memory for fewer; at least 1 (a host too small for one is told so by the
    ``/dev/shm`` check and the start-up line, and ``--num_workers=0`` needs no ring)."""
    fixed, per_worker = need
    by_memory = None
    if host.memory and per_worker:
        by_memory = max(0, (host.memory - fixed) // per_worker)
    workers = host.cores - TRAINER_PROCESSES
    if by_memory is not None:
        workers = min(workers, by_memory)
    return WorkerChoice(max(1, workers), host, by_memory, fixed, per_worker)


def worker_choice(shape: Optional[SliceShape]) -> WorkerChoice:
    """``choose`` for this host and the data of ``shape`` (an ImageNet-like shard set's;
    None: no memory need known)."""
    need = data_memory(shape, IMAGENET_EXAMPLE_BYTES) if shape is not None else (0, 0)
    return choose(this_host(), need)


def resolve_workers(requested: int, shape: Optional[SliceShape] = None,
                    announce: bool = True) -> int:
    """``--num_workers``: -1 chooses (``choose`` for this host and the data of ``shape``, an
    ImageNet-like shard set's; logged unless not ``announce``), 0 decodes in the training
    process."""
    if requested >= 0:
        return requested
    choice = worker_choice(shape)
    if announce:
        log.info("%s", choice.line())
    return choice.workers


# The data tools' --workers means what the trainers' --num_workers means: -1 (their default)
# chooses, 0 runs no worker process (the work is done in the tool's own process).
TOOL_WORKERS_HELP = ("worker processes: -1 (default) one per host core; 0 none, the work runs "
                     "in this process; N: N processes")


def tool_workers(requested: int) -> int:
    """A data tool's ``--workers`` (``make_shards``, ``reindex``): -1 one process per host core
    (no training process shares the host), 0 none (``worker_pool`` then runs every task in
    this process), else that many."""
    return host_cores() if requested < 0 else requested


def _cgroup_dirs(root: str, self_cgroup: str, controller: str) -> List[Tuple[str, int]]:
    """(folder, cgroup version) of this process's cgroup for ``controller`` and of each parent
    up to the hierarchy's root (a limit anywhere above applies too). A container with its own
    cgroup namespace sees its cgroup as the root; one without sees the host's path, which
    may not exist under the container's mount: then the mount's root stands for it."""
    paths = []
    for line in _read(self_cgroup).splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        number, controllers, path = fields
        if number == "0" and not controllers and os.path.exists(
                os.path.join(root, "cgroup.controllers")):
            paths.append((root, path, 2))
        elif controller in controllers.split(","):
            for name in (controllers, controller):
                if os.path.isdir(os.path.join(root, name)):
                    paths.append((os.path.join(root, name), path, 1))
                    break
    if not paths and os.path.exists(os.path.join(root, "cgroup.controllers")):
        paths.append((root, "/", 2))  # no /proc/self/cgroup to read: the mount's root
    folders = []
    for base, path, version in paths:
        folder = os.path.join(base, path.strip("/"))
        if not os.path.isdir(folder):
            folder = base
        while True:
            folders.append((folder, version))
            if os.path.normpath(folder) == os.path.normpath(base):
                break
            folder = os.path.dirname(folder)
    return folders


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _ratio(quota: str, period: str) -> float:
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return 0.0
    return quota_us / period_us if quota_us > 0 and period_us > 0 else 0.0


def _gb(count: int) -> str:
    return "{:.1f} GB".format(count / 1e9) if count >= 1e9 else "{:.0f} MB".format(count / 1e6)
