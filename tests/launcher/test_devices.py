"""launcher.devices: the launcher's account of the devices the trainer will use, out of how
many this host has, and the stale topology variables it unsets; through main() on a fake TPU
VM (PCI sysfs) and on the CPU."""

import pytest

from conftest import RecordingExec, make_tpu_sysfs
from launcher.cli import main
from launcher.devices import count_devices, requested_devices, stale_topology
from launcher.errors import EX_CONFIG
from launcher.platforms.base import EXPLICIT, LOCAL, TPU_NODE, TPU_VM, Platform
from launcher.runtime import XlaRuntime

XRT = XlaRuntime("xrt", "1.11", "test")
PJRT = XlaRuntime("pjrt", "2.9.0", "test")
LAPTOP = Platform(kind=LOCAL, description="laptop")


def tpu_vm(chip, count):
    return Platform(kind=TPU_VM, description="TPU VM", tpu_chips=("TPU " + chip,) * count)


@pytest.mark.parametrize("platform, runtime, environ, args, used, found, words", [
    (LAPTOP, PJRT, {}, [], 1, 1, "--devices=auto: the CPU device"),
    (LAPTOP, PJRT, {"CPU_NUM_DEVICES": "4"}, [], 4, 4,
     "one SPMD program over CPU_NUM_DEVICES=4 CPU devices"),
    (LAPTOP, PJRT, {"CPU_NUM_DEVICES": "4"}, ["--devices=1"], 1, 4, "--devices=1; "),
    (tpu_vm("v5e", 4), PJRT, {}, [], 4, 4, "4 chips (TPU v5e)"),
    (tpu_vm("v2/v3", 4), PJRT, {}, ["--devices", "auto"], 8, 8, "4 chips (TPU v2/v3)"),
    (tpu_vm("v6e", 8), PJRT, {}, ["--devices=3"], None, 8, "--devices=3"),
    (tpu_vm("v2/v3", 4), XRT, {}, [], 1, 8, "torch_xla 1.11 drives one device per process"),
    (Platform(kind=TPU_NODE, description="node"), XRT, {}, [], 1, None, "one device"),
    (Platform(kind=EXPLICIT, description="user", user_settings=(("PJRT_DEVICE", "TPU"),)),
     PJRT, {}, [], None, None, "all of the devices the runtime finds"),
])
def test_the_count_says_how_many_the_trainer_uses_of_how_many(platform, runtime, environ, args,
                                                               used, found, words):
    count = count_devices(platform, runtime, environ, args)
    assert (count.used, count.found) == (used, found)
    assert words in count.describe()


def test_devices_left_idle_are_counted_in_the_summary():
    text = count_devices(tpu_vm("v2/v3", 4), XRT, {}, []).describe()
    assert text.startswith("the trainer uses 1 of 8 on this host") and text.endswith("; 7 idle")


def test_the_last_devices_flag_wins_as_in_absl():
    assert requested_devices(["--devices=4", "--lr=1", "--devices", "Auto"]) == "auto"
    assert requested_devices(["--devices"]) is None


