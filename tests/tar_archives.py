"""Tar archives written by the standard library's own header writer (``TarInfo.tobuf``, what
``TarFile.addfile`` writes) in the ustar, GNU and pax formats, with each member's header
located so that a test can rewrite it as another writer, or damage, would; and GNU sparse
members, which tarfile reads but cannot write, made by hand.

An entry is a tuple, its first item the kind:

- ``("file", name, data, type, extra)``: a regular file (type ``0``, ``\\0`` or ``7``);
  ``extra`` adds pax records in the pax format: ``"size"`` (its true size, as for a member
  of 8 GiB and over), ``"mtime"`` (a fraction), ``"comment"``, ``"bad size"`` (a size that is
  not a number: damage) or nothing (``""``); ``"uid"`` a uid over ustar's 7 octal digits
  (base-256 in GNU, a pax record in pax, not writable in ustar)
- ``("dir", name)``, ``("v7dir", name)`` (a pre-POSIX directory: type ``\\0``, name ending in
  ``/``), ``("symlink", name, target)``, ``("hardlink", name, target)``
- ``("other", name, data)``: a GNU type tarfile does not know (``D``), whose data it skips
- ``("global", records)``: a pax global header
- ``("sparse", name, data)``: a GNU sparse member; ``("pax sparse", name, data)``: one in
  GNU's pax sparse format 0.1 (pax format only)

Entries a format cannot hold (a long name in ustar) are left out.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from typing import List, Tuple

BLOCK = 512
FORMATS = (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT)


@dataclass
class Archive:
    data: bytearray = field(default_factory=bytearray)
    headers: List[int] = field(default_factory=list)  # each member's own header's offset
    pax_sized: List[int] = field(default_factory=list)  # those that a pax size record follows
    contents: List[Tuple[int, int]] = field(default_factory=list)  # regular files' data spans
    sparse: List[str] = field(default_factory=list)  # names of sparse members
    damaged: bool = False  # written with a fault on purpose (a pax size that is no number)


def build(format_: int, entries: List[tuple]) -> Archive:
    archive = Archive()
    for entry in entries:
        kind = entry[0]
        if kind == "global":
            global_header = tarfile.TarInfo.create_pax_global_header(dict(entry[1]))
            archive.headers.append(len(archive.data))  # its records follow it
            archive.data += global_header
            continue
        if kind == "sparse":
            _append(archive, gnu_sparse_header(entry[1], len(entry[2])), entry[2])
            archive.sparse.append(entry[1])
            continue
        info, data = _info(format_, entry)
        try:
            blocks = info.tobuf(format_, "utf-8", "surrogateescape")
        except ValueError:  # this format cannot hold it (ustar: a long name or a big uid)
            continue
        if kind == "pax sparse":
            if format_ != tarfile.PAX_FORMAT:
                continue
            archive.sparse.append(entry[1])
        if kind == "file" and format_ == tarfile.PAX_FORMAT:
            if entry[4] == "size":
                archive.pax_sized.append(len(archive.data) + len(blocks) - BLOCK)
            archive.damaged |= entry[4] == "bad size"
        if kind == "file":
            start = len(archive.data) + len(blocks)
            archive.contents.append((start, start + len(data)))
        _append(archive, blocks, data)
    archive.data += bytes(2 * BLOCK)
    return archive


# A file's ``extra`` pax record: (keyword, value); no value: the file's size.
EXTRA_RECORDS = {"size": ("size", ""), "mtime": ("mtime", "1.5"),
                 "comment": ("comment", "a comment\n=x"), "bad size": ("size", "12 bytes")}


def _info(format_: int, entry: tuple) -> Tuple[tarfile.TarInfo, bytes]:
    kind, name = entry[0], entry[1]
    info, data = tarfile.TarInfo(name), b""
    if kind == "file":
        data, info.type = entry[2], entry[3]
        if entry[4] == "uid":
            info.uid = 8 ** 7 + 5
        elif entry[4]:
            keyword, value = EXTRA_RECORDS[entry[4]]
            info.pax_headers = {keyword: value or str(len(data))}
    elif kind == "dir":
        info.type = tarfile.DIRTYPE
    elif kind == "v7dir":
        info.name, info.type = name + "/", tarfile.AREGTYPE
    elif kind in ("symlink", "hardlink"):
        info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
        info.linkname = entry[2]
    elif kind == "other":
        data, info.type = entry[2], b"D"
    elif kind == "pax sparse":
        data = entry[2]
        info.pax_headers = {"GNU.sparse.major": "0", "GNU.sparse.minor": "1",
                            "GNU.sparse.name": name, "GNU.sparse.realsize": str(len(data)),
                            "GNU.sparse.map": "0,{}".format(len(data))}
    info.size = len(data)
    return info, data


def _append(archive: Archive, blocks: bytes, data: bytes) -> None:
    archive.headers.append(len(archive.data) + len(blocks) - BLOCK)
    archive.data += blocks + data + bytes(-len(data) % BLOCK)


def gnu_sparse_header(name: str, size: int) -> bytes:
    """A GNU sparse member's header (old GNU format): ``size`` bytes of data, stored at offset
    0 of a file with a hole of 1,000 bytes after them."""
    header = bytearray(BLOCK)
    encoded = name.encode()[:99]
    header[:len(encoded)] = encoded
    for start, width, value in ((100, 8, 0o644), (108, 8, 0), (116, 8, 0), (124, 12, size),
                                (136, 12, 0), (386, 12, 0), (398, 12, size),
                                (483, 12, size + 1000)):
        header[start:start + width] = b"%0*o\0" % (width - 1, value)
    header[156:157], header[257:265] = b"S", b"ustar  \0"
    return bytes(fix_checksum(header))


def fix_checksum(header: bytearray) -> bytearray:
    """``header`` with the checksum of its bytes as they are now."""
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return header


def signed_checksum(header: bytes) -> int:
    """The checksum of ``header`` summed as signed bytes, as some old tars did."""
    return sum(byte - 256 if byte > 127 else byte
               for byte in header[:148] + b" " * 8 + header[156:])


def rewrite(archive: Archive, at: int, start: int, value: bytes) -> None:
    """Put ``value`` at ``start`` of the header at ``at`` and make its checksum right."""
    header = archive.data[at:at + BLOCK]
    header[start:start + len(value)] = value
    archive.data[at:at + BLOCK] = fix_checksum(header)

