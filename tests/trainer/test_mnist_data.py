"""trainer.mnist_data: IDX parsing from local folders and gs://, with clear errors; the
real-digit sample `make run` trains on."""

import gzip
import shutil
import subprocess
import sys

import numpy as np
import pytest
from mnist_files import write_idx

from conftest import MNIST_SUBSET, REPO, copy_mnist_to_bucket, needs_mnist
from trainer.errors import DataError
from trainer.mnist_data import load_splits, random_shift, read_idx


def test_reads_plain_and_gzipped_files(tmp_path):
    images = np.arange(2 * 28 * 28).reshape(2, 28, 28) % 256
    write_idx(tmp_path / "train-images-idx3-ubyte", images, 2051)
    labels_raw = tmp_path / "raw-labels"
    write_idx(labels_raw, np.array([3, 7]), 2049)
    with gzip.open(tmp_path / "train-labels-idx1-ubyte.gz", "wb") as handle:
        handle.write(labels_raw.read_bytes())
    [(x, y)] = load_splits(str(tmp_path), ["train"])
    assert x.shape == (2, 1, 28, 28) and y.tolist() == [3, 7]

@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:-10], "truncated"),
    (lambda data: b"\x00\x00\x08\x09" + data[4:], "not an IDX file"),
])
def test_damaged_files_are_named(tmp_path, damage, message):
    path = tmp_path / "t10k-labels-idx1-ubyte"
    write_idx(path, np.zeros(100), 2049)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DataError, match=message) as caught:
        read_idx(str(path), 2049)
    assert "t10k-labels-idx1-ubyte" in caught.value.message

def test_missing_file_names_it_and_the_folder(tmp_path):
    with pytest.raises(DataError, match="train-images-idx3-ubyte .* not found in"):
        load_splits(str(tmp_path), ["train"])

def test_corrupt_gzip_is_a_data_error(tmp_path):
    (tmp_path / "x.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(DataError, match="cannot read x.gz"):
        read_idx(str(tmp_path / "x.gz"), 2049)

@needs_mnist
def test_reads_from_gcs_once_into_the_cache(gcs, tmp_path):
    uri = copy_mnist_to_bucket(gcs)
    cache = tmp_path / "cache"
    [(x, y)] = load_splits(uri, ["test"], cache_dir=str(cache))
    assert x.shape == (2000, 1, 28, 28) and set(y.tolist()) == set(range(10))
    cached = sorted(p.name for p in cache.rglob("*.gz"))
    assert cached == ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    stamps = {p: p.stat().st_mtime_ns for p in cache.rglob("*.gz")}
    assert load_splits(uri, ["test"], cache_dir=str(cache))[0][1].shape == (2000,)
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*.gz")} == stamps  # not downloaded

@needs_mnist
def test_real_subset_shapes(tmp_path):
    shutil.copytree(str(MNIST_SUBSET), str(tmp_path / "m"))
    [(x, y)] = load_splits(str(tmp_path / "m"), ["train"])
    assert x.shape == (8000, 1, 28, 28) and abs(float(x.mean())) < 0.1

def test_random_shift_keeps_shape_and_moves_pixels():
    import torch

    batch = torch.zeros(4, 1, 28, 28)
    batch[:, :, 14, 14] = 1.0
    shifted = random_shift(batch, torch.Generator().manual_seed(0))
    assert shifted.shape == batch.shape
    assert (shifted.flatten(1).argmax(1) != batch.flatten(1).argmax(1)).any()

SAMPLE = REPO / "data" / "mnist-sample"


def test_the_shipped_sample_is_real_digits_of_every_class():
    (train_x, train_y), (test_x, test_y) = load_splits(str(SAMPLE))
    assert (len(train_x), len(test_x)) == (2000, 500)
    assert set(train_y.tolist()) == set(test_y.tolist()) == set(range(10))
    assert train_x.std() > 0.5  # pixels, not a constant fake batch

@needs_mnist
def test_the_shipped_sample_is_cut_reproducibly_from_the_subset(tmp_path):
    subprocess.run([sys.executable, str(REPO / "data" / "cut_mnist_sample.py"),
                    str(MNIST_SUBSET), str(tmp_path)], check=True)
    for shipped in SAMPLE.glob("*.gz"):
        assert (tmp_path / shipped.name).read_bytes() == shipped.read_bytes(), shipped.name
