"""trainer.data.tar_members: shards written and streamed with the standard library."""

import io
import tarfile

import pytest
import tar_archives
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from conftest import examples
from trainer.data.tar_members import _number, members, read_samples, tar_bytes


class OneWay(io.RawIOBase):
    """A stream that cannot seek, as a network download is."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self.data[self.at:self.at + min(len(buffer), 1000)]
        buffer[:len(chunk)] = chunk
        self.at += len(chunk)
        return len(chunk)


keys = st.from_regex(r"[a-z0-9_]{1,20}", fullmatch=True)


@given(st.lists(st.tuples(keys, st.binary(max_size=3000), st.integers(0, 999)),
                unique_by=lambda item: item[0], max_size=12))
def test_examples_come_back_in_order_through_a_stream_that_cannot_seek(examples):
    members = []
    for key, image, label in examples:
        members += [(key + ".jpg", image), (key + ".cls", str(label).encode())]
    data = tar_bytes(members)
    assert data == tar_bytes(members)  # the same members, the same bytes
    read = list(read_samples(io.BufferedReader(OneWay(data))))
    assert read == [(key, {"jpg": image, "cls": str(label).encode()})
                    for key, image, label in examples]


def test_the_key_is_the_path_up_to_the_first_dot_of_the_base_name_as_webdataset_reads_it():
    data = tar_bytes([("dir/a.seg.png", b"1"), ("dir/a.CLS", b"2"), ("b.jpg", b"3"),
                      ("other.d/a.jpg", b"4"), ("other.d/a.cls", b"5"), ("README", b"6"),
                      ("__meta__/x.json", b"7"), ("dir/.hidden", b"8"), ("____/x.jpg", b"0"),
                      ("c.jpg", b"9")])
    # Adjacent examples with one base name in two folders are two examples; a member with
    # no extension, under webdataset's __meta__ folders, or a dot file is no example's.
    assert list(read_samples(io.BytesIO(data))) == [
        ("dir/a", {"seg.png": b"1", "cls": b"2"}), ("b", {"jpg": b"3"}),
        ("other.d/a", {"jpg": b"4", "cls": b"5"}), ("c", {"jpg": b"9"})]


def test_two_files_of_one_extension_in_an_example_are_refused():
    data = tar_bytes([("a.jpg", b"1"), ("a.JPG", b"2")])
    with pytest.raises(tarfile.ReadError, match="example 'a' has two .jpg files"):
        list(read_samples(io.BytesIO(data)))


def archive(format_: int, entries) -> bytes:
    """A tar archive written by the standard library in ``format_``: ``(name, data)`` files,
    ``(name, None)`` directories, ``(name, "->target")`` symbolic links."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=format_) as out:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                out.addfile(info)
            elif isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data[2:]
                out.addfile(info)
            else:
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


LONG = "n" * 120 + "/" + "é" * 60  # over ustar's 100-byte name: a prefix, or a long-name header


@pytest.mark.parametrize("format_", ["USTAR_FORMAT", "GNU_FORMAT", "PAX_FORMAT"])
def test_the_files_are_what_tarfile_reads_in_every_format(format_):
    entries = [("d", None), ("d/a.jpg", b"\xff\xd8" * 700), ("d/a.cls", b"7"),
               ("d/link.jpg", "->a.jpg"), (LONG[:150] + ".jpg", b"x" * 513),
               ("d/empty.cls", b"")]
    if format_ != "USTAR_FORMAT":  # ustar cannot hold this name at all
        entries.append((LONG + ".jpg", b"y" * 1024))
    data = archive(getattr(tarfile, format_), entries)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as reference:
        expected = [(member.name, reference.extractfile(member).read())
                    for member in reference if member.isfile()]
    assert list(members(io.BufferedReader(OneWay(data)))) == expected
    assert len(expected) == len(entries) - 2  # the directory and the link are not files


