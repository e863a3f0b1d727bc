"""What this process may use of its host: cores (its CPU affinity, within a cgroup's CPU quota)
and memory (a cgroup's limit, else ``MemTotal``), read from ``/proc`` and ``/sys/fs/cgroup``.

- Cores: the CPUs this process may run on (its affinity: a container's CPU set), and no more
  than a cgroup's CPU quota allows (``docker run --cpus``, a Kubernetes CPU limit; cgroup v1
  ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` and v2 ``cpu.max``), rounded down: a process
  past the quota is throttled.
- Memory: a cgroup's memory limit (v1 ``memory.limit_in_bytes``, v2 ``memory.max``), else the
  host's ``MemTotal``.

A leaf module (the standard library only): the trainers' start-up (``trainer.cli``), the data
workers' count (``trainer.data.workers``) and the data tools take it from below.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Tuple

CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
MEMINFO = "/proc/meminfo"
# cgroup v1 writes "no limit" as the largest page-aligned 64-bit number; anything this large is
# no limit.
NO_LIMIT = 2 ** 60


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
        gigabytes(memory), " (its cgroup's limit)" if limit and memory == limit else " (MemTotal)"
        if memory else " unknown"))
    return Host(cores, memory, ", ".join(why))


def host_cores() -> int:
    """The cores this process may use: its affinity, within a cgroup's CPU quota."""
    return this_host().cores


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


def gigabytes(count: int) -> str:
    """``count`` bytes as a short figure for a log line (``1.5 GB``, ``260 MB``)."""
    return "{:.1f} GB".format(count / 1e9) if count >= 1e9 else "{:.0f} MB".format(count / 1e6)
