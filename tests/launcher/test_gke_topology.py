"""launcher.gke_topology: what GKE's TPU device plugin injects into a pod, read and checked for
agreement (host bounds, host list or process addresses, accelerator type, local chips); through
main() on a fake v5e host: a pod on the right pool starts, one on the wrong pool stops with one
line naming the variables (exit 78), in a dry run too; TPU7x's process addresses reach the
trainer."""

import pytest

from conftest import RecordingExec, make_tpu_sysfs
from launcher.cli import main
from launcher.errors import EX_CONFIG, ConfigError
from launcher.gke_topology import GkeTopology, accelerator_chips

HOSTS = ",".join("run-slice-0-{}.run".format(i) for i in range(4))
# A pod of host 2 of a v5e 4x4 slice (16 chips, 4 hosts of 2x2), as GKE's device plugin and
# webhook set it up (values as in the device plugin's source and GKE's docs).
V5E_16_HOST_2 = {"TPU_SKIP_MDS_QUERY": "true", "TPU_ACCELERATOR_TYPE": "v5litepod-16",
                 "TPU_TOPOLOGY": "4x4", "TPU_HOST_BOUNDS": "2,2,1",
                 "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1", "TPU_WORKER_ID": "2",
                 "TPU_WORKER_HOSTNAMES": HOSTS}
# TPU7x: the hosts come as process addresses, not host names.
ADDRESSES = "h0:8471,h1:8471,h2:8471,h3:8471"
TPU7X_32_HOST_1 = {"TPU_SKIP_MDS_QUERY": "true", "TPU_ACCELERATOR_TYPE": "tpu7x-32",
                   "TPU_HOST_BOUNDS": "1,2,2", "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
                   "TPU_WORKER_ID": "1",
                   "TPU_PROCESS_ADDRESSES": ADDRESSES,
                   "TPU_PROCESS_PORT": "8471"}


def check(environ, hostnames=(), chips=None):
    GkeTopology.parse(environ).check(tuple(hostnames), chips)


def test_nothing_is_read_without_tpu_skip_mds_query():
    assert GkeTopology.parse({"TPU_HOST_BOUNDS": "2,2,1"}) is None
    assert GkeTopology.parse({}) is None


def test_a_pod_given_one_chip_of_a_host_sees_them_all():
    """GKE's plugin describes a pod given 1 of a host's 4 chips as a 1-chip slice
    (TPU_VISIBLE_CHIPS), while /sys shows all 4: not a mismatch."""
    check({"TPU_SKIP_MDS_QUERY": "true", "TPU_ACCELERATOR_TYPE": "v5litepod-1",
           "TPU_HOST_BOUNDS": "1,1,1", "TPU_CHIPS_PER_HOST_BOUNDS": "1,1,1",
           "TPU_VISIBLE_CHIPS": "0"}, ("localhost",), 4)


def test_the_slice_is_read_from_gkes_variables():
    topology = GkeTopology.parse(V5E_16_HOST_2)
    assert (topology.hosts, topology.chips_per_host) == (4, 4)
    assert topology.describe() == ("TPU_ACCELERATOR_TYPE=v5litepod-16, 4 hosts "
                                   "(TPU_HOST_BOUNDS=2,2,1), 4 chips per host "
                                   "(TPU_CHIPS_PER_HOST_BOUNDS=2,2,1)")
    check(V5E_16_HOST_2, HOSTS.split(","), 4)
    check(TPU7X_32_HOST_1, (), 4)
    check(dict(TPU7X_32_HOST_1, TPU_TOPOLOGY="2x4x2"), (), 4)
    check(dict(V5E_16_HOST_2, TPU_TOPOLOGY="4x4x1"), HOSTS.split(","), 4)


@pytest.mark.parametrize("name, chips", [("v5litepod-16", 16), ("v5e-8", 8), ("v6e-256", 256),
                                         ("v4-16", 8), ("v5p-128", 64), ("tpu7x-32", 16),
                                         ("v3-8", 4), ("v9-8", None), ("", None)])
def test_an_accelerator_types_chips(name, chips):
    assert accelerator_chips(name) == chips


