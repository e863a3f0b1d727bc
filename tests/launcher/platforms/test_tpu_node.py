"""launcher.platforms.tpu_node."""

import json

import pytest

from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG
from launcher.errors import ConfigError
from launcher.job_env import JobEnvironment
from launcher.platforms import tpu_node
from launcher.platforms.base import TPU_NODE, TpuNodeRef


def detect(environ, root="/nonexistent"):
    return tpu_node.detect(JobEnvironment.from_environ(environ), root)


def test_not_detected_without_tpu_config_or_name():
    assert detect({}) is None
    cpu_job = json.dumps({"job": {"worker_type": "n1-standard-4"}})
    assert detect({"TF_CONFIG": cpu_job}) is None


def test_tf_config_asking_for_a_tpu_without_tpu_config_is_an_error_not_a_cpu_run():
    with pytest.raises(ConfigError) as caught:
        detect({"TF_CONFIG": SEED_TF_CONFIG})
    assert "worker_type cloud_tpu, accelerator TPU_V3" in caught.value.message
    assert "TPU_CONFIG" in caught.value.message and "PJRT_DEVICE=CPU" in caught.value.hint


def test_seed_environment_gives_the_node_and_accelerator_facts():
    platform = detect({"TPU_CONFIG": SEED_TPU_CONFIG, "TF_CONFIG": SEED_TF_CONFIG})
    assert platform.kind == TPU_NODE
    assert platform.tpu_node == TpuNodeRef("cmle-training-14556593641811293930-tpu",
                                           "us-central1-b", "j79edad251b5e3ba2-ml")
    assert ("accelerator", "8 x TPU_V3") in platform.facts
    assert ("tpu_tf_version", "1.15") in platform.facts
    assert platform.warnings == ()


def test_tpu_name_wins_over_tpu_config_like_tensorflow():
    platform = detect({"TPU_CONFIG": SEED_TPU_CONFIG, "TPU_NAME": "other"})
    assert platform.tpu_node == TpuNodeRef("other", "us-central1-b", "j79edad251b5e3ba2-ml")
    assert detect({"TPU_NAME": "solo"}).tpu_node == TpuNodeRef("solo")


def test_inconsistent_tf_config_is_warned_about():
    tf_config = json.dumps({"job": {"worker_type": "n1-standard-4", "worker_config": {
        "accelerator_config": {"type": "TPU_V2", "count": "4"}}}})
    platform = detect({"TPU_CONFIG": SEED_TPU_CONFIG, "TF_CONFIG": tf_config})
    assert any("count is 4" in warning for warning in platform.warnings)
    assert any("worker_type" in warning for warning in platform.warnings)
