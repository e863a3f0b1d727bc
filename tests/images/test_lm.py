"""The language-model trainer in the pjrt image, as a job runs it: ``--trainer='python -m
trainer.lm'`` in front of its flags, byte-token shards read from ``gs://`` (fake-gcs-server),
the model split over 4 XLA CPU devices (``--sharding=fsdp``), outputs to a mounted folder."""

import json

from containers import run_container
from trainer.data.make_token_shards import main as make_token_shards


def test_a_language_model_trains_from_gcs_token_shards_under_fsdp(images, gcs, gcs_server,
                                                                  tmp_path):
    text = tmp_path / "text"
    text.mkdir()
    for number in range(8):
        (text / "doc{}.txt".format(number)).write_text("the quick brown fox " * (20 + number))
    assert make_token_shards(["--source", str(text), "--dest", str(tmp_path / "tokens"),
                              "--val_every", "4"]) == 0
    for path in (tmp_path / "tokens").iterdir():
        gcs.blob("tokens/" + path.name).upload_from_filename(str(path))
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    result = run_container(
        images["pjrt"], "--trainer=python -m trainer.lm", "--data_dir=gs://{}/tokens".format(
            gcs.name), "--preset=tiny", "--seq_len=32", "--batch_size=2", "--max_steps=6",
        "--log_steps=3", "--sharding=fsdp", "--job-dir=/out",
        env={"CPU_NUM_DEVICES": "4", "STORAGE_EMULATOR_HOST": gcs_server.url},
        volumes={str(out): "/out"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--sharding=fsdp over data:1,fsdp:4: model state" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["trainer"], summary["devices"], summary["sharding"]) == ("lm-tiny", 4,
                                                                             "fsdp")
    assert summary["global_step"] == 6 and summary["final_eval_loss"] > 0
    assert summary["tokens_per_second_per_device"] > 0 and "mfu" not in summary
    assert (out / "model.pt").is_file()