@pytest.mark.parametrize("environ, stale", [
    ({"TPU_PROCESS_ADDRESSES": "localhost:8476", "TPU_VISIBLE_CHIPS": "0",
      "TPU_PROCESS_BOUNDS": "1,1,1", "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
      "TPU_PROCESS_PORT": "8476", "TPU_WORKER_ID": "0"},
     ("TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT", "TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS",
      "TPU_CHIPS_PER_PROCESS_BOUNDS")),
    # A topology described by hand (torch_xla then reads these instead of the metadata).
    ({"TPU_SKIP_MDS_QUERY": "1", "TPU_PROCESS_BOUNDS": "2,2,1", "TPU_PROCESS_PORT": "8476"},
     ("TPU_PROCESS_PORT",)),
    # GKE on TPU7x: the hosts as process addresses, with the host bounds they are checked
    # against and no host names: kept.
    ({"TPU_SKIP_MDS_QUERY": "true", "TPU_HOST_BOUNDS": "1,2,1",
      "TPU_PROCESS_ADDRESSES": "h0:8471,h1:8471", "TPU_PROCESS_PORT": "8471"}, ()),
    # ... but next to host names, or without the bounds, they are stale.
    ({"TPU_SKIP_MDS_QUERY": "true", "TPU_HOST_BOUNDS": "1,2,1", "TPU_WORKER_HOSTNAMES": "a,b",
      "TPU_PROCESS_ADDRESSES": "localhost:8476"}, ("TPU_PROCESS_ADDRESSES",)),
    ({"TPU_SKIP_MDS_QUERY": "true", "TPU_PROCESS_ADDRESSES": "localhost:8476"},
     ("TPU_PROCESS_ADDRESSES",)),
    ({}, ()),
])
def test_stale_topology_is_what_one_process_per_host_must_not_inherit(environ, stale):
    assert stale_topology(environ) == stale


def test_on_a_tpu_vm_the_summary_counts_devices_and_stale_topology_never_reaches_the_trainer(
        tmp_path, capsys):
    root = make_tpu_sysfs(tmp_path, device_id="0x0027", chips=4)  # a v3-8: 8 devices
    execvpe = RecordingExec()
    environ = {"TPU_PROCESS_ADDRESSES": "localhost:8476", "TPU_VISIBLE_CHIPS": "0"}
    assert main(["--xla-runtime=pjrt", "--host-root=" + str(root)], environ, execvpe) == 0
    [(_, _, env)] = execvpe.calls
    assert "TPU_PROCESS_ADDRESSES" not in env and "TPU_VISIBLE_CHIPS" not in env
    err = capsys.readouterr().err
    assert ("launcher: devices: the trainer uses 8 of 8 on this host (--devices=auto: one "
            "SPMD program over 4 chips (TPU v2/v3))") in err
    assert "unset (stale topology, the trainer runs one process per host): " \
        "TPU_PROCESS_ADDRESSES, TPU_VISIBLE_CHIPS" in err


@pytest.mark.parametrize("value", ["0", "four", "-2", " "])
def test_a_cpu_device_count_that_is_not_a_count_is_refused(value, capsys):
    code = main(["--xla-runtime=pjrt", "--host-root=/nonexistent"], {"CPU_NUM_DEVICES": value},
                RecordingExec())
    if not value.strip():  # blank counts as unset: one device
        assert code == 0
        return
    assert code == EX_CONFIG
    error, hint = capsys.readouterr().err.strip().splitlines()[-2:]
    assert "CPU_NUM_DEVICES={!r} is not a positive number of devices".format(value) in error
    assert "HINT" in hint


@pytest.mark.parametrize("command, line", [
    # A script of the user's: what the host has, and no claim about --devices or SPMD.
    (["--", "python", "train.py", "--devices=1"],
     "launcher: devices: 4 on this host (CPU_NUM_DEVICES=4 CPU devices); the command decides "
     "how many it uses"),
    (["--trainer", "python -m trainer.data.make_shards"],
     "launcher: devices: 4 on this host (CPU_NUM_DEVICES=4 CPU devices); the command decides "
     "how many it uses"),
    # The bundled trainers' own account stays.
    (["--trainer", "python -m trainer.imagenet"],
     "launcher: devices: the trainer uses 4 of 4 on this host (--devices=auto: one SPMD "
     "program over CPU_NUM_DEVICES=4 CPU devices)"),
])
def test_the_device_line_claims_nothing_about_a_command_of_the_users(command, line, capsys):
    assert main(["--xla-runtime=pjrt", "--host-root=/nonexistent"] + command,
                {"CPU_NUM_DEVICES": "4"}, RecordingExec()) == 0
    assert line in capsys.readouterr().err.splitlines()
