"""Damage done to a real checkpoint file, as a flaky disk or a bad copy does it."""

import zipfile


def overwrite_inside_tensor(path, tensor_index=0, size=4096):
    """Overwrite ``size`` bytes with 0xFF in the middle of the ``tensor_index``-th largest
    tensor's bytes of the checkpoint at ``path`` (stored uncompressed in the archive), as a
    flaky disk or a bad copy would; returns that record's name."""
    with zipfile.ZipFile(str(path)) as archive:
        records = sorted((info for info in archive.infolist() if "/data/" in info.filename),
                         key=lambda info: -info.file_size)
        record = records[tensor_index]
        assert record.compress_type == zipfile.ZIP_STORED and record.file_size > 2 * size
    with open(str(path), "r+b") as stream:
        stream.seek(record.header_offset + 26)
        name_length = int.from_bytes(stream.read(2), "little")
        extra_length = int.from_bytes(stream.read(2), "little")
        start = record.header_offset + 30 + name_length + extra_length
        stream.seek(start + record.file_size // 2 - size // 2)
        stream.write(b"\xff" * size)
    return record.filename
