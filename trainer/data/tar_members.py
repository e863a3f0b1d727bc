"""Shards are plain tar files in webdataset's layout: the files of one example share a key
(``KEY.jpg`` and ``KEY.cls``, the label in decimal), and an example's files are adjacent. Only
the standard library is used, so the XRT image's Python 3.7 reads them as well."""

from __future__ import annotations

import io
import tarfile
from typing import Dict, Iterator, List, Tuple

Sample = Tuple[str, Dict[str, bytes]]  # key, {extension: bytes}


def tar_bytes(members: List[Tuple[str, bytes]]) -> bytes:
    """A tar archive of ``(name, data)`` in the given order; fixed owner, mode and time, so the
    same members always give the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o444, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def read_samples(stream) -> Iterator[Sample]:
    """The examples of a tar stream, in order, read front to back (no seeking): each key with
    the bytes of its files by extension (what follows the key's first dot)."""
    key, files = None, {}  # type: ignore
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            if not member.isfile():
                continue
            base = member.name.rsplit("/", 1)[-1]
            stem, _, extension = base.partition(".")
            if stem != key and files:
                yield key, files
                files = {}
            key = stem
            files[extension.lower()] = archive.extractfile(member).read()
    if files:
        yield key, files
