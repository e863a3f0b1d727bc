"""Shards are plain tar files in webdataset's layout: the files of one example are adjacent and
share a key, the member's path up to the first dot of its base name (``KEY.jpg`` and
``KEY.cls``, the label in decimal; a key may hold folders, ``train/n01/x.jpg`` is key
``train/n01/x``). Only the standard library is used, so the XRT image's Python 3.7 reads
them as well.

The reader is its own (``members``) and reads exactly the regular files that ``tarfile``
reads, with their bytes, in the ustar, GNU and pax formats; where ``tarfile`` would go on
past damage (it ends an archive silently at a damaged header, or reads a non-numeric pax
size as 0) this one stops with a ``tarfile.ReadError`` saying what is wrong, as it does for
sparse members, which shards never hold.
"""

from __future__ import annotations

import io
import re
import tarfile
import zlib
from typing import Dict, Iterator, List, Optional, Tuple

Sample = Tuple[str, Dict[str, bytes]]  # key, {extension: bytes}

BLOCK = 512
_END = bytes(BLOCK)
# Member types, as tarfile treats them. Regular files (tarfile's REGULAR_TYPES but sparse):
_REGULAR = (b"0", b"\0", b"7")
# Links, devices, directories and FIFOs: tarfile reads no data after their header, whatever
# its size field says. Any type not named here (GNU's D, M, N, V ...) has its data skipped.
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")
_LONG_NAME, _LONG_LINK, _PAX, _SOLARIS_PAX, _GLOBAL, _SPARSE = b"L", b"K", b"x", b"X", b"g", b"S"
_EXTENSIONS = (_LONG_NAME, _LONG_LINK, _PAX, _SOLARIS_PAX, _GLOBAL)
# The number fields as tarfile and GNU tar fill them (octal digits and a NUL; the checksum six
# digits, NUL, space; device numbers also all NUL): two matches check them all. Anything else
# takes the exact path (``_number`` per field, as tarfile parses them).
_TYPICAL_NUMBERS = re.compile(  # 100:156, mode to checksum
    rb"[0-7]{7}\0[0-7]{7}\0[0-7]{7}\0([0-7]{11})\0[0-7]{11}\0([0-7]{6})\0 ")
_TYPICAL_DEVICES = re.compile(rb"(?:[0-7]{7}\0|\0{8}){2}")  # 329:345
# (start, end) of mode, uid, gid, mtime, devmajor and devminor: numbers tarfile parses (and
# refuses a header over) though nothing here uses them.
_OTHER_NUMBERS = ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345))
_HIGH_BYTES = bytes(range(128, 256))


def tar_bytes(members: List[Tuple[str, bytes]]) -> bytes:
    """A ustar archive of ``(name, data)`` in the given order; fixed owner, mode and time, so
    the same members always give the same bytes. A name must fit ustar (100 bytes, or 155 of
    folders and 100 of base name): ``make_shards``' names always do."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o444, 0
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def read_samples(stream) -> Iterator[Sample]:
    """The examples of a tar stream, in order, read front to back (no seeking): each key with
    the bytes of its files by extension (what follows the first dot of the base name, in lower
    case). Members that are no example's file, as webdataset skips them, are skipped: a base
    name without a dot before its extension, and anything under a ``__NAME__`` folder or so
    named at the top. A stream that is not a whole tar archive, or an example with two files
    of one extension, is a ``tarfile.ReadError``."""
    key, files = None, {}  # type: ignore
    for name, data in members(stream):
        split = key_and_extension(name)
        if split is None:
            continue
        if split[0] != key and files:
            yield key, files
            files = {}
        key, extension = split
        if extension in files:
            raise tarfile.ReadError("example {!r} has two .{} files".format(key, extension))
        files[extension] = data
    if files:
        yield key, files


def key_and_extension(name: str) -> Optional[Tuple[str, str]]:
    """(key, extension in lower case) of a member's path, or None when it belongs to no
    example (see ``read_samples``)."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    top = name.split("/", 1)[0]
    if not (dot and stem) or (len(top) >= 4 and top.startswith("__") and top.endswith("__")):
        return None
    return (folder + "/" + stem if folder else stem), extension.lower()


def members(stream) -> Iterator[Tuple[str, bytes]]:
    """``(name, bytes)`` of each regular file of a tar stream, in order: what ``tarfile``
    reads (module docstring), or a ``tarfile.ReadError``.

    Written here rather than taken from ``tarfile``, whose Python header parsing cost 80 us
    per member, a third of reading a shard. Extension headers (GNU long names and links, pax
    extended and global headers) describe the member that follows them; as in tarfile, a
    global header's path applies to every later member, and of several extension headers
    before one member the first read wins.
    """
    global_pax: Dict[str, str] = {}
    # What the extension headers read since the last member say about the next one, in
    # order: ("name", path) from a GNU long name, ("pax", records) from a pax header
    # (the global records as they were then, updated by its own), None from the others.
    pending: List[Optional[Tuple[str, object]]] = []
    while True:
        header = stream.read(BLOCK)
        if header == _END:
            if pending:
                raise tarfile.ReadError("the archive ends after an extension header, before "
                                        "the member it describes")
            return
        if len(header) < BLOCK:  # every writer ends an archive with zero blocks
            raise tarfile.ReadError("the archive ends before its end-of-archive block")
        size = _checked(header)
        kind = header[156:157]
        if kind in _EXTENSIONS:
            data = _read_exactly(stream, _padded(size, header))
            pending.append(_extension(kind, data, size, global_pax))
            continue
        if kind == b"\0" and _text(header[:100]).endswith("/"):  # an old (V7) directory
            kind = b"5"
        name = _header_name(header, kind)
        for override in [("pax", global_pax)] + pending[::-1] if pending or global_pax else ():
            if override is None:  # the first extension header read wins: applied last
                continue
            if override[0] == "name":
                name = str(override[1])
                continue
            records: Dict[str, str] = override[1]  # type: ignore
            if any(keyword.startswith("GNU.sparse.") for keyword in records):
                kind = _SPARSE
            if "path" in records:
                name = records["path"].rstrip("/")
            if "size" in records:
                size = _pax_size(records["size"])
        pending = []
        if kind == _SPARSE:
            raise tarfile.ReadError("member {!r} is a sparse file, which a shard never "
                                    "holds".format(name))
        if kind in _REGULAR:
            padded = _padded(size, header)
            data = _read_exactly(stream, size)
            _read_exactly(stream, padded - size)
            yield name, data
        elif kind not in _NO_DATA:
            _read_exactly(stream, _padded(size, header))