@pytest.mark.parametrize("cut", [0, 100, 512 + 100, 1024 + 3, 2560])  # 2560: between members
def test_a_cut_archive_is_a_read_error(cut):
    data = tar_bytes([("a.jpg", b"1" * 2000), ("a.cls", b"2")])
    with pytest.raises(tarfile.ReadError):
        list(read_samples(io.BytesIO(data[:cut])))


def test_a_damaged_header_is_a_read_error():
    data = bytearray(tar_bytes([("a.jpg", b"1" * 2000)]))
    data[10] ^= 0x20  # one bit of the name: the checksum no longer matches
    with pytest.raises(tarfile.ReadError, match="checksum"):
        list(read_samples(io.BytesIO(bytes(data))))


# --- The reader against tarfile, on archives tarfile writes and on damaged ones ---------------

segment = st.text(alphabet="abcdefgh._é漢", min_size=1, max_size=60)
names = st.lists(segment, min_size=1, max_size=5).map("/".join)  # up to ~900 UTF-8 bytes
contents = st.one_of(st.binary(max_size=1100), st.integers(0, 3).map(lambda n: b"z" * 512 * n))
pax_text = st.text(alphabet="ab =\né/", max_size=30)
entries = st.one_of(
    st.tuples(st.just("file"), names, contents, st.sampled_from([b"0", b"0", b"\0", b"7"]),
              st.sampled_from(["", "", "size", "mtime", "comment", "uid", "bad size"])),
    st.tuples(st.just("dir"), names), st.tuples(st.just("v7dir"), segment),
    st.tuples(st.sampled_from(["symlink", "hardlink"]), names, names),
    st.tuples(st.just("other"), names, contents),
    st.tuples(st.just("global"), st.dictionaries(
        st.sampled_from(["comment", "mtime", "uname", "path"]), pax_text, max_size=2)),
    st.tuples(st.sampled_from(["sparse", "pax sparse"]), segment, st.binary(max_size=600)))


CHANGES = ("none", "flip", "truncate", "header", "base-256 size", "negative size",
           "signed checksum", "spaced numbers", "pax size only")
changes = st.tuples(st.sampled_from(CHANGES), st.integers(0, 2 ** 20), st.integers(1, 255),
                    st.booleans())


def apply(change, archive) -> bool:
    """Make ``change`` (what, where, a byte value, a choice) to ``archive``; whether that is
    damage. Damage may make the reader refuse the archive; every other change leaves an
    archive that the reader must read as tarfile does."""
    kind, where, value, choice = change
    data, headers = archive.data, archive.headers
    if kind == "flip":  # anywhere; inside a file's data only its bytes change
        data[where % len(data)] ^= value
        return not any(start <= where % len(data) < end for start, end in archive.contents)
    if kind == "truncate":
        del data[where % len(data):]
        return True
    if kind == "pax size only" and archive.pax_sized:
        # As for a member of 8 GiB and over: the size field says 0, the pax record the size.
        at = archive.pax_sized[where % len(archive.pax_sized)]
        tar_archives.rewrite(archive, at, 124, b"%011o\0" % 0)
        return False
    if kind in ("none", "pax size only") or not headers:
        return False
    at = headers[where % len(headers)]
    header = bytes(data[at:at + 512])
    size = _number(header[124:136])
    if kind == "header":  # one byte set, the checksum made right or not: a bad writer
        data[at + where % 512] = value
        if choice:
            data[at:at + 512] = tar_archives.fix_checksum(data[at:at + 512])
        return True
    if kind == "base-256 size":  # GNU's encoding of sizes of 8 GiB and over
        tar_archives.rewrite(archive, at, 124, b"\x80" + size.to_bytes(11, "big"))
        return False
    if kind == "negative size":
        tar_archives.rewrite(archive, at, 124,
                             b"\xff" + (256 ** 11 - value).to_bytes(11, "big"))
        return True
    if kind == "signed checksum":  # Sun's and NeXT's tars summed signed bytes
        signed = tar_archives.signed_checksum(header)
        if 0 <= signed < 8 ** 6:
            data[at + 148:at + 156] = b"%06o\0 " % signed
        return False
    # Old GNU tar's numbers: blank-padded, then a blank and a NUL; device numbers left NUL.
    for start, width in ((100, 8), (124, 12)):
        number = _number(header[start:start + width])
        if 0 <= number < 8 ** (width - 3):
            tar_archives.rewrite(archive, at, start, b"%*o \0" % (width - 2, number))
    tar_archives.rewrite(archive, at, 329, bytes(16))
    return False


