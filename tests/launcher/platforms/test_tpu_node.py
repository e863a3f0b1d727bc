"""launcher.platforms.tpu_node."""

import json

from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG
from launcher.job_env import JobEnvironment
from launcher.platforms import tpu_node
from launcher.platforms.base import TPU_NODE, TpuNodeRef


def detect(environ, root="/nonexistent"):
    return tpu_node.detect(JobEnvironment.from_environ(environ), root)


def test_not_detected_without_tpu_config_or_name():
    assert detect({"TF_CONFIG": SEED_TF_CONFIG}) is None


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
