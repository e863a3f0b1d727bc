"""data/make_imagenet_sample.py, the tree `make run-imagenet` trains on: ImageNet's class-folder
layout as the trainer reads it (the same classes in train/ and val/), the same bytes for the
same seed, and four classes that differ."""

import hashlib
import subprocess
import sys

from conftest import REPO
from trainer import storage
from trainer.data.folder_tree import read_tree


def digest(root):
    files = sorted(path for path in root.rglob("*") if path.is_file())
    return hashlib.sha256(b"".join(p.relative_to(root).as_posix().encode() + p.read_bytes()
                                   for p in files)).hexdigest()


def make(dest, *args):
    return subprocess.run([sys.executable, str(REPO / "data" / "make_imagenet_sample.py"),
                           str(dest)] + list(args), capture_output=True, text=True, check=True)


def test_the_sample_is_a_class_folder_tree_the_trainer_reads(tmp_path):
    result = make(tmp_path / "a", "--train=3", "--val=2", "--size=48")
    assert result.stdout.strip() == "20 images of 4 classes in {0}/train and {0}/val".format(
        tmp_path / "a")
    classes, splits = read_tree(storage.open_dir(str(tmp_path / "a")))
    assert classes == ["checker", "disc", "stripes_h", "stripes_v"]
    assert [len(splits["train"]), len(splits["val"])] == [12, 8]
    assert sorted({label for _, label in splits["val"]}) == [0, 1, 2, 3]
    make(tmp_path / "b", "--train=3", "--val=2", "--size=48")
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    make(tmp_path / "c", "--train=3", "--val=2", "--size=48", "--seed=1")
    assert digest(tmp_path / "a") != digest(tmp_path / "c")