@pytest.mark.parametrize("change, hostnames, chips, named", [
    ({}, HOSTS.split(",")[:3], 4, "TPU_WORKER_HOSTNAMES lists 3 hosts but "
                                  "TPU_HOST_BOUNDS=2,2,1 makes the slice 4 hosts"),
    ({"TPU_ACCELERATOR_TYPE": "v5litepod-32"}, HOSTS.split(","), 4,
     "TPU_ACCELERATOR_TYPE=v5litepod-32 has 32 chips but TPU_HOST_BOUNDS=2,2,1 x "
     "TPU_CHIPS_PER_HOST_BOUNDS=2,2,1 make 16"),
    ({}, HOSTS.split(","), 2, "TPU_CHIPS_PER_HOST_BOUNDS=2,2,1 gives this host 4 chips, but "
                              "only 2 are visible here"),
    ({"TPU_PROCESS_ADDRESSES": "h0:8471,h1:8471"}, (), 4, "TPU_PROCESS_ADDRESSES lists 2 "
                                                          "hosts but TPU_HOST_BOUNDS=2,2,1"),
    ({"TPU_HOST_BOUNDS": "2,x,1"}, (), None, "TPU_HOST_BOUNDS='2,x,1' is not a list of "
                                             "positive counts"),
    ({"TPU_CHIPS_PER_HOST_BOUNDS": "2,0,1"}, (), None, "TPU_CHIPS_PER_HOST_BOUNDS='2,0,1'"),
    ({"TPU_TOPOLOGY": "4x8"}, (), None, "TPU_TOPOLOGY=4x8 does not match TPU_HOST_BOUNDS=2,2,1 "
                                        "x TPU_CHIPS_PER_HOST_BOUNDS=2,2,1 (4x4x1 chips"),
    ({"TPU_TOPOLOGY": "2x8"}, (), None, "TPU_TOPOLOGY=2x8 does not match"),
    ({"TPU_TOPOLOGY": "4x-4"}, (), None, "TPU_TOPOLOGY='4x-4' is not chips along each axis"),
    ({"TPU_PROCESS_ADDRESSES": ADDRESSES, "TPU_WORKER_ID": "9"}, (), None,
     "TPU_WORKER_ID='9' is not a worker of the 4 hosts TPU_PROCESS_ADDRESSES lists (0 to 3)"),
    ({"TPU_PROCESS_ADDRESSES": "h0:8471,h1:8471,h0:8471,h3:8471"}, (), None,
     "TPU_PROCESS_ADDRESSES='h0:8471,h1:8471,h0:8471,h3:8471' lists h0:8471 twice"),
])
def test_variables_that_disagree_are_named(change, hostnames, chips, named):
    with pytest.raises(ConfigError) as caught:
        check(dict(V5E_16_HOST_2, **change), hostnames, chips)
    assert named in caught.value.message and "\n" not in caught.value.message
    assert "node pool" in caught.value.hint


def test_a_pod_on_the_right_pool_starts_and_says_so(tmp_path, capsys):
    root = make_tpu_sysfs(tmp_path, "0x0063", chips=4)
    execvpe = RecordingExec()
    assert main(["--host-root=" + str(root)], dict(V5E_16_HOST_2), execvpe) == 0
    assert "launcher: GKE slice: TPU_ACCELERATOR_TYPE=v5litepod-16, 4 hosts" in \
        capsys.readouterr().err


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_pod_on_the_wrong_pool_stops_with_one_line(tmp_path, capsys, dry_run):
    """A v5e-16 JobSet's pod on a host of 2 chips, or a slice of 2 hosts: exit 78, one line;
    a dry run without chips still checks what it can."""
    if dry_run:
        environ = dict(V5E_16_HOST_2, TPU_HOST_BOUNDS="1,2,1")
        args = ["--dry-run", "--host-root=" + str(tmp_path)]
    else:
        environ = dict(V5E_16_HOST_2)
        args = ["--host-root=" + str(make_tpu_sysfs(tmp_path, "0x0063", chips=2))]
    execvpe = RecordingExec()
    assert main(args, environ, execvpe) == EX_CONFIG
    assert execvpe.calls == []
    error, hint = capsys.readouterr().err.strip().splitlines()[-2:]
    assert error.startswith("launcher: ConfigError: TPU_") and "HINT" in hint


@pytest.mark.parametrize("change", [{"TPU_WORKER_ID": "9"}, {"TPU_TOPOLOGY": "4x8"}])
def test_a_tpu7x_pod_outside_its_slice_stops_with_one_line(tmp_path, capsys, change):
    """TPU7x names its hosts by address: a worker id past them (or a topology the bounds do
    not make) stops the pod before the slice would hang forming (exit 78)."""
    root = make_tpu_sysfs(tmp_path, "0x0076", chips=4)
    execvpe = RecordingExec()
    assert main(["--host-root=" + str(root)], dict(TPU7X_32_HOST_1, **change), execvpe) \
        == EX_CONFIG
    assert execvpe.calls == []
    error, hint = capsys.readouterr().err.strip().splitlines()[-2:]
    assert error.startswith("launcher: ConfigError: " + next(iter(change))) and "HINT" in hint


def test_tpu7x_process_addresses_reach_the_trainer(tmp_path, capsys):
    """GKE gives TPU7x's hosts as TPU_PROCESS_ADDRESSES/TPU_PROCESS_PORT: kept, where a stale
    pair elsewhere is unset (tests/launcher/test_devices.py)."""
    root = make_tpu_sysfs(tmp_path, "0x0076", chips=4)
    execvpe = RecordingExec()
    assert main(["--host-root=" + str(root)], dict(TPU7X_32_HOST_1), execvpe) == 0
    [(_, _, env)] = execvpe.calls
    assert env["TPU_PROCESS_ADDRESSES"] == TPU7X_32_HOST_1["TPU_PROCESS_ADDRESSES"]
    assert env["TPU_PROCESS_PORT"] == "8471"
    assert "stale topology" not in capsys.readouterr().err
