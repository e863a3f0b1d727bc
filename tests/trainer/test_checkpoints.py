"""trainer.checkpoints: keep-K, newest valid checkpoint wins, damaged ones are skipped: bytes
that differ from the digest written with them, a state holding nan or inf, a truncated file;
old files without a digest are accepted; when none passes, the run stops (exit 65)."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch
from checkpoint_damage import overwrite_inside_tensor

from conftest import REPO, clean_environ
from trainer.checkpoints import (
    SEAL_BYTES,
    CheckpointStore,
    checkpoint_name,
    mismatch,
    non_finite,
    to_cpu,
)
from trainer.errors import DataError, StorageError
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


def test_the_kept_step_stays_beside_the_newest_k_until_another_is_kept(tmp_path):
    """--keep_best's checkpoint: out of the rotation while it is kept, then rotated as any."""
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=2)
    store.save(10, state(10))
    store.kept = 10
    for step in (20, 30, 40):
        store.save(step, state(step))
    assert store.steps() == [10, 30, 40]
    store.kept = 30
    store.save(50, state(50))
    assert store.steps() == [30, 40, 50]
    store.save(60, state(60))
    assert store.steps() == [30, 50, 60]

def test_truncated_or_corrupt_newest_is_skipped(tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=5)
    for step in (1, 2, 3):
        store.save(step, state(step))
    newest = tmp_path / checkpoint_name(3)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    (tmp_path / checkpoint_name(2)).write_bytes(b"garbage")
    step, loaded = store.load_latest()
    assert step == 1 and loaded["step"] == 1
    assert "skipping damaged checkpoint" in caplog.text and checkpoint_name(3) in caplog.text

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

    def watched(name, produce, overwrite=True, needs=0):
        def produce_and_look(stream):
            produce(stream)
            stream.flush()
            where = os.readlink("/proc/self/fd/{}".format(stream.fileno()))
            staged.append((where, os.fstat(stream.fileno()).st_size, os.listdir(str(scratch))))
        return original(name, produce_and_look, overwrite, needs)

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


def big_state(step):
    return {"step": step, "model": {"w": torch.full((4096,), float(step)),
                                     "b": torch.zeros(3)}}


def test_bytes_that_differ_from_their_digest_are_skipped_and_the_one_before_used(
        tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=5)
    for step in (1, 2):
        store.save(step, big_state(step))
    newest = tmp_path / checkpoint_name(2)
    # 0xFF bytes in a float32 tensor are nan; the digest refuses them before anything loads.
    overwrite_inside_tensor(newest, size=1024)
    step, loaded = store.load_latest()
    assert step == 1 and torch.equal(loaded["model"]["w"], torch.full((4096,), 1.0))
    [line] = [record.getMessage() for record in caplog.records]
    assert line == ("skipping damaged checkpoint {}: its bytes differ from the SHA-256 "
                    "recorded when it was written".format(newest))


def test_the_file_is_torch_saves_archive_then_the_digest_trailer(tmp_path):
    import hashlib

    store = CheckpointStore(LocalDirectory(str(tmp_path)))
    store.save(3, big_state(3))
    data = (tmp_path / checkpoint_name(3)).read_bytes()
    archive, trailer = data[:-SEAL_BYTES], data[-SEAL_BYTES:]
    assert trailer == b"\ntrainer-checkpoint-sha256:" + hashlib.sha256(
        archive).hexdigest().encode()
    assert zipfile.is_zipfile(str(tmp_path / checkpoint_name(3)))
    # torch.load reads the file as it is: a user's own tools need no unwrapping.
    assert torch.load(str(tmp_path / checkpoint_name(3)), weights_only=False)["step"] == 3


def test_a_checkpoint_without_a_digest_is_accepted_with_one_line_but_checked_finite(
        tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=5)
    torch.save(big_state(1), str(tmp_path / checkpoint_name(1)))  # as earlier versions did
    nan = big_state(2)
    nan["model"]["b"][1] = float("nan")
    torch.save(nan, str(tmp_path / checkpoint_name(2)))
    step, loaded = store.load_latest()
    assert step == 1 and loaded["step"] == 1
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "checkpoint {} has no digest (written by an earlier version): its bytes cannot be "
        "verified, only its values checked finite".format(tmp_path / checkpoint_name(2)),
        "skipping damaged checkpoint {}: model.b holds nan or inf".format(
            tmp_path / checkpoint_name(2)),
        "checkpoint {} has no digest (written by an earlier version): its bytes cannot be "
        "verified, only its values checked finite".format(tmp_path / checkpoint_name(1))]


