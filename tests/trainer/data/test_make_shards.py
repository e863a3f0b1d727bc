"""trainer.data.make_shards on real photographs: every image once with its label, the quirks
kept, broken files skipped by name, resumable, locally and on fake-gcs-server."""

import io
import json
import logging
import os
import subprocess
import sys
import tarfile

import pytest

import photos as photo_set
from trainer import storage
from trainer.data.make_shards import convert, main
from trainer.data.shard_index import ShardIndex
from trainer.data.tar_members import read_samples


@pytest.fixture(scope="module")
def broken_photos(tmp_path_factory):
    """A small photo set with a truncated JPEG in train/astronaut."""
    return photo_set.build(tmp_path_factory.mktemp("photos"), train=3, val=2, broken=True)


def shard_contents(dest: storage.Directory, index: ShardIndex):
    """{split: [(image bytes, label)]} of every shard the index lists."""
    found = {}
    for split in ("train", "val"):
        found[split] = []
        for name, count in index.shards(split):
            samples = list(read_samples(io.BytesIO(dest.read_bytes(name))))
            assert len(samples) == count
            for _, files in samples:
                image = [data for kind, data in files.items() if kind != "cls"]
                found[split].append((image[0], int(files["cls"])))
    return found


def source_files(root, split, skip=()):
    classes = sorted(os.listdir(str(root / "train")))
    return sorted(((root / split / cls / name).read_bytes(), label)
                  for label, cls in enumerate(classes)
                  for name in sorted(os.listdir(str(root / split / cls)))
                  if "{}/{}/{}".format(split, cls, name) not in skip)


def test_every_image_once_with_its_label_and_the_broken_one_skipped_by_name(broken_photos,
                                                                            tmp_path, caplog):
    index = convert(str(broken_photos), str(tmp_path), shard_size=5, workers=2)
    broken = "train/astronaut/train_astronaut_broken.JPEG"
    assert index.skipped == [broken]
    assert "skipped {}: cannot be decoded".format(broken) in caplog.text
    assert index.classes == sorted(photo_set.SOURCES)
    counts = [count for _, count in index.shards("train")]
    assert len(counts) == 5 and sum(counts) == 24  # 25 files in shards of 5, one broken
    found = shard_contents(storage.open_dir(str(tmp_path)), index)
    for split in ("train", "val"):
        # The original bytes: the grayscale, CMYK, PNG-named-.JPEG and 4,000 px files too.
        assert sorted(found[split]) == source_files(broken_photos, split, skip=(broken,))
    # Shuffled before cutting: the first shard is not one class.
    assert len({label for _, label in found["train"][:5]}) > 1
    assert json.loads((tmp_path / "index.json").read_text())["skipped"] == [broken]


def test_shards_are_webdataset_layout_with_the_true_image_type(photo_shards):
    with tarfile.open(str(photo_shards / "train-000000.tar")) as archive:
        names = archive.getnames()
    assert len(names) == 48 and all(name.count(".") == 1 for name in names)
    keys = [name.split(".")[0] for name in names]
    assert keys[0::2] == keys[1::2]  # an example's files are adjacent
    assert {name.split(".")[1] for name in names} <= {"jpg", "png", "cls"}


def test_an_interrupted_run_writes_only_the_missing_shards(broken_photos, tmp_path, caplog):
    convert(str(broken_photos), str(tmp_path), shard_size=5, workers=1)
    # As if killed after two shards: the rest, their markers and the index are missing, and
    # a temporary file of a shard being written lies there (never taken for a shard).
    kept = {"train-000000.tar", "train-000000.json", "train-000001.tar", "train-000001.json"}
    times = {name: os.stat(str(tmp_path / name)).st_mtime_ns for name in kept}
    for name in os.listdir(str(tmp_path)):
        if name not in kept:
            os.remove(str(tmp_path / name))
    (tmp_path / ".tmp-half").write_bytes(b"half a shard")
    caplog.set_level(logging.INFO, logger="trainer")
    index = convert(str(broken_photos), str(tmp_path), shard_size=5, workers=1)
    assert "(2 done before)" in caplog.text
    assert {name: os.stat(str(tmp_path / name)).st_mtime_ns for name in kept} == times
    assert index.examples("train") == 24 and index.examples("val") == 16
    # Other options make another plan: refused rather than mixed with these shards.
    assert main(["--source", str(broken_photos), "--dest", str(tmp_path),
                 "--shard_size", "7"]) == 65


def test_from_and_to_cloud_storage(photos, gcs, tmp_path):
    for path in sorted(photos.rglob("*.JPEG"))[::4]:
        gcs.blob("tree/" + str(path.relative_to(photos))).upload_from_filename(str(path))
    index = convert("gs://{}/tree".format(gcs.name), "gs://{}/shards".format(gcs.name),
                    shard_size=20, workers=2)
    dest = storage.open_dir("gs://{}/shards".format(gcs.name))
    assert dest.exists("index.json") and index.examples("train") + index.examples("val") == 64
    local = convert(str(photos), str(tmp_path), shard_size=20)
    assert local.classes == index.classes


def test_command_line_exit_codes(photos, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "trainer.data.make_shards"] + list(args),
                              capture_output=True, text=True, timeout=300)

    usage = run("--source", str(photos))
    assert usage.returncode == 64 and "--dest" in usage.stderr
    bad_size = run("--source", str(photos), "--dest", str(tmp_path), "--shard_size=0")
    assert bad_size.returncode == 64 and "--shard_size" in bad_size.stderr
    (tmp_path / "tree" / "train" / "a").mkdir(parents=True)
    (tmp_path / "tree" / "val" / "b").mkdir(parents=True)
    for split, cls in (("train", "a"), ("val", "b")):
        (tmp_path / "tree" / split / cls / "x.JPEG").write_bytes(b"")
    mismatch = run("--source", str(tmp_path / "tree"), "--dest", str(tmp_path / "out"))
    assert mismatch.returncode == 65
    assert mismatch.stderr.splitlines()[0].endswith("a only in train/, b only in val/")
    assert "Traceback" not in mismatch.stderr
