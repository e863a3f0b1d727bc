"""trainer.outputs and trainer.config: where outputs go, and the platform's flag spellings."""

import json

from trainer.config import normalize_argv
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
    outputs = RunOutputs(OutputPaths(model_dir=str(tmp_path)), resume_step=10)
    outputs.record("train", {"loss": 1.0}, 15)
    outputs.close()
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
    outputs.close()
    assert gcs.get_blob("job/metrics.jsonl").generation != first
    assert len(gcs.blob("job/metrics.jsonl").download_as_bytes().splitlines()) == 2
    assert any(blob.name.startswith("job/tensorboard/events.out.tfevents")
               for blob in gcs.list_blobs(prefix="job/"))
