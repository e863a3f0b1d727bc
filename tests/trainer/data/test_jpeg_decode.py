"""trainer.data.jpeg_decode: a JPEG straight to a uint8 tensor, the same pixels as Pillow."""

import io
import random
import sys

import numpy
import pytest
import torch
from PIL import Image

from trainer.data import jpeg_decode


def jpeg(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


def photo_like(width: int, height: int) -> Image.Image:
    """Smooth shapes plus noise, subsampled chroma (Pillow's default 4:2:0): what the decoder's
    upsampling and IDCT see in a photograph."""
    y, x = torch.meshgrid(torch.arange(height, dtype=torch.float32),
                          torch.arange(width, dtype=torch.float32), indexing="ij")
    noise = torch.rand((3, height, width), generator=torch.Generator().manual_seed(0))
    channels = torch.stack([x / width, y / height, (x * y).sin() / 2 + 0.5]) * 200 + noise * 55
    return Image.fromarray(channels.permute(1, 2, 0).to(torch.uint8).numpy(), "RGB")


def test_the_pinned_torchvision_decodes():
    # Without it every JPEG would take Pillow's slower path, and nothing else would say so.
    assert jpeg_decode.available()


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_the_pixels_are_pillows(mode):
    # Both are libjpeg-turbo with its defaults (the accurate integer IDCT, smooth chroma
    # upsampling), whose every build computes the same integers: equal, not close.
    data = jpeg(photo_like(301, 203).convert(mode), quality=85)
    expected = torch.from_numpy(numpy.array(Image.open(io.BytesIO(data)).convert("RGB")))
    decoded = jpeg_decode.decoded(data)
    assert decoded.dtype == torch.uint8 and decoded.shape == (3, 203, 301)
    assert torch.equal(decoded, expected.permute(2, 0, 1))


@pytest.mark.parametrize("data", [b"", b"\xff\xd8\xff", b"not a jpeg at all"])
def test_what_is_not_a_whole_jpeg_is_an_os_error(data):
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.decoded(data)


def test_a_truncated_jpeg_is_an_os_error_not_a_grey_image():
    data = jpeg(photo_like(200, 150))
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.decoded(data[:len(data) // 2])


def test_simplejpeg_decodes_here_and_the_start_up_line_says_so():
    # Pinned in the dev lock (as in the pjrt image's): without it the decode falls back to
    # torchvision's, about 1.2x the CPU per image (bench/decode_pairs.py), without an error.
    assert jpeg_decode.decoder() == "simplejpeg"
    assert jpeg_decode.described().startswith("JPEGs decoded by simplejpeg 1.")


def test_without_simplejpeg_torchvision_decodes_and_images_still_come_out(monkeypatch):
    # The xrt image (Python 3.7) has no simplejpeg: its import fails, nothing else does.
    from trainer.data import images

    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # import simplejpeg: ImportError
    for cached in (jpeg_decode.decoder, jpeg_decode._simplejpeg):
        cached.cache_clear()
    try:
        data = jpeg(photo_like(301, 203), quality=85)
        assert jpeg_decode.decoder() == "torchvision"
        assert jpeg_decode.described() == "JPEGs decoded by torchvision"
        assert jpeg_decode.header(data) is None
        image = images.train_image(data, 64, random.Random(0))
        assert image.shape == (3, 64, 64) and image.dtype == torch.uint8
    finally:
        monkeypatch.undo()
        for cached in (jpeg_decode.decoder, jpeg_decode._simplejpeg):
            cached.cache_clear()
    assert jpeg_decode.decoder() == "simplejpeg"


@pytest.mark.parametrize("mode, kind, expected", [
    ("RGB", "JPEG", (301, 203)), ("L", "JPEG", (301, 203)),
    ("CMYK", "JPEG", None), ("RGB", "PNG", None)])
def test_the_header_sizes_what_simplejpeg_decodes_to_rgb_and_leaves_the_rest(mode, kind,
                                                                           expected):
    buffer = io.BytesIO()
    photo_like(301, 203).convert(mode).save(buffer, kind)
    assert jpeg_decode.header(buffer.getvalue()) == expected


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_the_scaled_decode_has_pillows_draft_size_and_its_pixels_with_the_accurate_idct(
        mode, monkeypatch):
    data = jpeg(photo_like(301, 203).convert(mode), quality=85)
    for divisor in (1, 2, 4, 8):
        image = Image.open(io.BytesIO(data))
        image.draft("RGB", (301 // divisor, 203 // divisor))
        assert jpeg_decode.scaled(data, 301, 203, divisor).shape == (
            3, image.size[1], image.size[0])
    monkeypatch.setattr(jpeg_decode, "FAST_DCT", False)
    expected = torch.from_numpy(numpy.array(Image.open(io.BytesIO(data)).convert("RGB")))
    assert torch.equal(jpeg_decode.scaled(data, 301, 203, 1), expected.permute(2, 0, 1))


@pytest.mark.parametrize("data", [b"", b"\xff\xd8\xff", b"not a jpeg at all"])
def test_what_simplejpeg_cannot_decode_is_an_os_error(data):
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.scaled(data, 16, 16, 1)


def test_a_jpeg_cut_short_is_an_os_error_not_grey_rows():
    data = jpeg(photo_like(301, 203), quality=85)
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.scaled(data[:len(data) // 2], 301, 203, 1)
