"""launcher.platforms.tpu_vm: local chips through a fake /sys and /dev."""

import json

import pytest

from conftest import GVNIC, make_tpu_sysfs
from launcher.errors import ConfigError
from launcher.job_env import JobEnvironment
from launcher.platforms import tpu_vm
from launcher.platforms.base import TPU_VM


def detect(environ, root):
    return tpu_vm.detect(JobEnvironment.from_environ(environ), str(root))


def test_no_chips_and_no_hints_is_not_a_tpu_vm(tmp_path):
    assert detect({}, tmp_path) is None


def test_pci_chips_are_found_and_named(tmp_path):
    platform = detect({}, make_tpu_sysfs(tmp_path, "0x0063", chips=4))
    assert platform.kind == TPU_VM
    assert ("TPU chips", "4 (TPU v5e)") in platform.facts
    assert ("not a TPU", "1ae0:0042 (gVNIC network card)") in platform.facts


@pytest.mark.parametrize("device_id", [GVNIC, "0x001f", "0x0099"])
def test_google_devices_that_are_not_tpus_are_no_tpu_vm(tmp_path, device_id):
    # A gVNIC is on every C3/N4/C4 VM: counting it as a chip made CPU jobs crash-loop.
    make_tpu_sysfs(tmp_path, device_id, chips=2, others=())
    assert tpu_vm.find_tpu_chips(str(tmp_path)) == ()
    assert detect({}, tmp_path) is None


def test_an_unknown_google_device_is_named_on_the_local_platform(tmp_path):
    from launcher.platforms import local

    make_tpu_sysfs(tmp_path, "0x0099", chips=1)
    platform = local.detect(JobEnvironment.from_environ({}), str(tmp_path))
    assert platform.facts == (("not a TPU", "1ae0:0042 (gVNIC network card)"),
                              ("not a TPU", "1ae0:0099 (unknown, not a TPU torch_xla knows)"))


def test_expected_tpus_with_only_a_gvnic_is_an_error_naming_it(tmp_path):
    make_tpu_sysfs(tmp_path, GVNIC, chips=1, others=())
    with pytest.raises(ConfigError) as caught:
        detect({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, tmp_path)
    assert "no TPU chip is visible" in caught.value.message
    assert "only 1ae0:0042 (gVNIC network card)" in caught.value.message


def test_other_pci_vendors_are_ignored(tmp_path):
    device = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:00:01.0"
    device.mkdir(parents=True)
    (device / "vendor").write_text("0x8086\n")
    assert tpu_vm.find_tpu_chips(str(tmp_path)) == ()


@pytest.mark.parametrize("entries", [["accel0", "accel1"], ["vfio/0", "vfio/vfio"]])
def test_dev_entries_count_as_chips(tmp_path, entries):
    for entry in entries:
        (tmp_path / "dev" / entry).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / entry).write_text("")
    assert detect({}, tmp_path).kind == TPU_VM


@pytest.mark.parametrize("environ", [
    {"TPU_ACCELERATOR_TYPE": "v5litepod-8"},
    {"CLUSTER_SPEC": json.dumps({"job": {"workerPoolSpecs": [{"machineSpec": {
        "machineType": "ct5lp-hightpu-4t"}}]}})},
])
def test_tpu_expected_but_absent_is_an_error_not_a_cpu_run(tmp_path, environ):
    with pytest.raises(ConfigError, match="no TPU chip is visible"):
        detect(environ, tmp_path)
