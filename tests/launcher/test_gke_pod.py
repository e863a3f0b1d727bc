"""A GKE pod of a v5e and of a v6e 16-chip slice, with every variable GKE injects
(tests/gke_pods.py), on a fake host of 4 chips: the real launcher checks the slice's variables,
says where the pod is, and hands them to the trainer untouched (``TPU_SKIP_MDS_QUERY``: GKE
describes the topology); torch_xla 2.9 (the pjrt image's) then reads the slice from them
alone, as on GKE, where no metadata server describes it: its TPU version and type, this
host's worker id, the host list and the process bounds. Forming the slice itself (libtpu)
needs a real one."""

import json
import subprocess
import sys

import pytest
from gke_pods import V5E_16_HOST_2, V6E_16_HOST_2

from conftest import REPO, fake_trainer_env, make_tpu_sysfs, run_launcher

PODS = {"v5e": (V5E_16_HOST_2, "0x0063"), "v6e": (V6E_16_HOST_2, "0x006f")}
# torch_xla's reading of the slice, from the environment each trainer was given.
TORCH_XLA_READS = """
import json, os, sys
from torch_xla._internal import tpu
for env in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(env)
    print(json.dumps([tpu.version(), tpu.get_tpu_type(), tpu.worker_id(), tpu.get_worker_ips(),
                      tpu.get_tpu_env()["TPU_PROCESS_BOUNDS"],
                      tpu.get_tpu_env()["TPU_CHIPS_PER_PROCESS_BOUNDS"]]))
"""


def started_trainer(tmp_path, name):
    """The environment and log of the trainer the launcher starts on pod ``name``."""
    environ, device_id = PODS[name]
    root = make_tpu_sysfs(tmp_path / name, device_id, chips=4)
    out = tmp_path / (name + ".jsonl")
    result = run_launcher("--host-root", str(root), env=fake_trainer_env(
        out, FAKE_TRAINER_WATCH=",".join(environ), **environ))
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text().splitlines()[0])["env"], result.stderr


@pytest.fixture(scope="module")
def trainers(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gke-pods")
    return {name: started_trainer(tmp_path, name) for name in sorted(PODS)}


@pytest.mark.parametrize("name", sorted(PODS))
def test_the_launcher_checks_the_slice_and_hands_it_over_untouched(trainers, name):
    environ, _ = PODS[name]
    env, log = trainers[name]
    assert "launcher: slice: host 3 of 4 (TPU_WORKER_ID=2;" in log
    assert "launcher: GKE slice: TPU_ACCELERATOR_TYPE={}, 4 hosts (TPU_HOST_BOUNDS=2,2,1), 4 " \
           "chips per host (TPU_CHIPS_PER_HOST_BOUNDS=2,2,1)".format(
               environ["TPU_ACCELERATOR_TYPE"]) in log
    assert "stale topology" not in log
    assert {key: env[key] for key in environ} == environ
    assert env["PJRT_DEVICE"] == "TPU"


def test_torch_xla_reads_the_slice_from_gkes_variables_alone(trainers):
    """No metadata server answers here: a torch_xla that asked it would fail."""
    envs = [trainers[name][0] for name in sorted(PODS)]
    read = subprocess.run([sys.executable, "-c", TORCH_XLA_READS], input=json.dumps(envs),
                          cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr
    v5e, v6e = (json.loads(line) for line in read.stdout.splitlines())
    hosts = [host.split(".")[0] for host in v5e[3]]
    assert hosts == ["imagenet-v5e-16-slice-0-{}".format(i) for i in range(4)]
    assert v5e[:3] + v5e[4:] == [5, "v5litepod", 2, "2,2,1", "2,2,1"]
    assert v6e[:3] + v6e[4:] == [6, "v6e", 2, "2,2,1", "2,2,1"]
