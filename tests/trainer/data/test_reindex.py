"""trainer.data.reindex: a shard set with a version-1 index (names and counts only) gets the
index make_shards writes today, from its shards alone; the trainer then reads it."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import worker_kills

from trainer.data.reindex import main, reindex
from trainer.data.shard_index import ShardIndex
from trainer.data.shard_source import ShardSource
from trainer.errors import DataError


def version_1(folder, index):
    """Write ``index`` as the version-1 format did into ``folder``."""
    (folder / "index.json").write_text(json.dumps({
        "format": "tpu-xla-shards", "version": 1, "classes": index.classes,
        "splits": {split: [{"name": name, "count": count} for name, count in
                           index.shards(split)] for split in index.splits},
        "skipped": index.skipped}))


@pytest.fixture
def old_set(photo_shards, tmp_path):
    folder = tmp_path / "old"
    shutil.copytree(str(photo_shards), str(folder))
    current = ShardIndex.from_json((photo_shards / "index.json").read_bytes(), "index.json")
    version_1(folder, current)
    return folder, current


def test_a_version_1_set_gets_the_same_index_as_make_shards_writes(old_set):
    folder, current = old_set
    with pytest.raises(DataError, match="format version 1"):
        ShardSource(str(folder), 32, 8, 0, 1)
    assert reindex(str(folder), workers=2) == current
    assert ShardIndex.from_json((folder / "index.json").read_bytes(), "index.json") == current
    assert json.loads((folder / "index.v1.json").read_text())["version"] == 1
    assert ShardSource(str(folder), 32, 8, 0, 1).steps_per_epoch == 24
    assert reindex(str(folder)) is None  # already current: nothing to do


def test_a_shard_that_is_not_what_the_old_index_says_is_refused(old_set, capsys):
    folder, current = old_set
    data = json.loads((folder / "index.json").read_text())
    data["splits"]["train"][2]["count"] = 25
    (folder / "index.json").write_text(json.dumps(data))
    assert main(["--data_dir=" + str(folder), "--workers=1"]) == 65
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].endswith("train-000002.tar holds 24 examples; {} says 25".format(
        folder / "index.json"))
    assert lines[1].startswith("HINT: ")
    assert main(["--data_dir=" + str(folder / "none")]) == 65
    assert main(["--workers=1"]) == 64


def test_a_worker_killed_mid_run_ends_it_at_once_with_70_and_the_same_command_finishes(
        old_set):
    folder, current = old_set
    shard = folder / "train-000005.tar"
    data = shard.read_bytes()
    shard.unlink()
    os.mkfifo(str(shard))  # the worker that reads it blocks there
    command = [sys.executable, "-m", "trainer.data.reindex", "--data_dir=" + str(folder),
               "--workers=2"]
    # multiprocessing.Pool.map waited forever here (TimeoutExpired)
    killed, code, stderr = worker_kills.run_and_kill_the_reader(command, shard)
    assert code == 70, stderr
    lines = stderr.splitlines()
    assert lines[0] == ("WorkerDied: worker process {} was killed by SIGKILL while reading "
                        "train-000005.tar; run the same command again: the old index stays "
                        "until every shard is read".format(killed))
    assert len(lines) == 2 and lines[1].startswith("HINT: ")
    assert json.loads((folder / "index.json").read_text())["version"] == 1

    shard.unlink()
    shard.write_bytes(data)
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert ShardIndex.from_json((folder / "index.json").read_bytes(), "index.json") == current
