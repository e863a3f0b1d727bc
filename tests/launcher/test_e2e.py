"""End to end: ``python -m launcher`` as a subprocess, with the seed's exact environment, the
real TPUClusterResolver against the emulated Cloud TPU API, and a fake trainer that records
what it was started with."""

import json
import time

import pytest

import fake_cloud_tpu as fake
from conftest import (
    SEED_TF_CONFIG,
    SEED_TPU_CONFIG,
    clean_environ,
    fake_trainer_env,
    make_tpu_sysfs,
    read_records,
    run_launcher,
)
from launcher.errors import EX_CONFIG, EX_NOPERM, EX_PROTOCOL, EX_UNAVAILABLE

PLATFORM_ARGS = ["--job-dir=gs://bucket/jobs/run-1", "--lr=0.1", "--batch_size", "64"]


def seed_env(cloud, trainer_out, **extra):
    return fake_trainer_env(trainer_out, TPU_CONFIG=SEED_TPU_CONFIG, TF_CONFIG=SEED_TF_CONFIG,
                            **cloud.environ, **extra)


def test_legacy_tpu_node_with_xrt_waits_resolves_and_execs(cloud, trainer_out):
    cloud.api.answer_with(fake.error(404), fake.state("CREATING"), fake.state("CREATING"),
                          fake.ready(ip="10.240.7.9"))
    result = run_launcher(*PLATFORM_ARGS, env=seed_env(cloud, trainer_out,
                                                       LAUNCHER_XLA_RUNTIME="xrt"))
    assert result.returncode == 0, result.stderr
    [start] = read_records(trainer_out)
    assert start["env"]["XRT_TPU_CONFIG"] == "tpu_worker;0;10.240.7.9:8470"
    assert start["env"]["TPU_IP_ADDRESS"] == "10.240.7.9"
    assert "PJRT_DEVICE" not in start["env"]
    assert start["argv"] == PLATFORM_ARGS
    assert "accelerator: 8 x TPU_V3" in result.stderr
    assert "TPU node cmle-training-14556593641811293930-tpu is READY and HEALTHY" in result.stderr
    # Only the launcher's own lines: no TensorFlow start-up chatter between them.
    assert [line for line in result.stderr.splitlines() if not line.startswith("launcher: ")
            ] == []


def test_legacy_tpu_node_with_pjrt_is_a_clear_error(cloud, trainer_out):
    result = run_launcher(*PLATFORM_ARGS, env=seed_env(cloud, trainer_out))
    assert result.returncode == EX_CONFIG
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "PJRT" in lines[0] and "r1.11_3.7" in lines[1]
    assert read_records(trainer_out) == [] and cloud.api.node_requests == []


def test_permission_denied_exits_with_its_code(cloud, trainer_out):
    cloud.api.answer_with(fake.error(403))
    result = run_launcher(env=seed_env(cloud, trainer_out, LAUNCHER_XLA_RUNTIME="xrt"))
    assert result.returncode == EX_NOPERM and "roles/ml.serviceAgent" in result.stderr
    assert "Traceback" not in result.stderr


def test_deadline_exits_with_unavailable(cloud, trainer_out):
    cloud.api.answer_with(fake.state("CREATING"))
    result = run_launcher(env=seed_env(cloud, trainer_out, LAUNCHER_XLA_RUNTIME="xrt",
                                       LAUNCHER_TPU_WAIT_TIMEOUT="2"))
    assert result.returncode == EX_UNAVAILABLE and "not usable within 2s" in result.stderr
    assert read_records(trainer_out) == []


def test_an_unusable_address_from_the_api_is_a_protocol_error(cloud, trainer_out):
    cloud.api.answer_with(fake.ready(ip="999.1.1.1"))
    result = run_launcher(env=seed_env(cloud, trainer_out, LAUNCHER_XLA_RUNTIME="xrt"))
    assert result.returncode == EX_PROTOCOL, result.stderr
    error, hint = result.stderr.splitlines()[-2:]
    assert "the Cloud TPU API answered with an unusable address" in error and "999.1.1.1" in error
    assert read_records(trainer_out) == []


@pytest.mark.parametrize("body, detail", [
    ('"just a string"', "AttributeError: 'str' object has no attribute 'get'"),
    ("[1, 2]", "AttributeError: 'list' object has no attribute 'get'"),
    ("<html>not json</html>", "AttributeError"),
    ('{"state": "READY", "health": 7}', "health is 7"),
    ('{"state": "READY", "health": "HEALTHY", "networkEndpoints": "10.0.0.1"}', "TypeError"),
])
def test_a_malformed_api_answer_is_a_protocol_error(cloud, trainer_out, body, detail):
    cloud.api.answer_with((200, body))
    result = run_launcher(env=seed_env(cloud, trainer_out, LAUNCHER_XLA_RUNTIME="xrt"))
    assert result.returncode == EX_PROTOCOL, result.stderr
    error, hint = result.stderr.splitlines()[-2:]
    assert "answer for TPU node '{}' is not a Node resource ({}".format(fake.NODE, detail
                                                                         ) in error
    assert "HINT: expected a JSON object with state" in hint and "Traceback" not in result.stderr
    assert read_records(trainer_out) == []


