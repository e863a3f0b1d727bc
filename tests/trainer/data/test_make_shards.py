"""trainer.data.make_shards on real photographs: every image once with its label, the quirks
kept, broken files skipped by name, resumable, locally and on fake-gcs-server."""

import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile

import numpy
import pytest
import simplejpeg
import torch
import worker_kills

import photos as photo_set
from trainer import storage
from trainer.data import jpeg_decode
from trainer.data.folder_tree import split_class_folders
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
                image = [data for kind, data in files.items() if kind in ("jpg", "png")]
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


def test_shards_are_webdataset_layout_keyed_by_place_with_the_source_in_json(photo_shards,
                                                                           photos):
    with tarfile.open(str(photo_shards / "train-000000.tar")) as archive:
        members = [(member.name, archive.extractfile(member).read()) for member in archive]
    names = [name for name, _ in members]
    assert len(names) == 72 and all(name.count(".") == 1 for name in names)
    keys = [name.split(".")[0] for name in names]
    # An example's files are adjacent; its key is its place in the shard.
    assert keys[0::3] == keys[1::3] == keys[2::3] == [
        "train-000000_{:06d}".format(number) for number in range(24)]
    assert {name.split(".")[1] for name in names[1::3]} == {"cls"}
    assert {name.split(".")[1] for name in names[2::3]} == {"json"}
    classes = sorted(photo_set.SOURCES)
    for (name, image), (_, label), (_, source) in zip(*[members[at::3] for at in range(3)]):
        record = json.loads(source.decode())
        # These are plain JPEGs and PNGs: kept byte for byte, with the true type.
        assert image == (photos / record["path"]).read_bytes()
        assert record["format"] == {"jpg": "JPEG", "png": "PNG"}[name.split(".")[1]]
        assert record["path"].split("/")[1] == classes[int(label)]


def test_an_interrupted_run_writes_only_the_missing_shards(broken_photos, tmp_path, caplog):
    convert(str(broken_photos), str(tmp_path), shard_size=5, workers=0)
    # As if killed after two shards: the rest, their markers and the index are missing, and
    # a temporary file of a shard being written lies there (never taken for a shard).
    kept = {"train-000000.tar", "train-000000.json", "train-000001.tar", "train-000001.json"}
    times = {name: os.stat(str(tmp_path / name)).st_mtime_ns for name in kept}
    for name in os.listdir(str(tmp_path)):
        if name not in kept:
            os.remove(str(tmp_path / name))
    (tmp_path / ".tmp-half").write_bytes(b"half a shard")
    caplog.set_level(logging.INFO, logger="trainer")
    index = convert(str(broken_photos), str(tmp_path), shard_size=5, workers=0)
    assert "(2 done before)" in caplog.text
    assert not (tmp_path / ".tmp-half").exists()  # a stopped worker's partial shard
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


def flat_tree(photos, root, classes=("cat", "coffee", "rocket")):
    """``root/<class>/<image>``: the photo set's train and val images of ``classes`` in one
    folder per class, as a user's own collection would be."""
    for path in sorted(photos.rglob("*.JPEG")):
        split, cls, name = path.relative_to(photos).parts
        if cls in classes:
            (root / cls).mkdir(parents=True, exist_ok=True)
            shutil.copy2(str(path), str(root / cls / (split + "-" + name)))
    return root


def test_a_tree_of_class_folders_alone_is_split_by_val_fraction(photos, tmp_path):
    flat = flat_tree(photos, tmp_path / "flat")
    result = run_make_shards("--source", str(flat), "--dest", str(tmp_path / "shards"),
                             "--val_fraction=0.25", "--workers=0", "--shard_size=50")
    assert result.returncode == 0, result.stderr
    index = ShardIndex.from_json((tmp_path / "shards" / "index.json").read_bytes(), "index")
    assert index.classes == ["cat", "coffee", "rocket"]
    found = shard_contents(storage.open_dir(str(tmp_path / "shards")), index)
    assert len(found["train"]) + len(found["val"]) == 3 * 32
    assert 0.1 < len(found["val"]) / 96 < 0.4  # about a quarter, by the hash
    assert {label for _, label in found["val"]} == {0, 1, 2}
    everything = sorted((path.read_bytes(), ["cat", "coffee", "rocket"].index(path.parent.name))
                        for path in flat.rglob("*.JPEG"))
    assert sorted(found["train"] + found["val"]) == everything


