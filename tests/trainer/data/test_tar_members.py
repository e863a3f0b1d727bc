"""trainer.data.tar_members: shards written and streamed with the standard library."""

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.data.tar_members import members, read_samples, tar_bytes


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


def test_extension_is_what_follows_the_first_dot_of_the_base_name():
    data = tar_bytes([("dir/a.seg.png", b"1"), ("dir/a.CLS", b"2"), ("b.jpg", b"3")])
    assert list(read_samples(io.BytesIO(data))) == [("a", {"seg.png": b"1", "cls": b"2"}),
                                                    ("b", {"jpg": b"3"})]


def archive(format_: int, entries) -> bytes:
    """A tar archive written by the standard library in ``format_``: ``(name, data)`` files,
    ``(name, None)`` directories, ``(name, "->target")`` symbolic links."""
    import tarfile

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
    import tarfile

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
    import tarfile

    data = tar_bytes([("a.jpg", b"1" * 2000), ("a.cls", b"2")])
    with pytest.raises(tarfile.ReadError):
        list(read_samples(io.BytesIO(data[:cut])))


def test_a_damaged_header_is_a_read_error():
    import tarfile

    data = bytearray(tar_bytes([("a.jpg", b"1" * 2000)]))
    data[10] ^= 0x20  # one bit of the name: the checksum no longer matches
    with pytest.raises(tarfile.ReadError, match="checksum"):
        list(read_samples(io.BytesIO(bytes(data))))
