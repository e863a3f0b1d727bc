"""The MNIST trainer writing its job dir to gs:// through a proxy that breaks Cloud Storage
requests, with each google-cloud-storage major the images ship (3.x: pjrt, 2.x: xrt):

- transient 503s and hung requests on every kind of write are retried: the run succeeds and
  every output is whole;
- an outage of one kind of write (checkpoints, metrics, TensorBoard, model, summary) ends the
  run with exit 74 and one line naming the object, never a traceback;
- a refusal (403, a missing bucket) ends it with exit 77, which a JobSet does not retry, after
  a short retry that lets a refusal of a pod's first seconds pass (Workload Identity not yet
  answering).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gcs_fault_proxy import Rule

from conftest import REPO, clean_environ

# The xrt image's google-cloud-storage, installed by `make venv` as an overlay (see Makefile).
GCS2_OVERLAY = Path(sys.prefix) / "gcs2"
RUN = ["--fake_data", "--num_epochs=1", "--num_steps=4", "--log_steps=2", "--batch_size=16"]
# Object names of every kind of write, as the rules match them.
WRITES = {"checkpoint": "checkpoints/ckpt-", "metrics": "metrics.jsonl",
          "tensorboard": "tensorboard/events.out.tfevents", "model": "model.pt",
          "summary": "summary.json"}


@pytest.fixture(scope="module", params=["3.x", "2.x"])
def storage_major(request):
    """``PYTHONPATH`` (possibly empty) that selects a google-cloud-storage major, checked."""
    path = ""
    if request.param == "2.x":
        if not (GCS2_OVERLAY / "google" / "cloud" / "storage").is_dir():
            pytest.fail("{} is missing: `make venv` installs it".format(GCS2_OVERLAY))
        path = str(GCS2_OVERLAY)
    version = subprocess.run(
        [sys.executable, "-c", "import google.cloud.storage as s; print(s.__version__)"],
        env=clean_environ(PYTHONPATH=path), capture_output=True, text=True, check=True)
    assert version.stdout.startswith(request.param[0] + "."), version.stdout
    return path


def train(proxy, bucket, pythonpath, deadline="8", **environ):
    """Run the trainer with its job dir in ``bucket`` through the proxy."""
    job = "gs://{}/job".format(bucket.name)
    result = subprocess.run(
        [sys.executable, "-m", "trainer.mnist", "--job_dir=" + job] + RUN, cwd=str(REPO),
        env=clean_environ(PJRT_DEVICE="CPU", STORAGE_EMULATOR_HOST=proxy.url,
                          PYTHONPATH=pythonpath, TRAINER_GCS_RETRY_DEADLINE=deadline,
                          **environ),
        capture_output=True, text=True, timeout=300)
    return result, job


def assert_every_output_whole(bucket):
    names = {blob.name for blob in bucket.list_blobs(prefix="job/")}
    assert {"job/checkpoints/ckpt-000000004.pt", "job/model.pt", "job/summary.json",
            "job/metrics.jsonl"} <= names, names
    assert any(name.startswith("job/tensorboard/events.out.tfevents") for name in names)
    assert json.loads(bucket.blob("job/summary.json").download_as_bytes())["global_step"] == 4
    lines = bucket.blob("job/metrics.jsonl").download_as_bytes().decode().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4, 4]


# A retry deadline of 10 s gives each attempt 2.5 s (trainer.storage: a quarter of it): a hang
# of 3 s outlasts it, and a write broken twice in a row (writes overlap) still fits the deadline.
@pytest.mark.parametrize("fault", [
    {},                # every write's first attempt gets a 503
    {"hang_s": 3},     # ... or hangs past the per-attempt timeout
], ids=["503-then-ok", "hang-then-ok"])
def test_transient_faults_on_every_write_are_retried(faulty_gcs, storage_major, fault):
    gcs, proxy = faulty_gcs
    rule = proxy.add(Rule("job/", every=2, **fault))
    result, _ = train(proxy, gcs, storage_major, deadline="10")
    assert result.returncode == 0, result.stderr
    assert rule.broken >= 5, "the proxy broke only {} writes".format(rule.broken)
    assert_every_output_whole(gcs)


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_an_outage_of_any_write_is_exit_74_in_one_line(faulty_gcs, storage_major, kind):
    gcs, proxy = faulty_gcs
    proxy.add(Rule(WRITES[kind]))
    result, job = train(proxy, gcs, storage_major, deadline="2")
    assert result.returncode == 74, result.stderr
    error, hint = result.stderr.strip().splitlines()[-2:]
    assert error.startswith("StorageError: GCS kept failing for {}/".format(job)), error
    assert error.endswith(": HTTP 503 (ServiceUnavailable)") or error.endswith(
        ": HTTP 503 (InvalidResponse)")
    assert WRITES[kind] in error
    assert hint.startswith("HINT: ") and "Traceback" not in result.stderr


def test_a_checkpoint_that_cannot_be_read_stops_the_run_and_deletes_nothing(
        faulty_gcs, storage_major):
    # Counted as "corrupt", an unreadable checkpoint made the run start over at step 0 and
    # rotate the job's newer checkpoints away. One finished run serves both failures: an
    # outage and a refusal (403) of its checkpoint's reads.
    gcs, proxy = faulty_gcs
    result, job = train(proxy, gcs, storage_major)
    assert result.returncode == 0, result.stderr
    before = {blob.name: blob.md5_hash for blob in gcs.list_blobs(prefix="job/checkpoints/")}
    for status, code in ((503, 74), (403, 77)):
        rule = proxy.add(Rule(WRITES["checkpoint"], methods=("GET",), status=status))
        result, _ = train(proxy, gcs, storage_major, deadline="2")
        proxy.remove(rule)
        assert result.returncode == code, (status, result.stderr)
        error = result.stderr.strip().splitlines()[-2]
        assert error.startswith("StorageError: ") and "ckpt-000000004.pt" in error, error
        assert "Traceback" not in result.stderr and "skipping" not in result.stderr
        after = {blob.name: blob.md5_hash
                 for blob in gcs.list_blobs(prefix="job/checkpoints/")}
        assert after == before, status


EVERY_METHOD = ("GET", "POST", "PUT", "DELETE", "PATCH")


# The refusal window: the 3 s retry deadline (20 s by default, at most the deadline), or 0.2 s,
# which the first write comes after on any machine (its first retry would be 0.5 s later).
@pytest.mark.parametrize("methods, window, retried", [
    (EVERY_METHOD, "20", True), (("POST", "PUT"), "0.2", False)],
    ids=["every-request", "writes-only"])
def test_a_refusal_is_exit_77_after_a_short_retry(faulty_gcs, storage_major, methods, window,
                                                  retried):
    """403 on every request (an account without the role), or on the writes only (a node
    pool's read-only scopes): exit 77, which the JobSet templates end at once instead of
    re-creating the slice ten times. A refusal from the process's first request on is retried
    for the refusal window (here the 3 s retry deadline: at 0, 0.5 and 1.5 s); a write refused
    after it is final at once. (How soon the first write comes after the first request is the
    machine's speed: the window is set so that it is after it, whatever the speed.)"""
    gcs, proxy = faulty_gcs
    rule = proxy.add(Rule("job/", methods=methods, status=403))
    result, job = train(proxy, gcs, storage_major, deadline="3",
                        TRAINER_GCS_REFUSAL_RETRY=window)
    assert result.returncode == 77, result.stderr
    error, hint = result.stderr.strip().splitlines()[-2:]
    assert error.startswith("StorageError: GCS refused the request for {}/".format(job)), error
    assert error.endswith(": HTTP 403 (Forbidden)") or error.endswith(
        ": HTTP 403 (InvalidResponse)"), error
    assert hint.startswith("HINT: give the job's account roles/storage.objectUser on gs://" +
                           gcs.name) and "Traceback" not in result.stderr
    assert (rule.broken >= 3) == retried, rule.broken


def test_a_refusal_in_a_pods_first_seconds_passes_once_it_ends(faulty_gcs, storage_major):
    """The first two requests refused, as while a new pod's Workload Identity does not answer
    yet: retried, and the run writes everything."""
    gcs, proxy = faulty_gcs
    rule = proxy.add(Rule("job/", methods=EVERY_METHOD, status=403, limit=2))
    result, _ = train(proxy, gcs, storage_major, deadline="10")
    assert result.returncode == 0, result.stderr
    assert rule.broken == 2
    assert_every_output_whole(gcs)


def test_a_job_dir_in_a_missing_bucket_is_exit_77_naming_it(gcs, storage_major):
    result = subprocess.run(
        [sys.executable, "-m", "trainer.mnist", "--job_dir=gs://no-such-bucket-here/job"] + RUN,
        cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU", PYTHONPATH=storage_major,
                                         TRAINER_GCS_RETRY_DEADLINE="2"),
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 77, result.stderr
    error, hint = result.stderr.strip().splitlines()[-2:]
    assert error == "StorageError: bucket gs://no-such-bucket-here does not exist", error
    assert hint.startswith("HINT: create it") and "Traceback" not in result.stderr
