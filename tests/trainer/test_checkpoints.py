"""trainer.checkpoints: keep-K, newest valid checkpoint wins, damaged ones are skipped."""

import os

import pytest
import torch

from trainer.checkpoints import CheckpointStore, checkpoint_name, mismatch, to_cpu
from trainer.storage import LocalDirectory


def state(step):
    return {"step": step, "model": {"w": torch.full((3,), float(step))}}

def test_keeps_the_newest_k(tmp_path):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=2)
    for step in (10, 20, 30):
        store.save(step, state(step))
    assert store.steps() == [20, 30]
    step, loaded = store.load_latest()
    assert step == 30 and torch.equal(loaded["model"]["w"], torch.full((3,), 30.0))

def test_truncated_or_corrupt_newest_is_skipped(tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=5)
    for step in (1, 2, 3):
        store.save(step, state(step))
    newest = tmp_path / checkpoint_name(3)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    (tmp_path / checkpoint_name(2)).write_bytes(b"garbage")
    step, loaded = store.load_latest()
    assert step == 1 and loaded["step"] == 1
    assert "skipping unreadable checkpoint" in caplog.text and checkpoint_name(3) in caplog.text

def test_empty_store_has_nothing(tmp_path):
    assert CheckpointStore(LocalDirectory(str(tmp_path))).load_latest() is None

def test_to_cpu_copies_nested_state():
    nested = {"a": [torch.ones(2), (torch.zeros(1), 3)], "b": "x"}
    assert to_cpu(nested)["a"][1][1] == 3 and to_cpu(nested)["b"] == "x"
    assert to_cpu(nested)["a"][0].data_ptr() != nested["a"][0].data_ptr()  # a copy


def test_to_cpu_hands_every_tensor_to_one_fetch_and_puts_the_copies_back_in_place():
    nested = {"a": [torch.ones(2), (torch.zeros(1), 3)], "b": {"c": torch.full((1,), 5.0)}}
    calls = []

    def fetch(tensors):
        calls.append(tensors)
        return [tensor + 10 for tensor in tensors]

    copied = to_cpu(nested, fetch)
    assert len(calls) == 1 and [t.tolist() for t in calls[0]] == [[1.0, 1.0], [0.0], [5.0]]
    assert copied["a"][0].tolist() == [11.0, 11.0] and copied["a"][1][0].tolist() == [10.0]
    assert copied["a"][1][1] == 3 and copied["b"]["c"].tolist() == [15.0]
    assert isinstance(copied["a"], list) and isinstance(copied["a"][1], tuple)

def test_mismatch_names_the_first_differing_parameter():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    assert mismatch(model, {"model": to_cpu(model.state_dict())}) is None
    assert mismatch(model, {"model": torch.nn.Linear(4, 3).state_dict()}) == (
        "2 parameters missing (e.g. 0.bias), 2 unexpected (e.g. bias)")
    assert mismatch(model, {"model": torch.nn.Sequential(torch.nn.Linear(4, 5)).state_dict()}
                    ) == "0.weight has shape (5, 4), this model needs (3, 4)"
    assert mismatch(model, {"step": 3}) == "it holds no model state"


def test_saving_an_earlier_step_never_deletes_a_later_checkpoint(tmp_path):
    # A run that restarted at step 0 (its restore failed) saved ckpt-100 and rotated by step
    # number: the job's ckpt-1000/2000/3000 stayed, its own new checkpoint was deleted.
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=3)
    for step in (1000, 2000, 3000):
        store.save(step, state(step))
    for step in (100, 200, 300, 400):
        store.save(step, state(step))
    assert store.steps() == [200, 300, 400, 1000, 2000, 3000]


def test_a_checkpoint_that_cannot_be_read_is_a_storage_error_not_corrupt(tmp_path):
    import pytest

    from trainer.errors import StorageError

    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=3)
    store.save(5, state(5))
    # An I/O error that is no "file not found" (root reads files without permissions, so a
    # folder where the newest file should be stands in for EACCES or EIO).
    (tmp_path / checkpoint_name(9)).mkdir()
    with pytest.raises(StorageError, match="cannot read .*ckpt-000000009.pt"):
        store.load_latest()


def test_a_gcs_checkpoint_is_staged_unnamed_in_tempfiles_folder(gcs, scratch):
    from trainer.storage import open_dir

    store = CheckpointStore(open_dir("gs://{}/job/checkpoints".format(gcs.name)), keep=2)
    # 20 MB: past google-cloud-storage's 8 MB, a resumable upload as a real checkpoint's is,
    # sent in 2 chunks (storage.UPLOAD_CHUNK_BYTES). Staged where tempfile stages, but with no
    # name there even while it is written, so a kill -9 cannot leave it behind.
    big = {"step": 5, "model": {"w": torch.arange(5_000_000, dtype=torch.float32)}}
    staged = []
    original = store.directory.write_file

    def watched(name, produce, overwrite=True):
        def produce_and_look(stream):
            produce(stream)
            stream.flush()
            where = os.readlink("/proc/self/fd/{}".format(stream.fileno()))
            staged.append((where, os.fstat(stream.fileno()).st_size, os.listdir(str(scratch))))
        return original(name, produce_and_look, overwrite)

    store.directory.write_file = watched
    store.save(5, big)
    [(where, size, names)] = staged
    assert where.startswith(str(scratch) + "/") and where.endswith(" (deleted)"), where
    assert size > 20_000_000 and names == []
    assert list(scratch.iterdir()) == []
    step, loaded = store.load_latest()
    assert step == 5 and torch.equal(loaded["model"]["w"], big["model"]["w"])


def test_a_full_disk_while_saving_is_an_oserror_not_a_torch_error():
    # What ``Directory.write_file`` turns into one line (exit 74); torch's writer must not
    # replace it with its own error as it closes the archive.
    with pytest.raises(OSError, match="No space left"):
        with open("/dev/full", "wb") as stream:
            torch.save(state(1), stream)
