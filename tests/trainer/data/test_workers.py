"""trainer.data.workers: the default worker count uses every core the process may use but the
trainer's (no ceiling: a v6e host's 180 vCPUs get 179 workers), fewer only where memory
requires it; the cores and memory come from the CPU affinity and the cgroup's CPU quota and
memory limit (v1 and v2, read here from synthetic cgroup trees in a temp dir)."""

import logging
import os

import pytest

from trainer.data import plan, workers
from trainer.data.workers import Host, choose

GB = 10 ** 9


def shape(chips: int) -> plan.SliceShape:
    """One host of ``chips`` chips, the trainer's default batch (128 per chip) at 224 px."""
    return plan.shape_from_flags(1, chips, 128, 0, 1, 224)


@pytest.mark.parametrize("cores, memory_gb, chips", [
    (16, 128, 1),  # the lent H100 machine
    (112, 192, 4),  # a v5e host of 4 chips
    (180, 720, 8),  # a v6e host of 8 chips
    (224, 384, 8),  # a v5e host of 8 chips
])
def test_every_core_but_the_trainers_decodes_where_memory_holds_them(cores, memory_gb, chips):
    need = plan.data_memory(shape(chips), plan.IMAGENET_EXAMPLE_BYTES)
    choice = choose(Host(cores, memory_gb * GB), need)
    assert choice.workers == cores - 1 and not choice.memory_bound
    assert choice.total <= memory_gb * GB
    assert "data workers: {} (one per core but the trainer's".format(cores - 1) in choice.line()


def test_small_memory_limits_the_workers_to_what_it_holds():
    need = fixed, per_worker = plan.data_memory(shape(8), plan.IMAGENET_EXAMPLE_BYTES)
    choice = choose(Host(224, 32 * GB), need)
    # Each worker: its process and RUNS_AHEAD + 1 runs of up to BLOCK_EXAMPLES + 1 examples
    # more; fixed: the trainer, the step ring of 24 local batches and 3 batches of runs.
    assert per_worker == plan.WORKER_PROCESS_BYTES + 3 * 33 * plan.IMAGENET_EXAMPLE_BYTES
    assert fixed == (plan.TRAINER_PROCESS_BYTES + 24 * 1024 * (3 * 224 * 224 + 8)
                     + 3 * 1024 * plan.IMAGENET_EXAMPLE_BYTES)
    assert choice.workers == (32 * GB - fixed) // per_worker == 88
    assert choice.memory_bound and choice.total <= 32 * GB < choice.total + per_worker
    assert "data workers: 88 (memory holds only 88" in choice.line()
    # Too little for even one: still one (the /dev/shm check and the line say the rest).
    assert choose(Host(16, 4 * GB), need).workers == 1
    # Memory unknown: not limited by it.
    assert choose(Host(224, 0), need).workers == 223


def test_a_host_of_one_core_still_gets_one_worker():
    assert choose(Host(1, 0), (0, 0)).workers == 1
    assert workers.auto_workers(180) == 179


def write(path, text):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "w") as file:
        file.write(text)


def cgroup_v2(tmp_path, own="/", files=None):
    """A cgroup2 mount at tmp_path/cgroup and a /proc/self/cgroup naming ``own``."""
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpuset cpu io memory pids")
    for name, text in (files or {}).items():
        write(root / name, text)
    write(tmp_path / "self-cgroup", "0::{}\n".format(own))
    return str(root), str(tmp_path / "self-cgroup")


def test_cgroup_v2_quota_and_memory_limit_of_the_own_cgroup_and_its_parents(tmp_path):
    root, self_cgroup = cgroup_v2(tmp_path, "/kubepods/pod1/c1", {
        "kubepods/pod1/c1/cpu.max": "max 100000",
        "kubepods/pod1/c1/memory.max": "max",
        "kubepods/pod1/cpu.max": "250000 100000",
        "kubepods/pod1/memory.max": str(8 * 2 ** 30),
        "kubepods/cpu.max": "1600000 100000",
        "kubepods/memory.max": str(64 * 2 ** 30)})
    assert workers.cgroup_cpu_limit(root, self_cgroup) == 2.5
    assert workers.cgroup_memory_limit(root, self_cgroup) == 8 * 2 ** 30


