"""make submit-gke: checks the JobSet with the image, name and JOB_ARGS filled in, writes it
to build/, and pipes it to ``kubectl apply -f -`` on the cluster's context (a recording
stand-in for kubectl); without kubectl it prints the manifest and the command. A broken
template stops before kubectl."""

import json
import os
import shutil
import subprocess

import pytest
import yaml

from conftest import REPO, clean_environ

# Records its argv and the manifest it was given on stdin.
KUBECTL = """#!/bin/sh
python3 -c 'import json, sys
print(json.dumps({{"argv": sys.argv[1:], "stdin": sys.stdin.read()}}))' "$@" >> "{log}"
"""
IMAGE = "us-central1-docker.pkg.dev/my-proj/pytorch-xla/pytorch-xla-trainer:pjrt"
CONTAINER = ["spec", "replicatedJobs", 0, "template", "spec", "template", "spec",
             "containers", 0]


def make(tmp_path, *args, path=None):
    env = clean_environ(PATH=path or os.environ["PATH"])
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "submit-gke",
                           "PROJECT=my-proj", "CLUSTER=tpu-cluster"] + list(args), env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def kubectl(tmp_path):
    """A recording kubectl: (its path, the log of its calls)."""
    log = tmp_path / "kubectl.jsonl"
    tool = tmp_path / "kubectl"
    tool.write_text(KUBECTL.format(log=log))
    tool.chmod(0o755)
    return str(tool), log


def at(value, keys):
    for key in keys:
        value = value[key]
    return value


def test_the_rendered_jobset_is_applied_to_the_clusters_context(tmp_path, kubectl):
    tool, log = kubectl
    result = make(tmp_path, "KUBECTL=" + tool, "GKE_JOB_NAME=test-submit-gke",
                  "JOB_ARGS=--data_dir=gs://b/imagenet --job-dir='gs://b/jobs/run 1'")
    assert result.returncode == 0, result.stderr
    call = json.loads(log.read_text())
    assert call["argv"] == ["--context", "gke_my-proj_us-central1_tpu-cluster", "apply", "-f",
                            "-"]
    applied = yaml.safe_load(call["stdin"])
    assert applied == yaml.safe_load((REPO / "build" / "test-submit-gke.yaml").read_text())
    container = at(applied, CONTAINER)
    assert container["image"] == IMAGE
    assert container["args"] == ["--data_dir=gs://b/imagenet", "--job-dir=gs://b/jobs/run 1"]
    assert applied["metadata"]["name"] == "test-submit-gke"


def test_without_kubectl_the_manifest_and_the_command_are_printed(tmp_path):
    bin_dir = tmp_path / "bin"  # make, sh, date and python3, but no kubectl
    bin_dir.mkdir()
    for tool in ("make", "sh", "date", "python3", "mkdir", "cat"):
        os.symlink(shutil.which(tool), str(bin_dir / tool))
    result = make(tmp_path, "GKE_JOB_NAME=test-no-kubectl",
                  "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j", path=str(bin_dir))
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split("kubectl not found")[0]
    assert "apiVersion: jobset.x-k8s.io/v1alpha2" in printed and IMAGE in printed
    assert ("kubectl --context gke_my-proj_us-central1_tpu-cluster apply -f - < "
            "build/test-no-kubectl.yaml") in result.stdout


def test_a_broken_jobset_stops_before_kubectl(tmp_path, kubectl):
    tool, log = kubectl
    result = make(tmp_path, "KUBECTL=" + tool, "GKE_JOB_NAME=test-broken",
                  "JOB_ARGS=--data_dir=gs://b/d --job-dir=/tmp/out")
    assert result.returncode != 0
    assert "args: --job-dir=/tmp/out is not gs://" in result.stderr
    assert not log.exists()