def _checked(header: bytes) -> int:
    """The header's size field, once its checksum and every number field are what tarfile
    accepts; a ReadError otherwise."""
    typical = _TYPICAL_NUMBERS.fullmatch(header, 100, 156)
    if typical and _TYPICAL_DEVICES.fullmatch(header, 329, 345):
        size, stored = int(typical.group(1), 8), int(typical.group(2), 8)
    else:
        for start, end in _OTHER_NUMBERS:
            _number(header[start:end])
        size, stored = _number(header[124:136]), _number(header[148:156])
    # The sum of the header's bytes with the checksum field read as 8 spaces; some old tars
    # summed signed bytes, which tarfile accepts too.
    unsigned = _byte_sum(header) - sum(header[148:156]) + 8 * 32
    if stored != unsigned:
        summed = header[:148] + header[156:]
        high = len(summed) - len(summed.translate(None, _HIGH_BYTES))
        if stored != unsigned - 256 * high:
            raise tarfile.ReadError("a tar header's checksum is wrong")
    return size


def _byte_sum(header: bytes) -> int:
    """The sum of a header's 512 bytes, 5x sooner than ``sum``: Adler-32's low half is 1 + the
    sum modulo 65521, which is 1 + the sum itself over 256 bytes (at most 65,280)."""
    return (zlib.adler32(header[:256]) & 0xFFFF) + (zlib.adler32(header[256:]) & 0xFFFF) - 2


def _number(field: bytes) -> int:
    """A header's number field as tarfile reads it: octal text up to the first NUL, blanks
    around it, or GNU's base-256 (first byte 0x80, or 0xff for a negative number)."""
    if field[0] in (0x80, 0xFF):
        value = int.from_bytes(field[1:], "big")
        return value - 256 ** (len(field) - 1) if field[0] == 0xFF else value
    try:
        return int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except ValueError:  # a UnicodeDecodeError is one
        raise tarfile.ReadError("a tar header's number field is not a number")


def _padded(size: int, header: bytes) -> int:
    """``size`` rounded up to whole blocks; a ReadError for a negative size."""
    if size < 0:
        raise tarfile.ReadError("member {!r} has a negative size".format(_text(header[:100])))
    return -(-size // BLOCK) * BLOCK


def _header_name(header: bytes, kind: bytes) -> str:
    """The header's own name: its prefix field (POSIX's folders for long names; tarfile joins
    it whatever the format) and its name field, without a directory's trailing slashes."""
    name = _text(header[:100])
    if kind == b"5":
        name = name.rstrip("/")
    prefix = _text(header[345:500])
    return prefix + "/" + name if prefix else name


def _extension(kind: bytes, data: bytes, size: int, global_pax: Dict[str, str]
               ) -> Optional[Tuple[str, object]]:
    """What an extension header with ``data`` (its ``size`` bytes and the block's padding)
    says about the next member; a global header's records update ``global_pax``."""
    if kind == _LONG_NAME:
        return "name", _text(data)
    if kind == _LONG_LINK:
        return None
    records = _pax_records(data, size)
    if kind == _GLOBAL:
        if "size" in records:  # tarfile would read every later member at that size
            raise tarfile.ReadError("a pax global header sets the size of every member")
        global_pax.update(records)
        return None
    merged = dict(global_pax)
    merged.update(records)
    return "pax", merged


def _pax_records(data: bytes, size: int) -> Dict[str, str]:
    """The ``LENGTH keyword=value\\n`` records of a pax header (LENGTH counts the whole
    record), which must fill its ``size`` bytes exactly, the block's padding being NULs."""
    records, at = {}, 0
    while at < size:
        space = data.find(b" ", at, min(at + 21, size))
        digits = data[at:space] if space > at else b""
        end = at + int(digits) if digits.isdigit() else 0
        record = data[space + 1:end]
        keyword, equals, value = record[:-1].partition(b"=")
        if end > size or not (keyword and equals and record.endswith(b"\n")):
            raise tarfile.ReadError("a pax header's records are malformed")
        records[_decoded(keyword)] = _decoded(value)
        at = end
    if data.count(0, size) != len(data) - size:
        raise tarfile.ReadError("a pax header's records are malformed")
    return records


def _pax_size(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        raise tarfile.ReadError("a pax header's size {!r} is not a number".format(value))
    if size < 0:
        raise tarfile.ReadError("a pax header's size {} is negative".format(size))
    return size


def _text(field: bytes) -> str:
    return _decoded(field.split(b"\0", 1)[0])


def _decoded(raw: bytes) -> str:
    # What tarfile does with names and pax values, where its encoding is UTF-8: UTF-8, and
    # bytes that are not UTF-8 kept as surrogate escapes.
    return raw.decode("utf-8", "surrogateescape")


def _read_exactly(stream, size: int) -> bytes:
    data = stream.read(size) if size else b""
    if len(data) < size:
        raise tarfile.ReadError("the archive ends inside a member")
    return data
