"""trainer.data.jpeg_decode: a JPEG straight to a uint8 tensor, the same pixels as Pillow."""

import io

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
