"""trainer.storage: atomic local writes, and gs:// against fake-gcs-server."""

import os

import pytest

from trainer.errors import StorageError
from trainer.storage import LocalDirectory, open_dir


@pytest.fixture(params=["local", "gcs"])
def directory(request, tmp_path):
    if request.param == "local":
        return open_dir(str(tmp_path / "job"))
    bucket = request.getfixturevalue("gcs")
    return open_dir("gs://{}/jobs/run-1".format(bucket.name))

def test_write_read_list_delete(directory):
    directory.write_bytes("a.txt", b"one")
    directory.write_bytes("sub/b.txt", b"two")
    directory.write_bytes("a.txt", b"three")
    assert directory.read_bytes("a.txt") == b"three"
    assert "a.txt" in directory.list() and directory.list("sub") == ["sub/b.txt"]
    assert directory.exists("sub/b.txt") and not directory.exists("c.txt")
    directory.delete("a.txt")
    directory.delete("a.txt")  # deleting twice is fine
    assert not directory.exists("a.txt")
    with pytest.raises(FileNotFoundError):
        directory.read_bytes("a.txt")

def test_no_overwrite_precondition(directory):
    directory.write_bytes("ckpt", b"first", overwrite=False)
    with pytest.raises(StorageError, match="already exists"):
        directory.write_bytes("ckpt", b"second", overwrite=False)
    assert directory.read_bytes("ckpt") == b"first"

def test_local_write_leaves_no_temporary_and_cleans_stale_ones(tmp_path):
    directory = LocalDirectory(str(tmp_path))
    directory.write_bytes("x", b"data")
    (tmp_path / ".tmp-killed").write_bytes(b"partial")
    assert directory.list() == ["x"]
    directory.remove_stale_temporaries()
    assert sorted(os.listdir(tmp_path)) == ["x"]

def test_gs_uri_without_bucket_is_an_error():
    with pytest.raises(StorageError, match="no bucket"):
        open_dir("gs://")
