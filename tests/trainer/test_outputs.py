"""trainer.outputs and trainer.config: where outputs go, and the platform's flag spellings."""

import json
import tempfile

import pytest

from trainer.config import normalize_argv
from trainer.errors import StorageError
from trainer.outputs import METRICS, OutputPaths, RunOutputs


def test_job_dir_layout_and_vertex_fallback():
    assert OutputPaths.resolve("gs://b/j/", {}) == OutputPaths(
        "gs://b/j", "gs://b/j/checkpoints", "gs://b/j/tensorboard", "gs://b/j/compile-cache")
    vertex = {"AIP_MODEL_DIR": "gs://b/out/model", "AIP_CHECKPOINT_DIR": "gs://b/out/ckpt",
              "AIP_TENSORBOARD_LOG_DIR": "gs://b/out/logs"}
    assert OutputPaths.resolve(None, vertex) == OutputPaths(
        "gs://b/out/model", "gs://b/out/ckpt", "gs://b/out/logs", "gs://b/out/ckpt/compile-cache")
    assert OutputPaths.resolve("gs://mine", vertex).model_dir == "gs://mine"


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


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """tempfile's folder for this test, so what RunOutputs leaves behind can be seen."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


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
