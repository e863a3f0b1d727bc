"""launcher.platforms.explicit."""

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