def test_the_split_is_the_same_every_run_and_keeps_each_image_where_it_was(photos, tmp_path):
    flat = flat_tree(photos, tmp_path / "flat")
    _, before = split_class_folders(storage.open_dir(str(flat)), 0.25)
    assert split_class_folders(storage.open_dir(str(flat)), 0.25)[1] == before
    shutil.copy2(str(next(flat.glob("cat/*"))), str(flat / "cat" / "new.JPEG"))
    _, after = split_class_folders(storage.open_dir(str(flat)), 0.25)
    for split in ("train", "val"):
        assert set(before[split]) <= set(after[split])


def test_split_mistakes_are_one_line_errors_naming_the_flags(photos, tmp_path):
    flat = flat_tree(photos, tmp_path / "flat", classes=("cat",))
    dest = str(tmp_path / "out")
    # A tree of class folders without --val_fraction: the hint says what the tool takes.
    plain = run_make_shards("--source", str(flat), "--dest", dest)
    assert plain.returncode == 65 and len(plain.stderr.splitlines()) == 2, plain.stderr
    assert "no images in {}/train/<class>/".format(flat) in plain.stderr
    assert "--val_fraction" in plain.stderr
    assert "--data_dir" not in plain.stderr and "--fake_data" not in plain.stderr
    # train/ and val/ already: nothing to split.
    twice = run_make_shards("--source", str(photos), "--dest", dest, "--val_fraction=0.1")
    assert twice.returncode == 65 and "has train/ and val/ already" in twice.stderr
    # A class too small for the fraction, and a fraction that is no share.
    tiny = tmp_path / "tiny"
    (tiny / "cat").mkdir(parents=True)
    shutil.copy2(str(next(flat.glob("cat/*"))), str(tiny / "cat" / "only.JPEG"))
    small = run_make_shards("--source", str(tiny), "--dest", dest, "--val_fraction=0.5")
    assert small.returncode == 65 and "leaves no" in small.stderr and "cat" in small.stderr
    for value in ("0", "1", "-0.5"):
        bad = run_make_shards("--source", str(flat), "--dest", dest, "--val_fraction=" + value)
        assert bad.returncode == 64 and "--val_fraction" in bad.stderr
    assert not os.path.exists(dest + "/index.json")


def test_workers_mean_what_the_trainers_num_workers_mean(photos, tmp_path):
    """0: no worker process (made in this one, as --num_workers=0); -1 (the default): one per
    core; below -1 refused. The help says so, and names the source's layout."""
    help_text = run_make_shards("--help").stdout
    assert "0 none, the work runs in this process" in " ".join(help_text.split())
    assert "train/<class>/<image> and val/<class>/<image>" in " ".join(help_text.split())
    assert main(["--source", str(photos), "--dest", str(tmp_path), "--workers=-2"]) == 64
    from trainer.data import worker_pool

    started = []
    real = worker_pool._Pool
    worker_pool._Pool = lambda *args: started.append(args) or real(*args)
    try:
        flat = flat_tree(photos, tmp_path / "flat", classes=("cat",))
        convert(str(flat), str(tmp_path / "none"), shard_size=8, workers=0, val_fraction=0.5)
        assert started == []
        convert(str(flat), str(tmp_path / "two"), shard_size=8, workers=2, val_fraction=0.5)
        assert [args[1] for args in started] == [2]
    finally:
        worker_pool._Pool = real


CJK_STEM = "漢字" * 16  # 96 bytes of UTF-8: over ustar's name field once a number is added
LONG_STEM = "n" * 196  # a 200-byte file name