def test_a_state_with_nan_or_inf_is_skipped_even_with_its_digest(tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=5)
    store.save(1, big_state(1))
    inf = big_state(2)
    inf["optimizer"] = {"state": {0: {"momentum_buffer": torch.tensor([1.0, float("inf")])}}}
    store.save(2, inf)
    assert store.load_latest()[0] == 1
    assert "{}: optimizer.state.0.momentum_buffer holds nan or inf".format(
        checkpoint_name(2)) in caplog.text


def test_non_finite_names_the_first_floating_tensor_with_nan_or_inf():
    assert non_finite({"a": torch.ones(2), "n": torch.tensor([1, 2])}) is None
    assert non_finite({"a": [torch.ones(2), torch.tensor([float("-inf")])]}) == "a.1"
    # Large finite float32 values do not overflow the float64 sum.
    assert non_finite({"big": torch.full((1000,), 3.0e38)}) is None


def test_when_every_checkpoint_is_refused_the_run_stops_naming_them(tmp_path, caplog):
    store = CheckpointStore(LocalDirectory(str(tmp_path)), keep=5)
    for step in (1, 2):
        store.save(step, big_state(step))
    overwrite_inside_tensor(tmp_path / checkpoint_name(2), size=1024)
    path = tmp_path / checkpoint_name(1)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DataError) as raised:
        store.load_latest()
    error = raised.value
    assert error.exit_code == 65 and "\n" not in error.message
    assert error.message == (
        "every checkpoint in {} is damaged, so the run stops instead of starting again at "
        "step 0: {} (its bytes differ from the SHA-256 recorded when it was written); {} (it "
        "ends in neither a digest nor a whole archive (truncated, or no checkpoint))".format(
            tmp_path, checkpoint_name(2), checkpoint_name(1)))
    assert error.hint.startswith("restore good copies of them, or move them away")
    assert store.steps() == [1, 2]  # nothing deleted


def test_a_damaged_gcs_checkpoint_is_skipped(gcs, scratch, caplog):
    from trainer.storage import open_dir

    store = CheckpointStore(open_dir("gs://{}/job/checkpoints".format(gcs.name)), keep=3)
    for step in (1, 2):
        store.save(step, big_state(step))
    blob = gcs.blob("job/checkpoints/" + checkpoint_name(2))
    data = bytearray(blob.download_as_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = b"\xff" * 16
    blob.upload_from_string(bytes(data))
    step, loaded = store.load_latest()
    assert step == 1 and loaded["step"] == 1
    assert "skipping damaged checkpoint gs://{}/job/checkpoints/{}: its bytes differ".format(
        gcs.name, checkpoint_name(2)) in caplog.text


FULL_DISK = """
import sys, torch
from trainer.checkpoints import CheckpointStore
from trainer.errors import StorageError
from trainer.storage import LocalDirectory
store = CheckpointStore(LocalDirectory(sys.argv[1]))
try:
    store.save(7, {"step": 7, "model": {"w": torch.zeros(1000000)}})
except StorageError as error:
    print(error.message)
    print(error.hint)
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_a_full_disk_inside_torch_save_says_what_was_free_and_what_it_needs(tmp_path):
    # A 1 MB tmpfs (in a user and mount namespace) for a 4 MB checkpoint: torch's writer saw
    # the short write and raised "[enforce fail at inline_container.cc:664] . unexpected pos".
    small = tmp_path / "small"
    small.mkdir()
    command = "mount -t tmpfs -o size=1m tmpfs {0} && exec {1} -c '{2}' {0}".format(
        small, sys.executable, FULL_DISK)
    result = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                             command], cwd=str(REPO), capture_output=True, text=True,
                            timeout=120, env=clean_environ(PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr
    message, hint = result.stdout.strip().splitlines()
    assert message == ("cannot write {0}/{1}: no space left on device (1.0 MB free in {0}; "
                       "it needs about 4.0 MB)".format(small, checkpoint_name(7)))
    assert hint == "check free space and permissions of the job dir"
