"""trainer.outputs and trainer.config: where outputs go, and the platform's flag spellings."""

import json

import pytest
from gcs_fault_proxy import Rule

from trainer import storage
from trainer.config import normalize_argv
from trainer.errors import EX_USAGE, StorageError, TrainerError
from trainer.outputs import METRICS, OutputPaths, RunOutputs


def test_job_dir_layout_and_vertex_fallback():
    assert OutputPaths.resolve("gs://b/j/", {}) == OutputPaths(
        "gs://b/j", "gs://b/j/checkpoints", "gs://b/j/tensorboard", "gs://b/j/compile-cache")
    vertex = {"AIP_MODEL_DIR": "gs://b/out/model", "AIP_CHECKPOINT_DIR": "gs://b/out/ckpt",
              "AIP_TENSORBOARD_LOG_DIR": "gs://b/out/logs"}
    assert OutputPaths.resolve(None, vertex) == OutputPaths(
        "gs://b/out/model", "gs://b/out/ckpt", "gs://b/out/logs", "gs://b/out/ckpt/compile-cache")
    assert OutputPaths.resolve("gs://mine", vertex).model_dir == "gs://mine"


LEGACY_TRIAL = json.dumps({"cluster": {"master": ["127.0.0.1:2222"]}, "environment": "cloud",
                           "task": {"type": "master", "index": 0, "trial": "3"}})
VERTEX_TRIAL = json.dumps({"cluster": {"workerpool0": ["h:2222"]}, "environment": "cloud",
                           "task": {"type": "workerpool0", "index": 0, "trial": 7}})


@pytest.mark.parametrize("environ, trial", [({"TF_CONFIG": LEGACY_TRIAL}, "3"),
                                            ({"CLUSTER_SPEC": VERTEX_TRIAL}, "7")])
def test_each_tuning_trial_writes_under_its_own_id(environ, trial):
    # The platform passes every trial the same --job-dir: without the trial id they overwrote
    # each other's metrics and resumed from each other's checkpoints.
    paths = OutputPaths.resolve("gs://b/j", environ)
    assert paths == OutputPaths("gs://b/j/" + trial, "gs://b/j/{}/checkpoints".format(trial),
                                "gs://b/j/{}/tensorboard".format(trial),
                                "gs://b/j/{}/compile-cache".format(trial))


def test_no_trial_and_an_empty_trial_write_to_the_job_dir_itself():
    untuned = json.dumps({"task": {"type": "master", "index": 0, "trial": ""}})
    assert OutputPaths.resolve("gs://b/j", {"TF_CONFIG": untuned}).model_dir == "gs://b/j"


@pytest.mark.parametrize("trial", ["../other", "a/b", True, ".hidden"])
def test_a_trial_id_that_is_no_folder_name_is_refused(trial):
    environ = {"TF_CONFIG": json.dumps({"task": {"trial": trial}})}
    with pytest.raises(TrainerError, match="task.trial") as raised:
        OutputPaths.resolve("gs://b/j", environ)
    assert raised.value.exit_code == EX_USAGE


@pytest.mark.parametrize("name", ["TF_CONFIG", "CLUSTER_SPEC"])
def test_a_platform_run_with_nowhere_to_write_is_a_usage_error(name):
    with pytest.raises(TrainerError) as raised:
        OutputPaths.resolve(None, {name: LEGACY_TRIAL})
    assert raised.value.exit_code == EX_USAGE
    assert raised.value.message.startswith(name + " is set")
    assert "--job_dir" in raised.value.hint and "baseOutputDirectory" in raised.value.hint
    # Off the platforms, no job dir is fine: a local run that keeps nothing.
    assert OutputPaths.resolve(None, {}) == OutputPaths()


def test_platform_spellings_are_normalised():
    known = {"job_dir": 1, "lr": 1}
    assert normalize_argv(["prog", "--job-dir=gs://b/j", "--lr=0.1", "--other-flag=x", "pos"],
                          known) == ["prog", "--job_dir=gs://b/j", "--lr=0.1",
                                     "--other-flag=x", "pos"]


