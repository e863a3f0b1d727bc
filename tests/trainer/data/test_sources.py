"""trainer.data.sources: a shard set by its index, a class-folder tree otherwise, and shard
files without an index are an interrupted make_shards, said so."""

import shutil

import pytest

from conftest import make_image_folder
from trainer.data.folder_source import FolderSource
from trainer.data.shard_source import ShardSource
from trainer.data.sources import open_source
from trainer.errors import DataError


def test_shards_by_their_index_else_class_folders(photo_shards, tmp_path):
    assert isinstance(open_source(str(photo_shards), 32, 8, 0, 1), ShardSource)
    folders = make_image_folder(tmp_path / "folders")
    assert isinstance(open_source(str(folders), 32, 4, 0, 1), FolderSource)


def test_shards_without_their_index_are_an_interrupted_conversion(photo_shards, tmp_path):
    interrupted = tmp_path / "interrupted"
    shutil.copytree(str(photo_shards), str(interrupted))
    (interrupted / "index.json").unlink()
    with pytest.raises(DataError) as raised:
        open_source(str(interrupted), 32, 8, 0, 1)
    assert raised.value.message == (
        "{} holds 11 shard files (train-000000.tar, ...) but no index.json: an interrupted "
        "make_shards (or copy)?".format(interrupted))
    assert raised.value.hint.startswith("run it again: python -m trainer.data.make_shards")
    # Without shard files it is what the class-folder reader says.
    with pytest.raises(DataError, match="no images in .*/train/<class>/"):
        open_source(str(tmp_path / "empty"), 32, 8, 0, 1)
