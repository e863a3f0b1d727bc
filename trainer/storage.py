"""A directory that is local or on Google Cloud Storage (``gs://bucket/prefix``), with the
operations the job dir needs. Writes are atomic: a reader sees the old object or the new one,
never part of one.

- Local: write to a hidden temporary file in the same directory, fsync, ``rename`` over the
  name, fsync the directory.
- GCS: an object becomes visible only when its upload completes, so a killed upload leaves
  nothing behind; ``write_bytes(..., overwrite=False)`` adds the precondition
  ``if_generation_match=0`` so an existing checkpoint is never replaced. A large file
  (``write_file``) is staged in an unnamed temporary file, which the system reclaims however
  the process ends.

google-cloud-storage honours ``STORAGE_EMULATOR_HOST`` (the tests use fake-gcs-server).

Two kinds of GCS failure end a run differently. An outage (429, 5xx, timeouts, dropped
connections; also a metadata server out of reach or answering 5xx/429 for a token) is retried
for ``RETRY_DEADLINE_S`` and then exits 74, which a JobSet retries. A refusal (401/403, a
missing bucket, no credentials configured, a token server answering 403/404) exits 77
(``EX_NOPERM``), which the JobSet templates end at once: the same pod would be refused again.
A refusal within the first ``REFUSAL_RETRY_S`` seconds after a process's first GCS request is
retried until then, because a new GKE pod's Workload Identity may not answer (or its binding
not have propagated) for its first seconds.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import threading
import time
from typing import BinaryIO, Callable, ContextManager, Dict, Iterator, List, Optional, Tuple

from trainer.errors import EX_NOPERM, StorageError
from trainer.gcs_listing import object_entries
from trainer.gcs_object import read_object

_TMP_PREFIX = ".tmp-"


def open_dir(uri: str) -> "Directory":
    """A ``Directory`` for a local path or a ``gs://bucket[/prefix]`` URI."""
    if uri.startswith("gs://"):
        bucket, _, prefix = uri[len("gs://"):].partition("/")
        if not bucket:
            raise StorageError("{!r} has no bucket name".format(uri),
                               "use gs://BUCKET/PATH", exit_code=64)
        return GcsDirectory(bucket, prefix.strip("/"))
    return LocalDirectory(uri)


