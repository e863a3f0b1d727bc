"""launcher.platforms.explicit."""

import pytest

from conftest import SEED_TPU_CONFIG
from launcher.errors import ConfigError
from launcher.job_env import JobEnvironment
from launcher.platforms import explicit
from launcher.platforms.base import EXPLICIT


def test_not_detected_in_an_empty_environment(tmp_path):
    assert explicit.detect(JobEnvironment.from_environ({}), str(tmp_path)) is None


def test_detected_and_settings_carried(tmp_path):
    job_env = JobEnvironment.from_environ({"PJRT_DEVICE": "tpu", "TPU_CONFIG": ""})
    platform = explicit.detect(job_env, str(tmp_path))
    assert platform.kind == EXPLICIT
    assert platform.user_settings == (("PJRT_DEVICE", "TPU"),)
    assert "PJRT_DEVICE" in platform.description


@pytest.mark.parametrize("environ, named", [
    ({"PJRT_DEVICE": "CPU", "TPU_CONFIG": SEED_TPU_CONFIG}, "TPU_CONFIG"),
    ({"PJRT_DEVICE": "cpu", "TPU_NAME": "my-tpu"}, "TPU_NAME"),
])
def test_another_device_next_to_a_tpu_node_is_refused(tmp_path, environ, named):
    with pytest.raises(ConfigError) as caught:
        explicit.detect(JobEnvironment.from_environ(environ), str(tmp_path))
    assert caught.value.message.startswith("PJRT_DEVICE=CPU contradicts " + named)
    assert "unset PJRT_DEVICE" in caught.value.hint


def test_cpu_chosen_on_purpose_wins_over_a_tpu_tf_config(tmp_path):
    from conftest import SEED_TF_CONFIG

    job_env = JobEnvironment.from_environ({"PJRT_DEVICE": "CPU", "TF_CONFIG": SEED_TF_CONFIG})
    assert explicit.detect(job_env, str(tmp_path)).user_settings == (("PJRT_DEVICE", "CPU"),)


@pytest.mark.parametrize("xrt_setting", [{"TPU_IP_ADDRESS": "10.0.0.2"},
                                         {"XRT_TPU_CONFIG": "tpu_worker;0;10.0.0.2:8470"},
                                         {"XRT_WORKERS": "localservice:0;grpc://localhost:1"}])
@pytest.mark.parametrize("device", ["TPU", "CPU"])
def test_pjrt_device_next_to_an_xrt_setting_is_refused_naming_both(tmp_path, xrt_setting,
                                                                     device):
    environ = dict(xrt_setting, PJRT_DEVICE=device, TPU_CONFIG=SEED_TPU_CONFIG)
    with pytest.raises(ConfigError) as caught:
        explicit.detect(JobEnvironment.from_environ(environ), str(tmp_path))
    name = next(iter(xrt_setting))
    assert caught.value.message.startswith("PJRT_DEVICE={} and {}=".format(device, name))
    assert "two XLA runtimes" in caught.value.message and "unset " + name in caught.value.hint
