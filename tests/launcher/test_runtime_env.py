"""launcher.runtime_env: the pure mapping (platform, runtime, endpoint) -> trainer variables."""

import pytest

from launcher.address import Endpoint
from launcher.errors import ConfigError
from launcher.platforms.base import EXPLICIT, LOCAL, TPU_NODE, TPU_VM, Platform, TpuNodeRef
from launcher.runtime import XlaRuntime
from launcher.runtime_env import runtime_env

XRT = XlaRuntime("xrt", "1.12", "test")
PJRT = XlaRuntime("pjrt", "2.9.0", "test")
NODE = Platform(TPU_NODE, "node", tpu_node=TpuNodeRef("n", "z", "p"))


def test_tpu_node_with_xrt_exports_address():
    env = runtime_env(NODE, XRT, Endpoint("10.0.0.2", 8470))
    assert dict(env.exports) == {"XRT_TPU_CONFIG": "tpu_worker;0;10.0.0.2:8470",
                                 "TPU_IP_ADDRESS": "10.0.0.2"}


def test_tpu_node_with_ipv6_brackets_the_address():
    env = runtime_env(NODE, XRT, Endpoint("fd00::2", 8470))
    assert dict(env.exports)["XRT_TPU_CONFIG"] == "tpu_worker;0;[fd00::2]:8470"


def test_tpu_node_with_pjrt_is_a_clear_error_naming_the_xrt_image():
    with pytest.raises(ConfigError) as caught:
        runtime_env(NODE, PJRT, Endpoint("10.0.0.2", 8470))
    assert "PJRT" in caught.value.message and "r1.11_3.7" in caught.value.hint


@pytest.mark.parametrize("kind, runtime, expected", [
    (TPU_VM, PJRT, {"PJRT_DEVICE": "TPU"}),
    (TPU_VM, XRT, {"XRT_TPU_CONFIG": "localservice;0;localhost:51011"}),
    (LOCAL, PJRT, {"PJRT_DEVICE": "CPU"}),
])
def test_detected_platforms(kind, runtime, expected):
    assert dict(runtime_env(Platform(kind, "x"), runtime).exports) == expected


def test_local_xrt_uses_the_xrt_cpu_device():
    assert set(dict(runtime_env(Platform(LOCAL, "x"), XRT).exports)) == {"XRT_DEVICE_MAP",
                                                                           "XRT_WORKERS"}


def test_user_settings_are_kept_not_overwritten():
    platform = Platform(EXPLICIT, "x", user_settings=(("PJRT_DEVICE", "CPU"),))
    env = runtime_env(platform, PJRT)
    assert env.exports == () and env.kept == (("PJRT_DEVICE", "CPU"),)


def test_cpu_on_purpose_with_xrt_gets_the_xrt_cpu_device():
    # torch_xla 1.11 has no PJRT: PJRT_DEVICE=CPU alone left it with "Missing XLA
    # configuration". The variables of the XRT CPU device are exported next to it.
    platform = Platform(EXPLICIT, "x", user_settings=(("PJRT_DEVICE", "CPU"),))
    env = runtime_env(platform, XRT)
    assert dict(env.exports) == dict(runtime_env(Platform(LOCAL, "x"), XRT).exports)
    assert env.kept == (("PJRT_DEVICE", "CPU"),)


def test_explicit_tpu_ip_address_with_xrt_derives_xrt_tpu_config():
    platform = Platform(EXPLICIT, "x", user_settings=(("TPU_IP_ADDRESS", "10.1.2.3"),))
    env = runtime_env(platform, XRT)
    assert dict(env.exports) == {"XRT_TPU_CONFIG": "tpu_worker;0;10.1.2.3:8470"}
    assert env.kept == (("TPU_IP_ADDRESS", "10.1.2.3"),)


@pytest.mark.parametrize("value", ["tpu_worker;0", "tpu_worker;x;10.0.0.2:8470",
                                   "tpu_worker;0;10.0.0.2:99999", ";0;h:1"])
def test_bad_explicit_xrt_tpu_config(value):
    platform = Platform(EXPLICIT, "x", user_settings=(("XRT_TPU_CONFIG", value),))
    with pytest.raises(ConfigError, match="XRT_TPU_CONFIG"):
        runtime_env(platform, XRT)


def test_explicit_xrt_settings_with_pjrt_runtime_are_an_error():
    platform = Platform(EXPLICIT, "x", user_settings=(("XRT_TPU_CONFIG", "tpu_worker;0;h:1"),))
    with pytest.raises(ConfigError, match="ignores it"):
        runtime_env(platform, PJRT)