def tarfile_reads(data: bytes):
    """The regular files that tarfile reads from ``data`` (its stream mode, as a shard
    arrives), or the exception it raises."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|", encoding="utf-8") as reference:
            return [(member.name, reference.extractfile(member).read())
                    for member in reference if member.isfile()]
    except Exception as error:  # anything tarfile raises means "it refuses this archive"
        return error


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(tar_archives.FORMATS), st.lists(entries, max_size=7), changes)
# make fuzz: a regular member's negative size reached stream.read as a ValueError
@example(tarfile.USTAR_FORMAT, [("file", "_", b"", b"0", "")], ("negative size", 0, 2, False))
def test_the_reader_reads_what_tarfile_reads_or_refuses_damage(format_, chosen, change):
    archive = tar_archives.build(format_, chosen)
    damage = apply(change, archive) or archive.damaged
    expected = tarfile_reads(bytes(archive.data))
    try:
        read = list(members(io.BufferedReader(OneWay(bytes(archive.data)))))
    except tarfile.ReadError as error:
        # Only damage, a sparse member or what tarfile refuses too is refused; a sparse
        # member by its name (a global pax path renames every later member).
        event("refused: " + ("damage" if damage else "sparse" if archive.sparse else
                             "tarfile refuses it too"))
        assert damage or archive.sparse or isinstance(expected, Exception), (error, expected)
        if archive.sparse and not damage and "sparse" in str(error):
            assert any(repr(name) in str(error) for name in archive.sparse) or (
                "'path'" in repr(chosen)), error
        return
    event("read as tarfile reads it, after " + change[0])
    assert not archive.sparse or damage  # sparse members are never read
    assert read == expected, change


def test_sparse_members_are_refused_by_name():
    for format_, kind in ((tarfile.GNU_FORMAT, "sparse"), (tarfile.PAX_FORMAT, "pax sparse")):
        data = tar_archives.build(format_, [("file", "a.jpg", b"1", b"0", ""),
                                            (kind, "holes.bin", b"2" * 600)]).data
        with pytest.raises(tarfile.ReadError, match="member 'holes.bin' is a sparse file"):
            list(members(io.BytesIO(bytes(data))))


def test_what_used_to_escape_or_be_refused():
    # A negative base-256 size was an OverflowError, a pax size that is no number a
    # ValueError: both are read errors now.
    archive = tar_archives.build(tarfile.GNU_FORMAT, [("file", "a.jpg", b"1" * 700, b"0", "")])
    tar_archives.rewrite(archive, 0, 124, b"\xff" * 12)
    with pytest.raises(tarfile.ReadError, match="negative size"):
        list(members(io.BytesIO(bytes(archive.data))))
    archive = tar_archives.build(tarfile.PAX_FORMAT,
                                 [("file", "a.jpg", b"1" * 700, b"0", "bad size")])
    with pytest.raises(tarfile.ReadError, match="size '12 bytes' is not a number"):
        list(members(io.BytesIO(bytes(archive.data))))
    # A checksum of signed bytes, which tarfile accepts, was refused.
    archive = tar_archives.build(tarfile.USTAR_FORMAT, [("file", "é.jpg", b"1", b"0", "")])
    archive.data[148:156] = b"%06o\0 " % tar_archives.signed_checksum(bytes(archive.data[:512]))
    assert list(members(io.BytesIO(bytes(archive.data)))) == [("é.jpg", b"1")]