@pytest.fixture(scope="module")
def odd_files(tmp_path_factory):
    """A class-folder tree of one class holding, from real photographs, what phones, scanners
    and the web write, most named as JPEGs: {file name: its bytes} of train/odd/."""
    from PIL import Image

    photos = [photo.resize((320, 240)) for _, photo in sorted(photo_set.source_photos().items())]
    root = tmp_path_factory.mktemp("odd")

    def encoded(image, kind, **options):
        buffer = io.BytesIO()
        image.save(buffer, kind, **options)
        return buffer.getvalue()

    depth = Image.fromarray((numpy.asarray(photos[7].convert("L"), dtype=numpy.uint16) * 257
                             + numpy.arange(240, dtype=numpy.uint16)[:, None]))
    files = {
        "phone.JPG": encoded(photos[0], "MPO", save_all=True, append_images=[photos[1]]),
        "animation.jpg": encoded(photos[1], "GIF", save_all=True, append_images=[photos[2]]),
        "scan.jpg": encoded(photos[2], "JPEG2000"),
        "drawing.jpg": encoded(photos[3], "PNG"),
        "page.tif": encoded(photos[4], "TIFF"),
        "depth.tiff": encoded(depth, "TIFF"),
        "web.webp": encoded(photos[5], "WEBP", quality=80),
        LONG_STEM + ".jpg": encoded(photos[6], "JPEG", quality=90),
        CJK_STEM + ".jpg": encoded(photos[7], "JPEG", quality=90),
    }
    for split, names in (("train", files), ("val", ["drawing.jpg"])):
        (root / "source" / split / "odd").mkdir(parents=True)
        for name in names:
            (root / "source" / split / "odd" / name).write_bytes(files[name])
    return root, files


def decoded(data: bytes):
    from PIL import Image

    return numpy.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=numpy.float64)


def jpeg_error_bound(jpeg: bytes) -> float:
    """The most a JPEG's mean absolute error per RGB value can be, from its own quantization
    tables: rounding a DCT coefficient errs by at most half its step, and the 8x8 DCT is
    orthonormal, so a channel's RMS error is at most the RMS of the half steps (Y and, with
    full-resolution colour, Cb and Cr); R, G and B weigh Cb and Cr by at most 1.772 in all;
    the colour conversions and the integer inverse DCT round by half a level each (Y, Cb and
    Cr when encoding, weighed likewise; RGB when decoding). A mean is at most its RMS."""
    from PIL import Image

    tables = Image.open(io.BytesIO(jpeg)).quantization
    half_step = [numpy.sqrt(numpy.mean((numpy.asarray(tables[i]) / 2) ** 2)) for i in (0, 1)]
    return half_step[0] + 1.772 * half_step[1] + 0.5 * (1 + 1.772) + 0.5 + 0.5


def test_every_image_of_every_format_and_name_is_stored_as_one_the_reader_decodes(odd_files):
    from PIL import Image

    from trainer.data import images, shard_examples

    root, files = odd_files
    # Two processes: a name that broke ustar used to kill the whole pool.
    index = convert(str(root / "source"), str(root / "shards"), shard_size=4, workers=2)
    assert index.skipped == [] and index.examples("train") == len(files)
    stored = {}
    for split in ("train", "val"):
        for name, count in index.shards(split):
            data = (root / "shards" / name).read_bytes()
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                assert all(len(member.name) <= 30 for member in archive)
            for (example, image, label), (_, members) in zip(
                    shard_examples.labelled(data, str(root / "shards" / name), count),
                    read_samples(io.BytesIO(data))):
                source = json.loads(members["json"].decode())
                assert source["path"].startswith(split + "/odd/") and label == 0
                stored[source["path"].split("/")[-1]] = (image, source["format"])
                for tensor in (images.train_image(image, 32, images.draws(0, 0, example)),
                               images.eval_image(image, 32)):
                    assert tensor.shape == (3, 32, 32) and tensor.dtype == torch.uint8
    assert sorted(stored) == sorted(files)
    formats = {name: fmt for name, (_, fmt) in stored.items()}
    assert formats == {"phone.JPG": "MPO", "animation.jpg": "GIF", "scan.jpg": "JPEG2000",
                       "drawing.jpg": "PNG", "page.tif": "TIFF", "depth.tiff": "TIFF",
                       "web.webp": "WEBP", LONG_STEM + ".jpg": "JPEG", CJK_STEM + ".jpg": "JPEG"}
    kinds = {name: Image.open(io.BytesIO(image)).format for name, (image, _) in stored.items()}
    assert set(kinds.values()) == {"JPEG", "PNG"}
    # Byte for byte: plain JPEGs and PNGs. Losslessly: the rest but lossy formats, as the
    # reader would have decoded them (first frames; 16 bits scaled to 8).
    for name in ("drawing.jpg", LONG_STEM + ".jpg", CJK_STEM + ".jpg"):
        assert stored[name][0] == files[name]
    for name in ("phone.JPG", "animation.jpg", "page.tif"):
        assert numpy.array_equal(decoded(stored[name][0]), decoded(files[name])), name
    depth = numpy.asarray(Image.open(io.BytesIO(files["depth.tiff"])), dtype=numpy.float64)
    assert numpy.array_equal(decoded(stored["depth.tiff"][0])[:, :, 0],
                             numpy.round(depth * 255 / 65535))
    for name in ("scan.jpg", "web.webp"):  # JPEG at quality 95
        image = stored[name][0]
        error = numpy.abs(decoded(image) - decoded(files[name])).mean()
        assert kinds[name] == "JPEG" and error <= jpeg_error_bound(image), (name, error)