def test_cgroup_v2_in_a_namespace_sees_its_limits_at_the_root(tmp_path):
    root, self_cgroup = cgroup_v2(tmp_path, "/", {"cpu.max": "400000 100000",
                                                  "memory.max": "4000000000"})
    assert workers.cgroup_cpu_limit(root, self_cgroup) == 4.0
    assert workers.cgroup_memory_limit(root, self_cgroup) == 4 * GB
    # A path from outside the namespace that the mount does not show: the mount's root.
    write(tmp_path / "self-cgroup", "0::/system.slice/docker-abc.scope\n")
    assert workers.cgroup_cpu_limit(root, self_cgroup) == 4.0


def test_cgroup_v2_without_limits(tmp_path):
    root, self_cgroup = cgroup_v2(tmp_path, "/user.slice", {"user.slice/cpu.max": "max 100000"})
    assert workers.cgroup_cpu_limit(root, self_cgroup) == 0.0
    assert workers.cgroup_memory_limit(root, self_cgroup) == 0


def test_cgroup_v1_quota_and_memory_limit(tmp_path):
    root = tmp_path / "cgroup"
    write(root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000")
    write(root / "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000")
    write(root / "cpu,cpuacct/cpu.cfs_quota_us", "-1")
    write(root / "cpu,cpuacct/cpu.cfs_period_us", "100000")
    write(root / "memory/docker/abc/memory.limit_in_bytes", "2147483648")
    write(root / "memory/memory.limit_in_bytes", "9223372036854771712")  # v1's "no limit"
    write(tmp_path / "self-cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
          "3:cpuset:/docker/abc\n1:name=systemd:/docker/abc\n")
    self_cgroup = str(tmp_path / "self-cgroup")
    assert workers.cgroup_cpu_limit(str(root), self_cgroup) == 1.5
    assert workers.cgroup_memory_limit(str(root), self_cgroup) == 2 * 2 ** 30
    write(root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1")
    write(root / "memory/docker/abc/memory.limit_in_bytes", "9223372036854771712")
    assert workers.cgroup_cpu_limit(str(root), self_cgroup) == 0.0
    assert workers.cgroup_memory_limit(str(root), self_cgroup) == 0


def test_no_cgroup_to_read_is_no_limit(tmp_path):
    missing = str(tmp_path / "none")
    assert workers.cgroup_cpu_limit(missing, missing) == 0.0
    assert workers.cgroup_memory_limit(missing, missing) == 0


def test_this_host_takes_the_quota_below_the_affinity_and_the_smaller_memory(tmp_path):
    affinity = workers.affinity_cores()
    root, self_cgroup = cgroup_v2(tmp_path, "/", {"cpu.max": "150000 100000",
                                                  "memory.max": str(3 * GB)})
    write(tmp_path / "meminfo", "MemTotal:       16384000 kB\nMemFree:  1000 kB\n")
    host = workers.this_host(root, self_cgroup, str(tmp_path / "meminfo"))
    assert host.cores == 1 and host.memory == 3 * GB  # 1.5 cores round down
    assert "CPU quota of 1.5 cores" in host.why and "(its cgroup's limit)" in host.why
    root, self_cgroup = cgroup_v2(tmp_path / "open", "/", {})
    host = workers.this_host(root, self_cgroup, str(tmp_path / "meminfo"))
    assert host.cores == affinity and host.memory == 16384000 * 1024
    assert "(MemTotal)" in host.why


def test_the_start_up_line_says_the_choice(caplog, monkeypatch):
    # configure_logging (plan.main in this process) may have cleared it
    monkeypatch.setattr(logging.getLogger("trainer"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="trainer"):
        count = workers.resolve_workers(-1, shape(1))
    assert count == choose(workers.this_host(), plan.data_memory(
        shape(1), plan.IMAGENET_EXAMPLE_BYTES)).workers
    assert any(record.getMessage().startswith("data workers: {} (".format(count))
               for record in caplog.records)
    assert workers.resolve_workers(3) == 3 and workers.resolve_workers(0) == 0


def test_the_advice_learns_how_many_workers_memory_holds_only_where_it_is_the_limit():
    # 16 cores and room for 4 workers: memory decides (the advice must not ask for 15);
    # room for thousands: the cores decide, and memory is no limit to report.
    fixed, per_worker = GB, GB // 2
    tight = choose(workers.Host(16, fixed + 4 * per_worker + 1), (fixed, per_worker))
    assert (tight.workers, tight.memory_holds) == (4, 4)
    roomy = choose(workers.Host(16, 1000 * GB), (fixed, per_worker))
    assert (roomy.workers, roomy.memory_holds) == (15, None)
    assert choose(workers.Host(16, 0), (fixed, per_worker)).memory_holds is None  # unknown
