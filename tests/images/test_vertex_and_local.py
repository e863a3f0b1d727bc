"""The pjrt image where people train today: Vertex AI's CLUSTER_SPEC and AIP_* directories or
--job-dir, into a mounted folder and into gs:// (fake-gcs-server); ``docker stop`` reaching the
trainer as PID 1, then resuming; and the local path with no network at all. MNIST runs on the
real XLA CPU device (torch_xla 2.9) inside the container."""

import json
import re
import shlex

from conftest import clean_environ
from containers import ANY_USER_OPTIONS, docker, make, run_container, stop_when_logged
from doc_blocks import block_containing

# Vertex AI's variable for a CPU worker pool (PLATFORM.md section 4): no TPU expected.
CLUSTER_SPEC = json.dumps({
    "cluster": {"workerpool0": ["cmle-training-workerpool0-0:2222"]}, "environment": "cloud",
    "task": {"type": "workerpool0", "index": 0, "trial": ""},
    "job": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
                                 "replicaCount": "1",
                                 "containerSpec": {"imageUri": "tpu-xla-test:pjrt"}}]}})
SHORT_RUN = ["--fake_data", "--num_epochs=1", "--num_steps=6", "--log_steps=3",
             "--batch_size=32"]


def test_vertex_aip_dirs_into_a_mounted_folder(images, tmp_path):
    env = {"CLUSTER_SPEC": CLUSTER_SPEC, "AIP_MODEL_DIR": "/out/model",
           "AIP_CHECKPOINT_DIR": "/out/checkpoints", "AIP_TENSORBOARD_LOG_DIR": "/out/logs"}
    result = run_container(images["pjrt"], *SHORT_RUN, env=env,
                           volumes={str(tmp_path): "/out"})
    assert result.returncode == 0, result.stderr
    assert "launcher: platform: Vertex AI job without TPU (XLA CPU device)" in result.stderr
    assert "PJRT_DEVICE=CPU" in result.stderr
    summary = json.loads((tmp_path / "model" / "summary.json").read_text())
    assert summary["global_step"] == 6
    # The image's torch_xla 2.9 on Python 3.10 trains on the one-graph compiled steps.
    assert summary["step_path"] == "compiled" and summary["compile_count"] == 3
    assert (tmp_path / "model" / "model.pt").is_file()
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt-000000006.pt"]
    assert any((tmp_path / "logs").iterdir())


def test_four_cpu_devices_train_one_spmd_program_in_the_container(images, tmp_path):
    result = run_container(images["pjrt"], *SHORT_RUN, "--job-dir=/out",
                           env={"CPU_NUM_DEVICES": "4"}, volumes={str(tmp_path): "/out"})
    assert result.returncode == 0, result.stderr
    assert ("launcher: devices: the trainer uses 4 of 4 on this host (--devices=auto: one SPMD "
            "program over CPU_NUM_DEVICES=4 CPU devices)") in result.stderr
    assert "mnist on 4 of 4 devices (SPMD, a 4-device data mesh)" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["devices"], summary["global_batch"], summary["global_step"]) == (4, 128, 6)
    # One execution on all four devices per step: 6 training and 6 evaluation (--num_steps).
    assert summary["executions_per_epoch"] == [6 + 6]


def test_job_dir_on_gcs(images, gcs, gcs_server):
    job = "gs://{}/jobs/1".format(gcs.name)
    result = run_container(images["pjrt"], *SHORT_RUN, "--job-dir=" + job,
                           env={"STORAGE_EMULATOR_HOST": gcs_server.url})
    assert result.returncode == 0, result.stderr
    names = {blob.name for blob in gcs.list_blobs(prefix="jobs/1/")}
    assert {"jobs/1/summary.json", "jobs/1/metrics.jsonl", "jobs/1/model.pt",
            "jobs/1/checkpoints/ckpt-000000006.pt"} <= names
    summary = json.loads(gcs.blob("jobs/1/summary.json").download_as_text())
    assert summary["global_step"] == 6


def test_docker_stop_checkpoints_exits_143_and_the_next_run_resumes_as_any_user(images,
                                                                              tmp_path):
    """As uid 1000, with no /etc/passwd entry, on a read-only root with no network (a pod
    under the "restricted" Pod Security Standard, the GKE templates' securityContext): torch's
    import ended in ``KeyError: 'getpwuid(): uid not found: 1000'``, and the outputs were mode
    0600 (unreadable by a host user when written as root)."""
    tmp_path.chmod(0o777)
    user = ["--user", "1000:1000"] + ANY_USER_OPTIONS
    args = ["--fake_data", "--num_epochs=1", "--num_steps=5000", "--log_steps=5",
            "--batch_size=16", "--job-dir=/job"]
    logs = stop_when_logged(["--network", "none", "-v", "{}:/job".format(tmp_path)] + user
                            + [images["pjrt"]] + args, "step 10/", stop_after=60)
    assert logs.code == 143, logs.stderr
    assert "launcher: platform: no training platform found (XLA CPU device)" in logs.stderr
    stopped = re.search(r"stopped by SIGTERM at step (\d+)", logs.stderr + logs.stdout)
    assert stopped, logs.stderr
    step = int(stopped.group(1))
    assert (tmp_path / "checkpoints" / "ckpt-{:09d}.pt".format(step)).is_file()
    resumed = run_container(images["pjrt"], *(args[:2] + ["--num_steps={}".format(step + 5)]
                                              + args[3:]),
                            volumes={str(tmp_path): "/job"}, network="none", user="1000:1000",
                            read_only=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from /job/checkpoints/ckpt-{:09d}.pt: epoch 1, step {}".format(
        step, step) in resumed.stdout + resumed.stderr
    assert "Traceback" not in logs.stderr + resumed.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["global_step"] == step + 5
    for name in ("summary.json", "model.pt", "metrics.jsonl",
                 "checkpoints/ckpt-{:09d}.pt".format(step + 5)):
        assert (tmp_path / name).stat().st_uid == 1000
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name  # docker's umask 022


def test_make_local_run_as_the_readme_writes_it(images):
    """The README's rehearsal of the pjrt image it built, word for word: Vertex AI's
    CLUSTER_SPEC, no TPU, the launcher's dry run (it used to refuse the YOUR_PROJECT
    placeholder, exit 78, and look for the xrt image)."""
    [line] = [line for line in block_containing("make local-run PROJECT=my-project",
                                                page="README").text.splitlines()
              if line.startswith("make local-run")]
    args = shlex.split(line, comments=True)[1:]
    # Where `make build push PROJECT=my-project RUNTIME=pjrt` puts the image (the Makefile's
    # IMAGE_URI).
    name = "us-central1-docker.pkg.dev/my-project/pytorch-xla/pytorch-xla-trainer:pjrt"
    assert args == ["local-run", "PROJECT=my-project", "RUNTIME=pjrt"]
    docker("tag", images["pjrt"], name)
    try:
        result = make(*args, env=clean_environ(), timeout=300)
    finally:
        docker("rmi", name, check=False)
    assert result.returncode == 0, result.stderr
    assert "launcher: platform: Vertex AI job without TPU (XLA CPU device)" in result.stderr
    assert "export PJRT_DEVICE=CPU" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("# trainer: ")