def run_make_shards(*args):
    return subprocess.run([sys.executable, "-m", "trainer.data.make_shards"] + list(args),
                          capture_output=True, text=True, timeout=300)


def test_a_worker_killed_mid_run_ends_it_at_once_with_70_and_the_same_command_resumes(
        tmp_path):
    from trainer.data.folder_tree import read_tree
    from trainer.data.make_shards import plan_shards

    source, dest = photo_set.build(tmp_path / "source", train=3, val=2), tmp_path / "shards"
    victim = "train/coffee/train_coffee_001.JPEG"
    image = (source / victim).read_bytes()
    (source / victim).unlink()
    os.mkfifo(str(source / victim))  # the worker that reads it blocks there
    _, files = read_tree(storage.open_dir(str(source)))
    shard = [name for name, members in plan_shards(files, 5, 0)
             if victim in [path for path, _ in members]][0]
    args = ["--source", str(source), "--dest", str(dest), "--shard_size=5", "--workers=2"]
    # multiprocessing.Pool waited forever here (TimeoutExpired)
    killed, code, stderr = worker_kills.run_and_kill_the_reader(
        [sys.executable, "-m", "trainer.data.make_shards"] + args, source / victim)
    assert code == 70, stderr
    lines = stderr.splitlines()
    assert lines[0] == ("WorkerDied: worker process {} was killed by SIGKILL while making {}; "
                        "run the same command again to resume: it keeps the shards written and "
                        "makes the rest".format(killed, shard))
    assert len(lines) == 2 and lines[1].startswith("HINT: ") and "--workers" in lines[1]
    assert not (dest / "index.json").exists()
    before = [json.loads(path.read_text())["count"] for path in dest.glob("*-*.json")]

    (source / victim).unlink()
    (source / victim).write_bytes(image)
    resumed = run_make_shards(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert "({} done before)".format(len(before)) in resumed.stdout
    assert [path.name for path in dest.iterdir() if path.name.startswith(".tmp-")] == []
    # The rate and ETA are this run's: its images over its time, not the earlier run's too.
    progress = [line for line in resumed.stdout.splitlines() if " in this run)" in line]
    assert progress[-1].split(": ", 1)[1].startswith(
        "shards 9/9, images 40/40 ({} in this run), ".format(40 - sum(before)))
    index = ShardIndex.from_json((dest / "index.json").read_bytes(), "index.json")
    found = shard_contents(storage.open_dir(str(dest)), index)
    for split in ("train", "val"):
        assert sorted(found[split]) == source_files(source, split)


def test_progress_counts_the_rate_and_eta_of_this_run_only():
    from trainer.data.make_shards import progress_line

    # Resumed with 1,000 of 5,000 images done before; 400 made in this run's 2 s: 200/s, and
    # the 3,600 left take 18 s (counting the earlier 1,000 would claim 700/s and 5 s).
    assert progress_line(7, 25, 1000, 400, 5000, 2.0) == (
        "shards 7/25, images 1400/5000 (400 in this run), 200 images/s, ETA 0m18s")
    assert progress_line(1, 3, 500, 0, 1500, 3.0) == (
        "shards 1/3, images 500/1500 (0 in this run), rate and ETA not known yet")
    assert progress_line(1331, 1331, 0, 1331167, 1331167, 3600.0).endswith(
        "370 images/s, ETA 0m00s")
    assert progress_line(1, 1331, 0, 1000, 1331167, 3.0).endswith("333 images/s, ETA 1h06m")


def warnings(caplog):
    return [record.getMessage() for record in caplog.records
            if record.levelno >= logging.WARNING]


def test_max_shorter_side_stores_every_image_with_its_shorter_side_at_most_n_and_trains(
        broken_photos, tmp_path, caplog, monkeypatch):
    """``--max_shorter_side=N`` (``--max_side``, its old name, too): an image whose shorter
    side is longer than N is scaled to N on that side (the aspect kept), every other one is
    stored as it came; the index records N, and another N is another plan; a run whose
    ``--image_size`` needs more than N warns with the command that fixes it; the shards
    train."""
    from PIL import Image

    from trainer.data.shard_image import scaled_size
    from trainer.data.shard_source import ShardSource

    dest = tmp_path / "small"
    assert main(["--source", str(broken_photos), "--dest", str(dest), "--shard_size=5",
                 "--workers=1", "--max_shorter_side=200"]) == 0
    index = ShardIndex.from_json((dest / "index.json").read_bytes(), "index.json")
    assert index.max_side == 200 and json.loads((dest / "index.json").read_text())[
        "max_side"] == 200
    assert index.examples("train") == 24 and index.examples("val") == 16  # as without
    sizes, scaled = [], 0
    for name, _ in index.shards("train") + index.shards("val"):
        for _, files in read_samples(io.BytesIO((dest / name).read_bytes())):
            kind = "jpg" if "jpg" in files else "png"
            source = (broken_photos / json.loads(files["json"])["path"]).read_bytes()
            with Image.open(io.BytesIO(source)) as original:
                want = original.size
            if min(want) > 200:
                want = scaled_size(want[0], want[1], 200)
                scaled += 1
            else:
                assert files[kind] == source  # kept byte for byte
            with Image.open(io.BytesIO(files[kind])) as image:
                sizes.append(image.size)
                assert image.size == want
    assert scaled >= 30 and max(min(size) for size in sizes) == 200
    # Another --max_side is another plan: refused rather than mixed with these shards.
    assert main(["--source", str(broken_photos), "--dest", str(dest), "--shard_size=5",
                 "--workers=1", "--max_side=300"]) == 65
    assert main(["--source", str(broken_photos), "--dest", str(tmp_path / "x"),
                 "--max_side=-1"]) == 64
    assert main(["--source", str(broken_photos), "--dest", str(tmp_path / "x"),
                 "--max_shorter_side=-1"]) == 64
    monkeypatch.setattr(logging.getLogger("trainer"), "propagate", True)  # main() cleared it
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trainer"):
        source = ShardSource(str(dest), 175, 8, 0, seed=0)  # needs 200 px: no warning
        source.close()
        assert not warnings(caplog)
        ShardSource(str(dest), 176, 8, 0, seed=0).close()  # needs 202 px
    [warning] = set(warnings(caplog))  # once (a handler set up before may capture it twice)
    assert ("stores images with their shorter side at most 200 px (make_shards "
            "--max_shorter_side=200), but --image_size=176 needs 202 px" in warning)
    assert ("HINT: write the shards again with python -m trainer.data.make_shards "
            "--source=SOURCE --dest=NEW_DIR --max_shorter_side=202 (or without it), or run at "
            "--image_size=175 or less" in warning)
    source = ShardSource(str(dest), 64, 8, 0, seed=0)
    assert "16 val examples, stored at most 200 px on the shorter side)" in source.describe()
    # The start-up line names the decoder (trainer.fit logs describe() as "data: ...").
    assert source.describe().endswith(", " + jpeg_decode.described())
    assert (jpeg_decode.described() == "JPEGs decoded by simplejpeg {} (fast IDCT)".format(
        simplejpeg.__version__) or re.fullmatch(r"JPEGs decoded by libjpeg-turbo [23]\.\d+\.\d+, "
                                                 r"the crop's region only \(fast IDCT\)",
                                                 jpeg_decode.described()))
    try:
        [(x, y)] = list(source.train_batches(0))[:1]
        assert x.shape == (8, 3, 64, 64) and x.dtype == torch.uint8 and len(y) == 8
        assert sum(len(y) for _, y in source.eval_batches()) == 16
    finally:
        source.close()