@pytest.mark.parametrize("name", ["a/b", "my tpu", "Node_1", "grpc://10.0.0.2:8470"])
def test_a_tpu_name_that_cannot_exist_stops_before_any_request(cloud, trainer_out, name):
    result = run_launcher(env=seed_env(cloud, trainer_out, TPU_NAME=name,
                                       LAUNCHER_XLA_RUNTIME="xrt"))
    assert result.returncode == EX_CONFIG, result.stderr
    assert "TPU_NAME={!r} is not a valid TPU node name".format(name) in result.stderr
    assert cloud.api.node_requests == [] and read_records(trainer_out) == []


def test_a_hung_api_does_not_outlive_the_deadline(cloud, trainer_out):
    cloud.api.node_delay_s = 60
    started = time.monotonic()
    result = run_launcher(env=seed_env(cloud, trainer_out, LAUNCHER_XLA_RUNTIME="xrt",
                                       LAUNCHER_TPU_WAIT_TIMEOUT="3"))
    assert result.returncode == EX_UNAVAILABLE, result.stderr
    assert "not usable within 3s" in result.stderr
    # Far below the API's 60 s hang on any machine: TensorFlow's import alone takes 3 s on an
    # idle machine and over 10 s on a loaded one, so no tighter bound is safe here.
    assert time.monotonic() - started < 30


def test_vertex_tpu_vm_gets_pjrt_tpu(tmp_path, trainer_out):
    spec = json.dumps({"cluster": {"workerpool0": ["cmle-host:2222"]}, "environment": "cloud",
                       "task": {"type": "workerpool0", "index": 0, "trial": ""},
                       "job": {"workerPoolSpecs": [{"machineSpec": {
                           "machineType": "ct5lp-hightpu-4t"}, "replicaCount": "1"}]}})
    root = make_tpu_sysfs(tmp_path / "host", "0x0063")
    result = run_launcher("--lr=0.1", env=fake_trainer_env(
        trainer_out, CLUSTER_SPEC=spec, LAUNCHER_HOST_ROOT=str(root)))
    assert result.returncode == 0, result.stderr
    [start] = read_records(trainer_out)
    assert start["env"] == {"PJRT_DEVICE": "TPU", "LAUNCHER_TRAINER": start["env"][
        "LAUNCHER_TRAINER"]}
    assert start["argv"] == ["--lr=0.1"]


def test_vertex_tpu_job_without_visible_chips_does_not_fall_back_to_cpu(tmp_path, trainer_out):
    result = run_launcher(env=fake_trainer_env(trainer_out, TPU_ACCELERATOR_TYPE="v5litepod-4",
                                               LAUNCHER_HOST_ROOT=str(tmp_path)))
    assert result.returncode == EX_CONFIG and "no TPU chip is visible" in result.stderr
    assert read_records(trainer_out) == []


def test_local_run_gets_the_cpu_device(trainer_out):
    result = run_launcher(*PLATFORM_ARGS, env=fake_trainer_env(trainer_out,
                                                               LAUNCHER_HOST_ROOT="/nonexistent"))
    assert result.returncode == 0, result.stderr
    [start] = read_records(trainer_out)
    assert start["env"]["PJRT_DEVICE"] == "CPU" and start["argv"] == PLATFORM_ARGS


def test_no_secret_appears_in_the_output(cloud, trainer_out):
    secrets = {"WANDB_API_KEY": "s3cr3t-1", "HF_TOKEN": "s3cr3t-2", "DB_PASSWORD": "s3cr3t-3",
               "GOOGLE_CREDENTIALS_JSON": "s3cr3t-4"}
    result = run_launcher("--api_key=s3cr3t-5", "--lr=0.1", env=seed_env(
        cloud, trainer_out, LAUNCHER_XLA_RUNTIME="xrt", **secrets))
    assert result.returncode == 0, result.stderr
    assert "s3cr3t" not in result.stdout + result.stderr
    # The trainer itself still gets everything, unchanged.
    assert read_records(trainer_out)[0]["argv"] == ["--api_key=s3cr3t-5", "--lr=0.1"]


def test_dry_run_output_evaluates_in_a_shell(tmp_path):
    import subprocess

    result = run_launcher("--dry-run", "--xla-runtime=xrt", env=fake_trainer_env(
        tmp_path / "unused", TPU_IP_ADDRESS="10.1.2.3"))
    assert result.returncode == 0, result.stderr
    shell = subprocess.run(["sh", "-c", result.stdout + '\necho "$XRT_TPU_CONFIG"'],
                           capture_output=True, text=True, check=True)
    assert shell.stdout.strip() == "tpu_worker;0;10.1.2.3:8470"


@pytest.mark.parametrize("flag", ["--help", "--helpfull"])
def test_the_default_trainers_help_comes_through_the_launcher(flag):
    """`python -m launcher --help` is the launcher's own help; after `--`, the trainer's
    flags come, and nothing trains."""
    result = run_launcher("--", flag, env=clean_environ(LAUNCHER_HOST_ROOT="/nonexistent"),
                          timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("MNIST") and "--batch_size:" in result.stdout