class Directory:
    """Interface shared by local and GCS directories; names are relative, ``/``-separated.

    Besides reading and writing objects, it moves files between itself and the local disk
    for callers that need a real file: ``fetch`` (read one), ``staging_path`` + ``sync_up``
    (write files in place, then make them durable here) and ``sync_down`` (a folder's files,
    locally). For a local directory the local path *is* the file, and syncing does nothing.
    """

    uri = ""

    def write_bytes(self, name: str, data: bytes, overwrite: bool = True) -> None:
        raise NotImplementedError

    def write_file(self, name: str, produce: Callable[[BinaryIO], None],
                   overwrite: bool = True, needs: int = 0) -> None:
        """Make ``name`` hold what ``produce(stream)`` writes into ``stream``, a local file
        open for binary writing, as atomically as ``write_bytes``: for content too large to
        hold in memory twice (a checkpoint is serialised straight to disk, and a GCS upload
        reads it from there in chunks). An ``OSError`` on the way is a ``StorageError``; the
        staged file is always removed. A full disk says how much was free where the file was
        staged and, given ``needs`` (about how many bytes it takes), what it needed."""
        try:
            with self._staged(name) as stream:
                produce(stream)
                stream.flush()
                self._place(stream, name, overwrite)
        except OSError as error:
            if error.errno == errno.ENOSPC:  # measured once the staged part is gone again
                raise StorageError("cannot write {}: {}".format(
                    self.join(name), _no_space(self._staging_folder(name), needs)),
                    self._write_hint())
            raise StorageError("cannot write {}: {}".format(
                self.join(name), error.strerror or error), self._write_hint())

    def _staging_folder(self, name: str) -> str:
        """The local folder where ``write_file`` stages ``name``."""
        raise NotImplementedError

    def _staged(self, name: str) -> ContextManager[BinaryIO]:
        """A new empty local file, open for reading and writing, where ``write_file`` stages
        ``name``; gone after the ``with`` block."""
        raise NotImplementedError

    def _place(self, staged: BinaryIO, name: str, overwrite: bool) -> None:
        """Make ``name`` hold the complete local file ``staged`` (flushed)."""
        raise NotImplementedError

    def _write_hint(self) -> str:
        raise NotImplementedError

    def read_bytes(self, name: str) -> bytes:
        raise NotImplementedError

    def read_range(self, name: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``name`` from ``start``: fewer only where the file ends before
        (the caller decides what that means); ``FileNotFoundError`` when there is no such
        file. On GCS one ranged GET, retried like every call, its length checked."""
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        raise NotImplementedError

    def list(self, prefix: str = "") -> List[str]:
        """Names under ``prefix``, sorted, without temporary files."""
        raise NotImplementedError

    def walk(self, prefix: str = "") -> List[str]:
        """Every file name under the folder ``prefix``, at any depth, sorted, without
        temporary files."""
        raise NotImplementedError

    def sizes(self) -> Dict[str, int]:
        """{name: its size in bytes} of the files directly in this folder (one listing)."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def fetch(self, name: str, cache_dir: str) -> Optional[str]:
        """A local file holding ``name`` (downloaded into ``cache_dir`` when remote, and
        again only when its size changed), or None when there is no such object."""
        raise NotImplementedError

    def staging_path(self, name: str, work_dir: str) -> str:
        """The local path where the file or folder ``name`` is written before ``sync_up``:
        the real place for a local directory, a place under ``work_dir`` otherwise."""
        raise NotImplementedError

    def sync_up(self, local_path: str, name: str) -> int:
        """Make ``name`` hold the file, or the folder's files, at ``local_path`` (what
        ``staging_path(name, ...)`` gave); uploads only files whose size changed since they
        were last synced (the callers' files are append-only or written once). Returns how
        many files were uploaded."""
        raise NotImplementedError

    def sync_down(self, name: str, local_path: str) -> int:
        """Copy the files of folder ``name`` into ``local_path`` (what ``staging_path(name,
        ...)`` gave; each file atomically); returns how many files ``local_path`` holds."""
        raise NotImplementedError

    def remove_stale_temporaries(self, prefix: str = "") -> None:
        """Delete temporary files a killed process left under ``prefix`` (local only)."""

    def join(self, name: str) -> str:
        return "{}/{}".format(self.uri.rstrip("/"), name)


class LocalDirectory(Directory):
    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.uri = self.path
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as error:
            raise StorageError("cannot create directory {}: {}".format(self.path,
                                                                         error.strerror),
                               "check --job_dir and its permissions")

    def write_bytes(self, name: str, data: bytes, overwrite: bool = True) -> None:
        self.write_file(name, lambda stream: stream.write(data), overwrite)

    @contextlib.contextmanager
    def _staged(self, name: str) -> Iterator[BinaryIO]:
        # Named and next to the target: it becomes the target by a rename within one folder.
        # A kill -9 leaves it there, hidden (the listings here skip _TMP_PREFIX).
        folder = os.path.dirname(os.path.join(self.path, name))
        os.makedirs(folder, exist_ok=True)
        handle, path = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=folder)
        try:  # mkstemp's 0600 would become the output's mode: the umask's, as open() gives
            os.fchmod(handle, 0o666 & ~process_umask())
        finally:
            os.close(handle)
        try:
            with open(path, "r+b") as stream:  # named by its path, for _place's rename
                yield stream
        finally:
            _remove_quietly(path)  # still there unless placed

    def _staging_folder(self, name: str) -> str:
        return os.path.dirname(os.path.join(self.path, name))

    def _place(self, staged: BinaryIO, name: str, overwrite: bool) -> None:
        target = os.path.join(self.path, name)
        if not overwrite and os.path.exists(target):
            raise StorageError("{} already exists".format(target), "use a new name")
        os.fsync(staged.fileno())
        os.replace(staged.name, target)
        _fsync(os.path.dirname(target))

    def _write_hint(self) -> str:
        return "check free space and permissions of the job dir"

    def read_bytes(self, name: str) -> bytes:
        path = os.path.join(self.path, name)
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise
        except OSError as error:  # a permission or device error: not the file's content
            raise StorageError("cannot read {}: {}".format(path, error.strerror),
                               "check the permissions of the job dir")

    def read_range(self, name: str, start: int, length: int) -> bytes:
        path = os.path.join(self.path, name)
        try:
            with open(path, "rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise StorageError("cannot read {}: {}".format(path, error.strerror),
                               "check the permissions of the data dir")

    def exists(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.path, name))

    def list(self, prefix: str = "") -> List[str]:
        folder = os.path.join(self.path, prefix)
        if not os.path.isdir(folder):
            return []
        return sorted(os.path.join(prefix, name) if prefix else name
                      for name in os.listdir(folder) if not name.startswith(_TMP_PREFIX))

    def walk(self, prefix: str = "") -> List[str]:
        folder = os.path.join(self.path, prefix)
        if not os.path.isdir(folder):
            return []
        return [_joined(prefix, relative) for relative, _ in _files_under(folder)]

    def sizes(self) -> Dict[str, int]:
        found = {}
        for name in self.list():
            try:
                if os.path.isfile(os.path.join(self.path, name)):
                    found[name] = os.path.getsize(os.path.join(self.path, name))
            except FileNotFoundError:  # removed since it was listed
                continue
        return found

    def delete(self, name: str) -> None:
        _remove_quietly(os.path.join(self.path, name))

    def fetch(self, name: str, cache_dir: str) -> Optional[str]:
        path = os.path.join(self.path, name)
        return path if os.path.isfile(path) else None

    def staging_path(self, name: str, work_dir: str) -> str:
        path = os.path.join(self.path, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def sync_up(self, local_path: str, name: str) -> int:
        return 0  # the staging path is the file itself

    def sync_down(self, name: str, local_path: str) -> int:
        return len(_files_under(local_path))

    def remove_stale_temporaries(self, prefix: str = "") -> None:
        """Delete temporary files left by a process killed mid-write."""
        folder = os.path.join(self.path, prefix)
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            if name.startswith(_TMP_PREFIX):
                _remove_quietly(os.path.join(folder, name))


# How long one GCS operation keeps retrying transient failures (429, 5xx, timeouts, dropped
# connections) before the trainer gives up with exit 74; ``TRAINER_GCS_RETRY_DEADLINE``
# overrides it (see ``trainer.cli``). Each attempt may take at most a quarter of it, capped at
# the library's own 60 s, so a hung request is retried instead of eating the whole budget.
RETRY_DEADLINE_S = 300.0


# How long after a process's first GCS request a refusal is retried (at most
# ``RETRY_DEADLINE_S``): a new GKE pod's Workload Identity may not answer for its first seconds
# (GKE's documentation asks for retries there); past it, a refusal is final at once.
REFUSAL_RETRY_S = 20.0
_first_request: Dict[int, float] = {}  # process id -> monotonic time of its first GCS request


# A resumable upload's chunk (a multiple of 256 KiB): the library's default reads 100 MiB of
# the file into memory at a time; 16 MiB keeps a checkpoint's upload small in memory at a few
# more requests (13 for ResNet-50's 205 MB).
UPLOAD_CHUNK_BYTES = 16 * 1024 * 1024


# Makes a process's Cloud Storage client once, where threads ask for it at once (streamed
# token reads); a new lock in a forked child, in case another thread held it at the fork.
_CLIENT_LOCK = threading.Lock()


def _new_client_lock() -> None:
    global _CLIENT_LOCK
    _CLIENT_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_client_lock)


