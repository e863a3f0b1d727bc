"""trainer.storage: atomic local writes, and gs:// against fake-gcs-server."""

import os
import subprocess
import sys

import pytest

from conftest import REPO, clean_environ
from trainer import storage
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

def test_a_range_is_those_bytes_or_fewer_where_the_file_ends(directory):
    directory.write_bytes("shard.tar", b"0123456789")
    assert directory.read_range("shard.tar", 2, 3) == b"234"
    assert directory.read_range("shard.tar", 8, 5) == b"89"
    assert directory.read_range("shard.tar", 12, 5) == b""
    assert directory.read_range("shard.tar", 4, 0) == b""
    with pytest.raises(FileNotFoundError):
        directory.read_range("missing.tar", 0, 1)

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

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_local_output_has_the_mode_the_umask_gives(tmp_path, umask, mode):
    """Written through mkstemp and a rename, outputs were 0600 whatever the umask: a host user
    could not read what a container running as root wrote into a mounted folder."""
    old = os.umask(umask)
    try:
        assert storage.process_umask() == umask
        directory = LocalDirectory(str(tmp_path / "job"))
        directory.write_bytes("model.pt", b"weights")
        directory.write_file("sub/summary.json", lambda stream: stream.write(b"{}"))
    finally:
        os.umask(old)
    for name in ("model.pt", "sub/summary.json"):
        assert os.stat(str(tmp_path / "job" / name)).st_mode & 0o777 == mode, name


def test_gs_uri_without_bucket_is_an_error():
    with pytest.raises(StorageError, match="no bucket"):
        open_dir("gs://")


def _client_shared_after_fork(directory, answer) -> None:
    inherited = directory._bucket
    answer.put(directory.bucket is inherited)


def test_a_forked_data_worker_gets_a_client_of_its_own(gcs):
    # Sharing the parent's pooled connections made two workers read each other's bytes
    # (google-cloud-storage's DataCorruption, seen in a full test session).
    import multiprocessing

    directory = open_dir("gs://{}/x".format(gcs.name))
    directory.write_bytes("a", b"1")
    context = multiprocessing.get_context("fork")  # how DataLoader starts workers on Linux
    answer = context.Queue()
    child = context.Process(target=_client_shared_after_fork, args=(directory, answer))
    child.start()
    child.join(60)
    assert answer.get(timeout=10) is False
    assert directory.read_bytes("a") == b"1"  # the parent's own client still works


def test_walk_lists_every_file_under_a_folder(directory):
    directory.write_bytes("t/a/1.JPEG", b"1")
    directory.write_bytes("t/b/2.JPEG", b"2")
    directory.write_bytes("u/3", b"3")
    assert directory.walk("t") == ["t/a/1.JPEG", "t/b/2.JPEG"]
    assert directory.walk("missing") == []


def _leftovers(directory, scratch):
    """Files a write may have left behind: temporaries in a local directory, and anything in
    tempfile's folder (where a GCS write stages its file)."""
    local = getattr(directory, "path", None)
    hidden = [name for name in os.listdir(local) if name.startswith(".tmp-")] if local else []
    return hidden + os.listdir(str(scratch))


def test_write_file_lands_what_produce_wrote_and_leaves_nothing_behind(directory, scratch):
    directory.write_file("checkpoints/ckpt", lambda stream: stream.write(b"x" * 100000))
    assert directory.read_bytes("checkpoints/ckpt") == b"x" * 100000
    assert _leftovers(directory, scratch) == []


def test_write_file_failing_keeps_the_previous_content(directory, scratch):
    directory.write_bytes("ckpt", b"previous")

    def disk_full(stream):
        stream.write(b"half")
        raise OSError(28, "No space left on device")

    # What was free where it was staged (the job dir's folder, or $TMPDIR for gs://).
    with pytest.raises(StorageError, match=r"cannot write .*ckpt: no space left on device "
                                           r"\(\d+\.\d MB free in /\S+\)$"):
        directory.write_file("ckpt", disk_full)

    def interrupted(stream):
        stream.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # not an OSError: passed on as it is
        directory.write_file("ckpt", interrupted)
    assert directory.read_bytes("ckpt") == b"previous"
    assert _leftovers(directory, scratch) == []


def test_write_file_without_overwrite_keeps_the_existing_object(directory, scratch):
    directory.write_bytes("model.pt", b"first")
    with pytest.raises(StorageError, match="already exists|HTTP 412"):
        directory.write_file("model.pt", lambda stream: None, overwrite=False)
    assert directory.read_bytes("model.pt") == b"first"


