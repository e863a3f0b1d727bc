"""trainer.data.jpeg_limits: a JPEG's frame and scans read from its markers, and the files a
worker refuses before any decoder runs: too many scans, more decoder memory than its budget.
The limits admit ImageNet's largest photographs (near 100 megapixels)."""

import io
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from trainer.data import images, jpeg_limits

SOF_SIZE_OFFSET = 5  # after the marker: length (2), precision (1), then height and width


def encoded(mode="RGB", size=(64, 48), **options):
    buffer = io.BytesIO()
    Image.new(mode, size, (10, 20, 30) if mode == "RGB" else 40).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def with_frame_size(data, width, height):
    """``data`` with its frame header claiming ``width x height`` (its scans unchanged)."""
    data = bytearray(data)
    frame = next(at for at in range(len(data) - 1)
                 if data[at] == 0xFF and data[at + 1] in (0xC0, 0xC2))
    data[frame + SOF_SIZE_OFFSET:frame + SOF_SIZE_OFFSET + 4] = (
        height.to_bytes(2, "big") + width.to_bytes(2, "big"))
    return bytes(data)


@pytest.mark.parametrize("options, progressive, sampling", [
    ({"subsampling": 2}, False, ((2, 2), (1, 1), (1, 1))),
    ({"subsampling": 0, "progressive": True}, True, ((1, 1),) * 3),
    ({"subsampling": 1}, False, ((2, 1), (1, 1), (1, 1)))])
def test_the_frame_is_read_from_the_markers(options, progressive, sampling):
    found = jpeg_limits.layout(encoded(**options))
    assert (found.width, found.height, found.precision) == (64, 48, 8)
    assert (found.progressive, found.sampling) == (progressive, sampling)
    assert (found.scans > 1) == progressive and found.scans >= 1
    assert jpeg_limits.problem(found) is None


def test_what_is_not_a_jpeg_has_no_layout():
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "PNG")
    for data in (buffer.getvalue(), b"", b"\xff\xd8", encoded()[:20]):
        assert jpeg_limits.layout(data) is None


def test_an_exif_thumbnails_scan_is_not_counted():
    thumbnail = encoded(size=(16, 16))
    exif = Image.Exif()
    exif[0x010E] = "x"
    data = bytearray(encoded())
    # An APP1 segment holding a whole JPEG (as a camera's thumbnail) right after SOI.
    payload = b"Exif\x00\x00" + bytes(exif.tobytes()) + thumbnail
    data[2:2] = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    assert jpeg_limits.layout(bytes(data)).scans == 1


def test_a_scan_bomb_is_refused_before_any_decode():
    """883 scans of a valid 158 KB progressive file took 14 s in every decoder; a file whose
    markers show more than MAX_SCANS is damaged, decided from its markers."""
    data = encoded(progressive=True, size=(256, 256))
    first_scan = data.index(b"\xff\xda")
    scan = data[first_scan:data.index(b"\xff\xd9", first_scan)]
    bomb = data[:-2] + scan * 120 + b"\xff\xd9"  # the first scans again: decoders would redo
    found = jpeg_limits.layout(bomb)
    assert found.scans > jpeg_limits.MAX_SCANS
    assert "scans, more than the 100 a worker decodes" in jpeg_limits.problem(found)
    with pytest.raises(images.DamagedImage, match="scans, more than the 100"):
        images.eval_image(bomb, 32, "bomb.jpg")


def test_a_progressive_memory_bomb_is_refused_and_imagenets_largest_are_not():
    """A 781 KB DC-only progressive 20000 x 20000 file took 774 MB in one worker."""
    small = encoded(progressive=True, subsampling=2)
    bomb = with_frame_size(small, 20000, 20000)
    assert "needs 1144 MiB to decode" in jpeg_limits.problem(jpeg_limits.layout(bomb))
    with pytest.raises(images.DamagedImage, match="more than the 512 MiB a worker allows"):
        images.train_image(bomb, 32, random.Random(0), "bomb.jpg")
    # ImageNet-1k's largest photographs are near 100 megapixels: progressive 4:2:0 at that
    # size takes 286 MiB, baseline no coefficient buffer at all.
    for data in (with_frame_size(small, 12000, 8000),
                 with_frame_size(encoded(subsampling=0), 12000, 8000)):
        assert jpeg_limits.problem(jpeg_limits.layout(data)) is None


@given(st.binary(max_size=64), st.integers(0, 200))
def test_any_bytes_give_a_layout_or_none_never_an_error(tail, cut):
    data = encoded()[:cut] + tail
    found = jpeg_limits.layout(data)
    assert found is None or isinstance(jpeg_limits.problem(found), (str, type(None)))
