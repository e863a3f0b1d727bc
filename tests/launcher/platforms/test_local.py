"""launcher.platforms.local and the detection order in launcher.platforms."""

import json

from conftest import SEED_TPU_CONFIG, make_tpu_sysfs
from launcher.job_env import JobEnvironment
from launcher.platforms import DETECTORS, detect_platform, local
from launcher.platforms.base import EXPLICIT, LOCAL, TPU_NODE, TPU_VM


def test_local_always_matches(tmp_path):
    assert local.detect(JobEnvironment(), str(tmp_path)).kind == LOCAL


def test_vertex_cpu_job_is_local_and_says_so(tmp_path):
    spec = json.dumps({"task": {"type": "workerpool0", "index": 0}})
    platform = local.detect(JobEnvironment.from_environ({"CLUSTER_SPEC": spec}), str(tmp_path))
    assert "Vertex" in platform.description


def test_order_is_explicit_node_vm_local(tmp_path):
    assert DETECTORS[-1] is local.detect
    root = make_tpu_sysfs(tmp_path)

    def kind(environ):
        return detect_platform(JobEnvironment.from_environ(environ), str(root)).kind

    assert kind({"XRT_TPU_CONFIG": "tpu_worker;0;10.0.0.9:8470", "TPU_CONFIG": SEED_TPU_CONFIG}
                ) == EXPLICIT
    assert kind({"TPU_CONFIG": SEED_TPU_CONFIG}) == TPU_NODE
    assert kind({}) == TPU_VM
    assert detect_platform(JobEnvironment(), str(tmp_path / "empty")).kind == LOCAL
