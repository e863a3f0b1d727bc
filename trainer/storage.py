"""A directory that is local or on Google Cloud Storage (``gs://bucket/prefix``), with the
operations the job dir needs. Writes are atomic: a reader sees the old object or the new one,
never part of one.

- Local: write to a hidden temporary file in the same directory, fsync, ``rename`` over the
  name, fsync the directory.
- GCS: an object becomes visible only when its upload completes, so a killed upload leaves
  nothing behind; ``write_bytes(..., overwrite=False)`` adds the precondition
  ``if_generation_match=0`` so an existing checkpoint is never replaced.

google-cloud-storage honours ``STORAGE_EMULATOR_HOST`` (the tests use fake-gcs-server).
"""

from __future__ import annotations

import os
import tempfile
from typing import List, Optional

from trainer.errors import StorageError

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
    """Interface shared by local and GCS directories; names are relative, ``/``-separated."""

    uri = ""

    def write_bytes(self, name: str, data: bytes, overwrite: bool = True) -> None:
        raise NotImplementedError

    def read_bytes(self, name: str) -> bytes:
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        raise NotImplementedError

    def list(self, prefix: str = "") -> List[str]:
        """Names under ``prefix``, sorted, without temporary files."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def upload_file(self, local_path: str, name: str) -> None:
        with open(local_path, "rb") as handle:
            self.write_bytes(name, handle.read())

    def child(self, name: str) -> "Directory":
        raise NotImplementedError

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
        target = os.path.join(self.path, name)
        folder = os.path.dirname(target)
        os.makedirs(folder, exist_ok=True)
        if not overwrite and os.path.exists(target):
            raise StorageError("{} already exists".format(target), "use a new name")
        handle, temporary = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=folder)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, target)
            _fsync_dir(folder)
        except OSError as error:
            _remove_quietly(temporary)
            raise StorageError("cannot write {}: {}".format(target, error.strerror),
                               "check free space and permissions of the job dir")

    def read_bytes(self, name: str) -> bytes:
        with open(os.path.join(self.path, name), "rb") as handle:
            return handle.read()

    def exists(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.path, name))

    def list(self, prefix: str = "") -> List[str]:
        folder = os.path.join(self.path, prefix)
        if not os.path.isdir(folder):
            return []
        return sorted(os.path.join(prefix, name) if prefix else name
                      for name in os.listdir(folder) if not name.startswith(_TMP_PREFIX))

    def delete(self, name: str) -> None:
        _remove_quietly(os.path.join(self.path, name))

    def child(self, name: str) -> "LocalDirectory":
        return LocalDirectory(os.path.join(self.path, name))

    def remove_stale_temporaries(self, prefix: str = "") -> None:
        """Delete temporary files left by a process killed mid-write."""
        folder = os.path.join(self.path, prefix)
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            if name.startswith(_TMP_PREFIX):
                _remove_quietly(os.path.join(folder, name))


class GcsDirectory(Directory):
    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket_name, self.prefix = bucket, prefix
        self.uri = "gs://{}/{}".format(bucket, prefix) if prefix else "gs://" + bucket
        self._bucket = None

    @property
    def bucket(self):
        if self._bucket is None:
            from google.cloud import storage  # only jobs with gs:// paths pay for the import

            self._bucket = storage.Client().bucket(self.bucket_name)
        return self._bucket

    def _key(self, name: str) -> str:
        return "{}/{}".format(self.prefix, name) if self.prefix else name

    def write_bytes(self, name: str, data: bytes, overwrite: bool = True) -> None:
        blob = self.bucket.blob(self._key(name))
        condition = {} if overwrite else {"if_generation_match": 0}
        self._call(lambda: blob.upload_from_string(data, **condition), name)

    def read_bytes(self, name: str) -> bytes:
        return self._call(lambda: self.bucket.blob(self._key(name)).download_as_bytes(), name)

    def exists(self, name: str) -> bool:
        return self._call(lambda: self.bucket.blob(self._key(name)).exists(), name)

    def list(self, prefix: str = "") -> List[str]:
        start = self._key(prefix.rstrip("/") + "/" if prefix else "")
        blobs = self._call(lambda: list(self.bucket.client.list_blobs(self.bucket_name,
                                                                      prefix=start)), prefix)
        base = len(self.prefix) + 1 if self.prefix else 0
        return sorted(blob.name[base:] for blob in blobs
                      if "/" not in blob.name[len(start):])

    def delete(self, name: str) -> None:
        from google.api_core import exceptions

        try:
            self.bucket.blob(self._key(name)).delete()
        except exceptions.NotFound:
            pass

    def size(self, name: str) -> Optional[int]:
        blob = self._call(lambda: self.bucket.get_blob(self._key(name)), name)
        return None if blob is None else blob.size

    def download_to(self, name: str, local_path: str) -> None:
        self._call(lambda: self.bucket.blob(self._key(name)).download_to_filename(local_path),
                   name)

    def child(self, name: str) -> "GcsDirectory":
        return GcsDirectory(self.bucket_name, self._key(name))

    def _call(self, action, name: str):
        from google.api_core import exceptions

        try:
            return action()
        except exceptions.NotFound:
            raise FileNotFoundError(self.join(name))
        except exceptions.PreconditionFailed:
            raise StorageError("{} already exists".format(self.join(name)), "use a new name")
        except exceptions.GoogleAPICallError as error:
            raise StorageError("GCS request for {} failed: {}".format(self.join(name), error),
                               "check the bucket name and the job's storage permissions")


def _fsync_dir(folder: str) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
