"""trainer.data.shard_image: what make_shards stores of one image (whole-tree cases with real
photographs: tests/trainer/data/test_make_shards.py)."""

import io

import numpy
import pytest
from PIL import Image

from trainer.data import shard_image


def encoded(image, kind, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


PICTURE = Image.radial_gradient("L").resize((96, 64)).convert("RGB")


@pytest.mark.parametrize("options, frame", [({}, (0xC0, 8)), ({"progressive": True}, (0xC2, 8))])
def test_plain_jpegs_are_kept_byte_for_byte(options, frame):
    data = encoded(PICTURE, "JPEG", **options)
    assert shard_image.jpeg_frame(data) == frame
    assert shard_image.stored(data) == ("jpg", data, "JPEG")


def test_an_mpo_is_its_first_image_as_a_plain_jpeg():
    data = encoded(PICTURE, "MPO", save_all=True, append_images=[PICTURE.rotate(90)])
    stored = shard_image.stored(data)
    first = Image.open(io.BytesIO(stored.data))
    assert stored.extension == "jpg" and stored.source_format == "MPO"
    # No MPF segment left to say more images follow: Pillow and every decoder see a JPEG.
    assert first.format == "JPEG" and b"MPF\0" not in stored.data
    # Byte for byte but that segment (Pillow writes it after the 20 bytes of JFIF's APP0),
    # up to the end of the first image.
    assert data.startswith(stored.data[:20]) and stored.data[20:] in data
    end = data.index(stored.data[20:]) + len(stored.data) - 20
    assert end == Image.open(io.BytesIO(data)).mpinfo[0xB002][0]["Size"] < len(data)
    assert numpy.array_equal(numpy.asarray(first), numpy.asarray(Image.open(io.BytesIO(data))))


def test_deep_images_are_scaled_to_8_bits_not_clipped():
    # Pillow's own conversion to RGB clips a 16-bit value at 255: all but black turns white.
    values = numpy.linspace(0, 1, 96 * 64).reshape(64, 96)
    for image, top in ((Image.fromarray((values * 65535).astype(numpy.uint16)), 65535),
                       (Image.fromarray((values * 40.0).astype(numpy.float32)), 40.0)):
        stored = shard_image.stored(encoded(image, "TIFF"))
        assert stored.extension == "png" and stored.source_format == "TIFF"
        expected = numpy.round(numpy.asarray(image, dtype=numpy.float64) * 255 / top)
        assert numpy.array_equal(numpy.asarray(Image.open(io.BytesIO(stored.data))), expected)


@pytest.mark.parametrize("data", [b"", b"\xff\xd8\xff\xe0 not a JPEG", b"GIF89a"])
def test_what_does_not_decode_is_not_stored(data):
    assert shard_image.stored(data) is None
    assert shard_image.jpeg_frame(data) is None