def test_resume_drops_metric_lines_after_the_restored_step(tmp_path):
    lines = [{"kind": "train", "step": step} for step in (5, 10, 15)]
    (tmp_path / METRICS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    with RunOutputs(OutputPaths(model_dir=str(tmp_path)), resume_step=10) as outputs:
        outputs.record("train", {"loss": 1.0}, 15)
    steps = [json.loads(line)["step"] for line in (tmp_path / METRICS).read_text().splitlines()]
    assert steps == [5, 10, 15]


def test_resume_counts_the_steps_logged_past_it_and_the_stops_before_it(tmp_path):
    # A process stopped at step 5, resumed, logged up to step 15 and was killed; the run that
    # resumes at step 10 trains steps 11 to 15 again (``job_totals``).
    lines = [{"kind": "train", "step": 5}, {"kind": "stop", "step": 5, "signal": "SIGTERM"},
             {"kind": "train", "step": 10}, {"kind": "train", "step": 15}]
    (tmp_path / METRICS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    with RunOutputs(OutputPaths(model_dir=str(tmp_path)), resume_step=10) as outputs:
        assert (outputs.steps_past_resume, outputs.stops) == (5, 1)
        outputs.record("stop", {"signal": "SIGTERM"}, 12)
        assert outputs.stops == 2


def test_gcs_flush_uploads_only_what_changed(gcs):
    uri = "gs://{}/job".format(gcs.name)
    outputs = RunOutputs(OutputPaths.resolve(uri, {}))
    outputs.record("train", {"loss": 1.0}, 1)
    outputs.flush()
    first = gcs.get_blob("job/metrics.jsonl").generation
    outputs.flush()  # nothing new: no upload
    assert gcs.get_blob("job/metrics.jsonl").generation == first
    outputs.record("train", {"loss": 0.5}, 2)
    outputs.flush()
    outputs.release()
    assert gcs.get_blob("job/metrics.jsonl").generation != first
    assert len(gcs.blob("job/metrics.jsonl").download_as_bytes().splitlines()) == 2
    assert any(blob.name.startswith("job/tensorboard/events.out.tfevents")
               for blob in gcs.list_blobs(prefix="job/"))


def test_a_failed_run_leaves_no_working_folder(gcs, scratch):
    uri = "gs://{}/job".format(gcs.name)
    with pytest.raises(RuntimeError):
        with RunOutputs(OutputPaths.resolve(uri, {})) as outputs:
            outputs.record("train", {"loss": 1.0}, 1)
            outputs.flush()
            assert list(scratch.iterdir())  # metrics and events are staged there
            raise RuntimeError("the run failed")
    assert not list(scratch.iterdir())
    assert gcs.get_blob("job/metrics.jsonl") is not None  # what was flushed stays


def test_outputs_that_cannot_start_leave_no_working_folder(tmp_path, scratch):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "tensorboard").write_text("a file where a folder must be")
    with pytest.raises(StorageError, match="tensorboard"):
        RunOutputs(OutputPaths.resolve(str(tmp_path / "job"), {}))
    assert not list(scratch.iterdir())


def test_a_run_without_a_checkpoint_drops_the_lines_of_a_replica_that_died_before_one(tmp_path):
    # Reproduced: steps 20, 40, then 20 again when the restarted replica logged.
    lines = [{"kind": "train", "step": step} for step in (20, 40)]
    (tmp_path / METRICS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    with RunOutputs(OutputPaths(model_dir=str(tmp_path)), resume_step=0) as outputs:
        outputs.record("train", {"loss": 1.0}, 20)
    steps = [json.loads(line)["step"] for line in (tmp_path / METRICS).read_text().splitlines()]
    assert steps == [20]


def outputs_through(proxy, bucket, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    return RunOutputs(OutputPaths.resolve("gs://{}/job".format(bucket.name), {}))


def metric_lines(bucket):
    blob = bucket.get_blob("job/" + METRICS)
    return len(blob.download_as_bytes().splitlines()) if blob is not None else 0


def test_a_background_flush_leaves_the_upload_to_a_thread_and_the_last_flush_waits(
        faulty_gcs, monkeypatch):
    bucket, proxy = faulty_gcs
    # The first upload of the metrics is held for 2 s (far longer than the few calls below
    # take) and dropped; its retry gets through.
    held = proxy.add(Rule(METRICS, hang_s=2, every=2))
    with outputs_through(proxy, bucket, monkeypatch) as outputs:
        outputs.record("train", {"loss": 1.0}, 1)
        outputs.flush(background=True)
        assert metric_lines(bucket) == 0  # returned while its upload is still held
        outputs.record("train", {"loss": 0.5}, 2)
        outputs.flush(background=True)  # one upload at a time: this one does nothing ...
        assert held.hit.wait(60)
        outputs.flush()  # ... and the last flush waits for the one in flight, then uploads
        assert metric_lines(bucket) == 2


def test_a_failed_background_upload_is_one_error_at_the_next_flush(faulty_gcs, monkeypatch):
    bucket, proxy = faulty_gcs
    monkeypatch.setattr(storage, "REFUSAL_RETRY_S", 1.0)  # a refusal is retried that long
    proxy.add(Rule(METRICS, status=403))
    with outputs_through(proxy, bucket, monkeypatch) as outputs:
        outputs.record("train", {"loss": 1.0}, 1)
        outputs.flush(background=True)
        with pytest.raises(StorageError) as raised:
            outputs.flush()
    assert raised.value.exit_code == 77 and "\n" not in raised.value.message  # a refusal
    assert METRICS in raised.value.message


def test_a_local_job_dir_has_nothing_to_upload(tmp_path):
    with RunOutputs(OutputPaths.resolve(str(tmp_path / "job"), {})) as outputs:
        outputs.record("train", {"loss": 1.0}, 1)
        assert outputs.staged_upload() is None  # written in place
        outputs.flush(background=True)
    assert (tmp_path / "job" / METRICS).read_text().count("\n") == 1