class GcsDirectory(Directory):
    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket_name, self.prefix = bucket, prefix
        self.uri = "gs://{}/{}".format(bucket, prefix) if prefix else "gs://" + bucket
        self._bucket = None
        self._pid = 0  # the process that made the client
        self._synced: Dict[str, int] = {}  # name -> size of the file last synced up or down

    @property
    def bucket(self):
        """The bucket, through a client of this process: a data worker forked from the
        trainer must not share the trainer's pooled connections (two processes reading one
        socket get each other's bytes: a checksum error at best)."""
        if self._bucket is None or self._pid != os.getpid():
            with _CLIENT_LOCK:  # one client, where several threads ask at once
                if self._bucket is None or self._pid != os.getpid():
                    from google.cloud import storage  # only jobs with gs:// paths import it

                    self._bucket = storage.Client().bucket(self.bucket_name)
                    self._pid = os.getpid()
        return self._bucket

    def _key(self, name: str) -> str:
        return "{}/{}".format(self.prefix, name) if self.prefix else name

    def write_bytes(self, name: str, data: bytes, overwrite: bool = True) -> None:
        self._upload(name, overwrite, lambda blob, options: blob.upload_from_string(
            data, **options))

    @contextlib.contextmanager
    def _staged(self, name: str) -> Iterator[BinaryIO]:
        # Unnamed from the start in the system's temporary folder (the object appears only
        # once uploaded, so nothing needs staging nearby): its space returns when it is
        # closed, also when a kill -9 ends the process mid-write or mid-upload.
        with tempfile.TemporaryFile(prefix=_TMP_PREFIX) as stream:
            yield stream

    def _staging_folder(self, name: str) -> str:
        return tempfile.gettempdir()

    def _place(self, staged: BinaryIO, name: str, overwrite: bool) -> None:
        size = staged.seek(0, os.SEEK_END)
        source = _StagedReads(staged)

        def send(blob, options):
            staged.seek(0)  # back to the start: the size was read at the end
            blob.upload_from_file(source, size=size, **options)

        try:
            self._upload(name, overwrite, send)
        except StagedReadError as error:
            raise StorageError("reading the staged copy of {} in $TMPDIR failed: {}".format(
                self.join(name), error.cause), self._write_hint())

    def _write_hint(self) -> str:  # what is local to a GCS write: the staged file
        return "check free space in $TMPDIR ({})".format(os.environ.get("TMPDIR", "/tmp"))

    def read_bytes(self, name: str) -> bytes:
        return self._call(lambda policy: read_object(self.bucket.blob(self._key(name)), **policy),
                          name)

    def read_range(self, name: str, start: int, length: int) -> bytes:
        return self._call(lambda policy: read_object(self.bucket.blob(self._key(name)),
                                                     start=start, length=length, **policy),
                          name)

    def exists(self, name: str) -> bool:
        return self._call(lambda policy: self.bucket.blob(self._key(name)).exists(**policy),
                          name)

    def list(self, prefix: str = "") -> List[str]:
        return sorted(self._names(prefix, delimiter="/"))

    def walk(self, prefix: str = "") -> List[str]:
        return sorted(name for name in self._names(prefix)
                      if not os.path.basename(name).startswith(_TMP_PREFIX))

    def _names(self, prefix: str, delimiter: Optional[str] = None) -> List[str]:
        """The names (relative to this directory) of the objects under the folder
        ``prefix`` (with ``delimiter`` "/": only those directly in it), listed as a stream
        that keeps nothing but the names (``trainer.gcs_listing``)."""
        start = self._key(prefix.rstrip("/") + "/" if prefix else "")
        base = len(self.prefix) + 1 if self.prefix else 0
        # Listing answers 404 only when the bucket is missing.
        return self._call(lambda policy: [name[base:] for name, _ in object_entries(
            self.bucket.client, self.bucket_name, start, policy, delimiter)], prefix,
            missing_bucket=True)

    def sizes(self) -> Dict[str, int]:
        start = self._key("")
        base = len(start)
        return self._call(lambda policy: {name[base:]: size for name, size in object_entries(
            self.bucket.client, self.bucket_name, start, policy, "/")}, "", missing_bucket=True)

    def delete(self, name: str) -> None:
        try:
            self._call(lambda policy: self.bucket.blob(self._key(name)).delete(**policy), name)
        except FileNotFoundError:
            pass

    def fetch(self, name: str, cache_dir: str) -> Optional[str]:
        blob = self._call(lambda policy: self.bucket.get_blob(self._key(name), **policy), name)
        if blob is None:
            return None
        cached = os.path.join(cache_dir, self.bucket_name, self._key(name))
        if not (os.path.isfile(cached) and os.path.getsize(cached) == blob.size):
            self._download(name, cached)
        return cached

    def staging_path(self, name: str, work_dir: str) -> str:
        path = os.path.join(work_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def sync_up(self, local_path: str, name: str) -> int:
        uploaded = 0
        for relative, path in _files_under(local_path):
            target = _joined(name, relative)
            size = os.path.getsize(path)
            if self._synced.get(target) != size:
                with open(path, "rb") as stream:
                    self._place(stream, target, overwrite=True)
                self._synced[target] = size
                uploaded += 1
        return uploaded

    def sync_down(self, name: str, local_path: str) -> int:
        start = self._key(name.rstrip("/") + "/")
        entries = self._call(lambda policy: list(object_entries(
            self.bucket.client, self.bucket_name, start, policy)), name, missing_bucket=True)
        for key, size in entries:
            relative = key[len(start):]
            if relative and not os.path.basename(relative).startswith(_TMP_PREFIX):
                self._download(_joined(name, relative), os.path.join(local_path, relative))
                self._synced[_joined(name, relative)] = size
        return len(_files_under(local_path))

    def _upload(self, name: str, overwrite: bool, send) -> None:
        """``send(blob, options)``: upload the object ``name`` with the retry policy and, unless
        ``overwrite``, the precondition that it does not exist yet (``options``). A file past
        8 MB goes in chunks of ``UPLOAD_CHUNK_BYTES``, never held in memory whole."""
        blob = self.bucket.blob(self._key(name), chunk_size=UPLOAD_CHUNK_BYTES)
        condition = {} if overwrite else {"if_generation_match": 0}
        # A 404 on a write: the bucket itself is missing.
        self._call(lambda policy: send(blob, dict(condition, **policy)), name,
                   missing_bucket=True)

    def _missing_bucket(self) -> StorageError:
        return StorageError("bucket gs://{} does not exist".format(self.bucket_name),
                            "create it (gcloud storage buckets create gs://{}) or fix the "
                            "path".format(self.bucket_name), EX_NOPERM)

    def _refused(self, name: str, error: BaseException) -> StorageError:
        return StorageError("GCS refused the request for {}: {}".format(
            self.join(name), _cause(error)),
            "give the job's account roles/storage.objectUser on gs://{} (on GKE: the pods' "
            "Workload Identity, or a node pool with --scopes cloud-platform: docs/gke.md, "
            "Cloud Storage access)".format(self.bucket_name), EX_NOPERM)

    def _download(self, name: str, local_path: str) -> None:
        """Download ``name`` to ``local_path`` atomically (a killed download leaves no file
        that looks whole)."""
        os.makedirs(os.path.dirname(local_path), exist_ok=True)
        partial = local_path + ".part"
        self._call(lambda policy: self.bucket.blob(self._key(name)).download_to_filename(
            partial, **policy), name)
        os.replace(partial, local_path)

    def _call(self, action, name: str, missing_bucket: bool = False):
        """``action(policy)`` with the retry policy as keyword arguments; failures become
        ``FileNotFoundError`` (404; with ``missing_bucket``, where only a missing bucket
        answers 404, a refusal) or ``StorageError``: exit 74 after an outage's retries, 77
        for a refusal (retried while ``_may_retry_refusal``), never a traceback."""
        from google.api_core import exceptions
        from google.auth.exceptions import GoogleAuthError

        _first_request.setdefault(os.getpid(), time.monotonic())
        started = time.monotonic()
        delay = 0.5
        while True:
            try:
                return action(_retry_policy())
            except exceptions.NotFound:
                if not missing_bucket:
                    raise FileNotFoundError(self.join(name))
                refusal = self._missing_bucket()
            except exceptions.PreconditionFailed:
                raise StorageError("{} already exists".format(self.join(name)),
                                   "use a new name")
            except (exceptions.GoogleAPIError, OSError, GoogleAuthError) as error:
                # After the retries: a RetryError (3.x), or the last transient error itself
                # (2.x's uploads). OSError: requests' connection errors.
                credentials_outage = _credentials_outage(error)
                if credentials_outage:
                    # google-cloud-storage does not retry a token that could not be had:
                    # retried here for as long as an outage of GCS itself.
                    if time.monotonic() + delay - started <= RETRY_DEADLINE_S:
                        time.sleep(delay)
                        delay = min(2 * delay, 4.0)
                        continue
                    raise StorageError("no credentials for {} for up to {:.0f}s: {}".format(
                        self.join(name), RETRY_DEADLINE_S, _cause(error)),
                        "check the metadata server (on GKE: the gke-metadata-server pods) and "
                        "the network; TRAINER_GCS_RETRY_DEADLINE sets how long to retry")
                credentials = credentials_outage is False
                if _transient(error) and not credentials:
                    raise StorageError("GCS kept failing for {} for up to {:.0f}s: {}".format(
                        self.join(name), RETRY_DEADLINE_S, _cause(error)),
                        "check GCS's status and the network; TRAINER_GCS_RETRY_DEADLINE "
                        "sets how long to retry")
                if _status(_innermost(error)) not in (401, 403) and not credentials:
                    raise StorageError("GCS request for {} failed: {}".format(
                        self.join(name), _cause(error)), "check the bucket name and the path")
                refusal = self._refused(name, error)
            if not _may_retry_refusal(delay):
                raise refusal
            time.sleep(delay)
            delay = min(2 * delay, 4.0)


class StagedReadError(Exception):
    """A read of a staged file failed during its upload: the local disk's error, which no
    retry of the request mends (not an ``OSError``, which would count as the network's)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _StagedReads:
    """A staged file as an upload reads it: its read errors become ``StagedReadError``."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        try:
            return self.stream.read(size)
        except OSError as error:
            raise StagedReadError(error)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def _may_retry_refusal(delay: float) -> bool:
    """Whether a refusal may be tried again after ``delay`` seconds: while that ends within
    ``REFUSAL_RETRY_S`` (at most ``RETRY_DEADLINE_S``) of this process's first request."""
    window = min(REFUSAL_RETRY_S, RETRY_DEADLINE_S)
    return time.monotonic() + delay - _first_request[os.getpid()] <= window


def _retry_policy() -> dict:
    """The same retries for every call, on google-cloud-storage 2.x and 3.x alike: 2.x
    retries an upload only under a generation precondition, but every write here sends the
    whole object, so repeating it is always safe."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return {"retry": DEFAULT_RETRY.with_deadline(RETRY_DEADLINE_S),
            "timeout": min(60.0, max(1.0, RETRY_DEADLINE_S / 4))}


def _credentials_outage(error: BaseException) -> Optional[bool]:
    """For a failure to get credentials (a google-auth error in ``error``'s chain): True for
    an outage (the metadata server out of reach or answering 5xx/429, or an error google-auth
    marks ``retryable``), False for a refusal (no credentials configured, or the token
    server's answer that this pod has none: 403/404); None for any other failure.

    Compute Engine and Workload Identity credentials re-raise the metadata server's
    ``TransportError`` as a ``RefreshError`` whose ``__cause__`` it is, so the whole chain
    counts, not the outermost error's type."""
    from google.auth.exceptions import DefaultCredentialsError, GoogleAuthError, TransportError

    chain = [link for link in _chain(error) if isinstance(link, GoogleAuthError)]
    if not chain:
        return None
    if any(isinstance(link, DefaultCredentialsError) for link in chain):
        return False
    if any(link.retryable for link in chain):
        return True
    for link in chain:
        if isinstance(link, TransportError):
            # google-auth passes the last response along when the answer was final; none:
            # the server was out of reach, or still unavailable after google-auth's retries.
            status = next((arg.status for arg in link.args
                           if isinstance(getattr(arg, "status", None), int)), None)
            return status is None or status in (408, 429) or status >= 500
    return False


def _chain(error: BaseException) -> List[BaseException]:
    """``error`` and the errors behind it (``cause``, ``__cause__``, ``__context__``)."""
    chain = []  # type: List[BaseException]
    link = error  # type: Optional[BaseException]
    while link is not None and len(chain) < 16 and all(link is not seen for seen in chain):
        chain.append(link)
        inner = getattr(link, "cause", None)  # a RetryError's last error
        link = inner if isinstance(inner, BaseException) else (link.__cause__
                                                                or link.__context__)
    return chain


def _transient(error: BaseException) -> bool:
    """Whether ``error`` is (or ends) a run of failures that retrying is meant for."""
    from google.api_core import exceptions

    if isinstance(error, exceptions.RetryError):
        return True
    cause = _innermost(error)
    status = _status(cause)
    return status in (408, 429) or (status or 0) >= 500 or isinstance(cause, OSError)


def _cause(error: BaseException) -> str:
    """What actually failed, in a few words: the HTTP status, or the error's first line."""
    error = _innermost(error)
    status = _status(error)
    if status is not None:
        return "HTTP {} ({})".format(status, type(error).__name__)
    text = str(error).strip().splitlines()
    return "{}: {}".format(type(error).__name__, text[0][:200] if text else "")


def _status(error: BaseException) -> Optional[int]:
    """The HTTP status an API error (``code``) or an upload error (``response``) carries."""
    for status in (getattr(error, "code", None),
                   getattr(getattr(error, "response", None), "status_code", None)):
        if isinstance(status, int):
            return status
    return None


def _innermost(error: BaseException) -> BaseException:
    """The error behind a RetryError or a wrapper: the first one with an HTTP status, else
    the last in the chain."""
    for _ in range(8):
        if _status(error) is not None:
            break
        inner = getattr(error, "cause", None) or error.__cause__
        if inner is None:
            break
        error = inner
    return error


def _files_under(local_path: str) -> List[Tuple[str, str]]:
    """(relative name, path) of the file ``local_path``, or of every file in the folder
    ``local_path`` (recursively; temporaries left out)."""
    if os.path.isfile(local_path):
        return [("", local_path)]
    found = []
    for folder, _, names in os.walk(local_path):
        for name in names:
            if not name.startswith(_TMP_PREFIX) and not name.endswith(".part"):
                path = os.path.join(folder, name)
                found.append((os.path.relpath(path, local_path).replace(os.sep, "/"), path))
    return sorted(found)


def _joined(name: str, relative: str) -> str:
    """``name/relative``, where either may be empty (the folder itself, or one file)."""
    return "/".join(part for part in (name.rstrip("/"), relative) if part)


def _no_space(folder: str, needs: int) -> str:
    """A full disk in a few words: what was free in ``folder`` and, if known (``needs``
    bytes), what the file needed."""
    try:
        stats = os.statvfs(folder)
        free = "{} free in {}".format(_megabytes(stats.f_bavail * stats.f_frsize), folder)
    except OSError:
        free = "free space in {} unknown".format(folder)
    return "no space left on device ({}{})".format(
        free, "; it needs about {}".format(_megabytes(needs)) if needs else "")


def _megabytes(size: int) -> str:
    return "{:.1f} MB".format(size / 1e6)


def _fsync(path: str) -> None:
    """Flush the file or folder ``path`` to the disk (a rename is durable only once its
    folder is)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def process_umask() -> int:
    """This process's umask, read without changing it (``os.umask`` can only set it, which
    would race with the other threads' file creations): ``/proc/self/status``, else 022."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
