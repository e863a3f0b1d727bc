"""trainer.data.tokens.shards' readers: a split's shards as memory maps of local files (a gs://
shard downloaded first), the same tokens read_split reads whole; a changed or missing shard is
one line naming it; the open-files limit raised for the maps. Streamed from gs:// (each window
a ranged read): the same windows, nothing downloaded; a shard missing or cut short, found at
the start or at its read, one line naming it."""

import subprocess
import sys

import numpy
import pytest

from conftest import REPO, upload_folder
from trainer import storage
from trainer.data.make_token_shards import main as make_token_shards
from trainer.data.tokens.shards import SPARE_FILES, map_split, read_index, read_split
from trainer.errors import DataError


@pytest.fixture
def shards(tmp_path):
    for number in range(3):
        (tmp_path / "text" / "{}.txt".format(number)).parent.mkdir(exist_ok=True)
        (tmp_path / "text" / "{}.txt".format(number)).write_text("document {} ".format(
            number) * 50)
    assert make_token_shards(["--source", str(tmp_path / "text"),
                              "--dest", str(tmp_path / "shards")]) == 0
    return tmp_path / "shards"


def test_a_split_is_mapped_not_read_and_holds_what_read_split_reads(shards, tmp_path):
    folder = storage.open_dir(str(shards))
    index = read_index(folder)
    mapped = map_split(folder, index, "train", str(tmp_path / "cache"))
    assert len(mapped) == 3 and all(isinstance(part, numpy.memmap) for part in mapped)
    assert numpy.concatenate(mapped).tolist() == read_split(folder, index, "train").tolist()
    assert not (tmp_path / "cache").exists()  # local shards are mapped where they are


def test_a_gcs_split_is_downloaded_then_mapped(shards, tmp_path, gcs):
    uri = upload_folder(shards, gcs, "tokens")
    folder = storage.open_dir(uri)
    mapped = map_split(folder, read_index(folder), "train", str(tmp_path / "cache"))
    local = storage.open_dir(str(shards))
    assert numpy.concatenate(mapped).tolist() == read_split(local, read_index(local),
                                                            "train").tolist()
    assert len(list((tmp_path / "cache").rglob("*.bin"))) == 3


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_a_changed_or_missing_shard_is_one_line_naming_it(shards, tmp_path, damage):
    shard = shards / "train-000001.bin"
    if damage == "changed":
        data = bytearray(shard.read_bytes())
        data[3] ^= 1
        shard.write_bytes(bytes(data))
    else:
        shard.unlink()
    folder = storage.open_dir(str(shards))
    with pytest.raises(DataError) as raised:
        map_split(folder, read_index(folder), "train", str(tmp_path / "cache"))
    assert raised.value.message == "token shard {} {}".format(shard, {
        "changed": "does not match its digest in index.json", "missing": "is missing"}[damage])
    assert raised.value.exit_code == 65


def test_the_open_files_limit_is_raised_for_the_maps_and_a_hard_one_too_low_is_one_line(
        shards):
    """Each map keeps its shard's file open: the soft limit is raised to hold them (a child
    process, so this one's limits stay); where the hard limit cannot, one line."""
    code = ("import resource, sys; from trainer import storage; "
            "from trainer.data.tokens.shards import map_split, read_index; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            "folder = storage.open_dir(sys.argv[1]); "
            "map_split(folder, read_index(folder), 'train', '/nonexistent'); "
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    raised = subprocess.run([sys.executable, "-c", code.format(soft=100, hard=4096),
                             str(shards)], cwd=str(REPO), capture_output=True, text=True)
    assert raised.returncode == 0, raised.stderr
    assert int(raised.stdout) == 3 + SPARE_FILES
    refused = subprocess.run([sys.executable, "-c", code.format(soft=100, hard=200),
                              str(shards)], cwd=str(REPO), capture_output=True, text=True)
    assert "lists 3 shards, each mapped with its file open, over this process's limit of 200 " \
           "open files" in refused.stderr


def test_a_streamed_gcs_split_reads_each_window_where_it_is_and_downloads_nothing(
        shards, tmp_path, gcs):
    """stream_split: the windows of the gs:// split equal the mapped local ones, window by
    window across the shards' cuts, and no shard is downloaded."""
    from trainer.data.tokens.shards import StreamedShard, stream_split
    from trainer.data.tokens.windows import TokenWindows

    folder = storage.open_dir(upload_folder(shards, gcs, "tokens"))
    folder.fetch = lambda *args: pytest.fail("a streamed shard was downloaded")
    streamed = stream_split(folder, read_index(folder), "train", folder.sizes())
    assert len(streamed) == 3 and all(isinstance(part, StreamedShard) for part in streamed)
    local = storage.open_dir(str(shards))
    mapped = map_split(local, read_index(local), "train", str(tmp_path / "cache"))
    expected, found = TokenWindows(mapped, 37, "mapped"), TokenWindows(streamed, 37, "streamed")
    assert len(found) == len(expected)
    for index in range(len(expected)):
        assert all(want.tolist() == got.tolist()
                   for want, got in zip(expected[index], found[index]))
    # A batch's windows read side by side (``__getitems__``), in the order asked for.
    indices = list(reversed(range(len(expected))))
    assert [[part.tolist() for part in pair] for pair in found.__getitems__(indices)] == [
        [part.tolist() for part in expected[index]] for index in indices]


@pytest.mark.parametrize("damage", ["cut short", "missing", "cut after the check"])
def test_a_streamed_shard_cut_short_or_missing_is_one_line_naming_it(shards, gcs, damage):
    from trainer.data.tokens.shards import stream_split

    folder = storage.open_dir(upload_folder(shards, gcs, "tokens"))
    name = "train-000001.bin"
    blob = gcs.blob("tokens/" + name)
    data = blob.download_as_bytes()
    if damage == "missing":
        blob.delete()
    elif damage == "cut short":
        blob.upload_from_string(data[:-2])
    with pytest.raises(DataError) as raised:
        parts = stream_split(folder, read_index(folder), "train", folder.sizes())
        blob.upload_from_string(data[:10])  # "cut after the check": found at its read
        parts[1][0:len(parts[1])]
    where = "gs://{}/tokens/{}".format(gcs.name, name)
    assert raised.value.message == {
        "missing": "token shard {} is missing".format(where),
        "cut short": "token shard {} holds {} bytes, its record in index.json {} ({} tokens)"
                     .format(where, len(data) - 2, len(data), len(data) // 2),
        "cut after the check": "token shard {} ended at byte 10, where its record says {} "
                               "tokens of 2 bytes".format(where, len(data) // 2)}[damage]
    assert raised.value.exit_code == 65