def test_writing_into_a_missing_bucket_is_one_storage_error_naming_it(gcs, scratch,
                                                                      monkeypatch):
    # A 404 on an upload was a bare FileNotFoundError: a traceback from ``save_model``. A
    # refusal: exit 77, retried only in the process's first second here.
    monkeypatch.setattr(storage, "REFUSAL_RETRY_S", 1.0)
    directory = open_dir("gs://no-such-bucket-{}/job".format(gcs.name))
    for write in (lambda: directory.write_bytes("metrics.jsonl", b"{}"),
                  lambda: directory.write_file("model.pt", lambda stream: None)):
        with pytest.raises(StorageError, match=r"bucket gs://no-such-bucket-\S+ does not exist") \
                as raised:
            write()
        assert raised.value.exit_code == 77
    assert list(scratch.iterdir()) == []


def test_a_staged_file_that_cannot_be_read_back_is_named_as_the_local_disks_fault(gcs, tmp_path):
    # The staged copy's descriptor is swapped for a write-only one once written: reading it
    # back for the upload fails as a failing disk would (EBADF standing in for EIO). That is
    # no network failure to retry for minutes, and the line must say where to look.
    directory = open_dir("gs://{}/job".format(gcs.name))
    unreadable = os.open(str(tmp_path / "write-only"), os.O_WRONLY | os.O_CREAT)
    os.write(unreadable, b"x" * 100_000)  # the same size: only reading it fails

    def produce(stream):
        stream.write(b"x" * 100_000)  # past the buffer: the upload reads the descriptor
        stream.flush()
        os.dup2(unreadable, stream.fileno())

    with pytest.raises(StorageError) as raised:
        directory.write_file("checkpoint.pt", produce)
    os.close(unreadable)
    assert raised.value.message.startswith(
        "reading the staged copy of gs://{}/job/checkpoint.pt in $TMPDIR failed: ".format(
            gcs.name))
    assert "$TMPDIR" in raised.value.hint and "GCS" not in raised.value.message
    assert not list(gcs.list_blobs(prefix="job/"))


# In a fresh process (google-auth reads GCE_METADATA_HOST on import), more than
# REFUSAL_RETRY_S into the run: a GCS call whose token comes from the metadata server.
_TOKEN_CALL = """
import os, sys, time
from google.auth import compute_engine
from google.auth.transport.requests import Request
from trainer import storage
from trainer.errors import StorageError
storage.RETRY_DEADLINE_S = 20.0  # one retry after google-auth's 15 s of tries
storage._first_request[os.getpid()] = time.monotonic() - 1000
credentials = compute_engine.Credentials()
try:
    storage.open_dir("gs://b/job")._call(lambda policy: credentials.refresh(Request()), "x")
    print("token", credentials.token)
except StorageError as error:
    print("exit", error.exit_code, error)
"""


@pytest.mark.parametrize("status, failures, outcome", [
    # Past google-auth's own 5 tries: a RefreshError raised from a TransportError.
    (500, 5, "token fake-access-token"),
    (503, 99, "exit 74"),  # unavailable for good: an outage, never 77
    (403, 1, "exit 77"),  # the service account refused: final
    (404, 1, "exit 77"),
])
def test_a_metadata_server_outage_is_retried_and_its_refusal_is_final(
        metadata_server, status, failures, outcome):
    # Compute Engine / Workload Identity credentials re-raise the metadata server's 5xx as a
    # RefreshError: that counted as a refusal (exit 77, which ends a JobSet for good).
    metadata_server.fail(status, failures)
    try:
        result = subprocess.run(
            [sys.executable, "-c", _TOKEN_CALL], cwd=str(REPO), capture_output=True, text=True,
            env=clean_environ(GCE_METADATA_HOST=metadata_server.host,
                              GCE_METADATA_IP=metadata_server.host), timeout=240)
    finally:
        metadata_server.fail(500, 0)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(outcome), result.stdout


def test_credentials_errors_google_auth_marks_are_classified_by_its_marks():
    # Where google-auth knows (a token endpoint's 5xx, say) it sets ``retryable``; no
    # credentials configured at all is final however it is wrapped.
    from google.auth import exceptions

    def raised(error, cause=None):
        try:
            raise error from cause
        except exceptions.GoogleAuthError as caught:
            return caught

    assert storage._credentials_outage(raised(
        exceptions.RefreshError("internal_failure", retryable=True))) is True
    assert storage._credentials_outage(raised(
        exceptions.RefreshError("invalid_grant"))) is False
    assert storage._credentials_outage(raised(
        exceptions.RefreshError("no token"), exceptions.DefaultCredentialsError("none"))) \
        is False
    assert storage._credentials_outage(ConnectionResetError("reset")) is None
