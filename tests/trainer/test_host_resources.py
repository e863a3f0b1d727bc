"""trainer.host_resources: the cores and memory this process may use come from the CPU
affinity and the cgroup's CPU quota and memory limit (v1 and v2, read here from synthetic
cgroup trees in a temp dir), else MemTotal."""

import os

from trainer import host_resources

GB = 10 ** 9


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
    assert host_resources.cgroup_cpu_limit(root, self_cgroup) == 2.5
    assert host_resources.cgroup_memory_limit(root, self_cgroup) == 8 * 2 ** 30


def test_cgroup_v2_in_a_namespace_sees_its_limits_at_the_root(tmp_path):
    root, self_cgroup = cgroup_v2(tmp_path, "/", {"cpu.max": "400000 100000",
                                                  "memory.max": "4000000000"})
    assert host_resources.cgroup_cpu_limit(root, self_cgroup) == 4.0
    assert host_resources.cgroup_memory_limit(root, self_cgroup) == 4 * GB
    # A path from outside the namespace that the mount does not show: the mount's root.
    write(tmp_path / "self-cgroup", "0::/system.slice/docker-abc.scope\n")
    assert host_resources.cgroup_cpu_limit(root, self_cgroup) == 4.0


def test_cgroup_v2_without_limits(tmp_path):
    root, self_cgroup = cgroup_v2(tmp_path, "/user.slice", {"user.slice/cpu.max": "max 100000"})
    assert host_resources.cgroup_cpu_limit(root, self_cgroup) == 0.0
    assert host_resources.cgroup_memory_limit(root, self_cgroup) == 0


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
    assert host_resources.cgroup_cpu_limit(str(root), self_cgroup) == 1.5
    assert host_resources.cgroup_memory_limit(str(root), self_cgroup) == 2 * 2 ** 30
    write(root / "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1")
    write(root / "memory/docker/abc/memory.limit_in_bytes", "9223372036854771712")
    assert host_resources.cgroup_cpu_limit(str(root), self_cgroup) == 0.0
    assert host_resources.cgroup_memory_limit(str(root), self_cgroup) == 0


def test_no_cgroup_to_read_is_no_limit(tmp_path):
    missing = str(tmp_path / "none")
    assert host_resources.cgroup_cpu_limit(missing, missing) == 0.0
    assert host_resources.cgroup_memory_limit(missing, missing) == 0


def test_this_host_takes_the_quota_below_the_affinity_and_the_smaller_memory(tmp_path):
    affinity = host_resources.affinity_cores()
    root, self_cgroup = cgroup_v2(tmp_path, "/", {"cpu.max": "150000 100000",
                                                  "memory.max": str(3 * GB)})
    write(tmp_path / "meminfo", "MemTotal:       16384000 kB\nMemFree:  1000 kB\n")
    host = host_resources.this_host(root, self_cgroup, str(tmp_path / "meminfo"))
    assert host.cores == 1 and host.memory == 3 * GB  # 1.5 cores round down
    assert "CPU quota of 1.5 cores" in host.why and "(its cgroup's limit)" in host.why
    root, self_cgroup = cgroup_v2(tmp_path / "open", "/", {})
    host = host_resources.this_host(root, self_cgroup, str(tmp_path / "meminfo"))
    assert host.cores == affinity and host.memory == 16384000 * 1024
    assert "(MemTotal)" in host.why
