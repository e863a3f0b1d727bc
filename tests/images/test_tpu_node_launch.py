"""Legacy AI Platform, as the platform starts the container: the seed's exact TF_CONFIG and
TPU_CONFIG, the emulated Cloud TPU API and metadata server reached from inside the container,
and ``cloud-tpu-client`` installed in the xrt image as in the real base."""

import json

import fake_cloud_tpu as fake
from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG, clean_environ, read_records
from containers import (
    TESTS_IN_CONTAINER,
    container_environ,
    fake_trainer_mounts,
    make,
    run_container,
    stderr_lines,
)

# The xrt stand-in has no torch_xla 1.11 to detect XRT from (docs/submitting.md: rehearse); the real
# image needs no such setting.
STANDIN_XRT = {"LAUNCHER_XLA_RUNTIME": "xrt"}


def seed_environ(cloud):
    return dict(container_environ(cloud), TPU_CONFIG=SEED_TPU_CONFIG, TF_CONFIG=SEED_TF_CONFIG)


def test_xrt_image_resolves_the_node_and_the_trainer_sees_xrt_tpu_config(images, cloud,
                                                                           tmp_path):
    cloud.api.answer_with(fake.state("CREATING"), fake.ready(ip="10.240.3.4"))
    env = dict(seed_environ(cloud), FAKE_TRAINER_OUT="/out/trainer.jsonl",
               LAUNCHER_TRAINER="python {}/fake_trainer.py".format(TESTS_IN_CONTAINER),
               **STANDIN_XRT)
    args = ["--job-dir=gs://my-bucket/jobs/7", "--lr=0.1"]
    result = run_container(images["xrt"], *args, env=env,
                           volumes=fake_trainer_mounts(str(tmp_path)))
    assert result.returncode == 0, result.stderr
    [start] = read_records(tmp_path / "trainer.jsonl")
    # A command of the user's: dumb-init is PID 1 and runs it as its child (launcher.init).
    assert (start["pid"] > 1, start["ppid"], start["argv"]) == (True, 1, args)
    assert start["env"]["XRT_TPU_CONFIG"] == "tpu_worker;0;10.240.3.4:8470"
    assert len(cloud.api.node_requests) >= 2  # it waited through CREATING
    assert "Traceback" not in result.stderr and "DuplicateFlagError" not in result.stderr


def test_xrt_image_has_cloud_tpu_client_as_the_real_base_does(images):
    result = run_container(images["xrt"], "-c", "import cloud_tpu_client, tensorflow; "
                           "from importlib_metadata import version; "
                           "print(version('cloud-tpu-client'), tensorflow.__version__)",
                           entrypoint="python")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["0.10", "2.11.0"]


def test_pjrt_image_refuses_a_tpu_node_with_one_line(images, cloud):
    result = run_container(images["pjrt"], env=seed_environ(cloud))
    assert result.returncode == 78, result.stderr
    error, hint = stderr_lines(result)[-2:]
    assert error.startswith("launcher: ConfigError: ") and "PJRT" in error
    assert hint.startswith("launcher: HINT: ") and "gcr.io/tpu-pytorch/xla:r1.11_3.7" in hint
    assert cloud.api.node_requests == []  # refused before any waiting


def test_make_local_run_as_documented(images, cloud):
    cloud.api.answer_with(fake.ready(ip="10.9.8.7"))
    extra = " ".join("-e {}={}".format(key, value) for key, value in
                     dict(container_environ(cloud), **STANDIN_XRT).items())
    result = make("local-run", "PROJECT=test", "RUNTIME=xrt", "IMAGE_URI=" + images["xrt"],
                  "LOCAL_TPU_CONFIG=" + SEED_TPU_CONFIG,
                  "DOCKER_RUN_ARGS=--network host " + extra, "JOB_ARGS=--lr=0.1",
                  env=clean_environ(), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "export XRT_TPU_CONFIG='tpu_worker;0;10.9.8.7:8470'" in result.stdout
    assert "# trainer: python -m trainer.mnist --lr=0.1" in result.stdout.replace(
        "/root/anaconda3/envs/pytorch/bin/python", "python")
    assert json.loads(SEED_TPU_CONFIG)["tpu_node_name"] in result.stderr
