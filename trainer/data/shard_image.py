"""What ``make_shards`` stores of one source image: a plain JPEG or a PNG, whatever the source's
format, so that every reader decodes it, whatever its Pillow was built with, by the fast path
it has for JPEG (a reduced-size decode, or torchvision's decoder into a tensor).

- A JPEG in one of the three codings every decoder reads (baseline, extended or progressive
  Huffman, 8 bits) and a PNG of 8-bit channels: kept byte for byte.
- An MPO (what phones and cameras write: a JPEG followed by more images, described in an APP2
  ``MPF`` segment): its first image, byte for byte, without that segment: a plain JPEG.
- Lossy formats (WebP, JPEG 2000, AVIF, HEIF, and JPEGs in the other codings): JPEG at quality
  95 with full colour resolution. Their pixels were approximations already; as PNG they would
  take about 3x the bytes of that JPEG and decode 2x slower.
- Everything else Pillow reads (GIF, TIFF, BMP, 16-bit PNG ...): PNG, losslessly.

A converted image is its first frame, as a reader would have decoded it; more than 8 bits per
channel are scaled to 8 (the reader's conversion to RGB would clip them).

With ``max_side`` (``make_shards --max_shorter_side=N``, formerly ``--max_side``) an image
whose shorter side is longer than N is scaled down to N on that side (Pillow's antialiased
bicubic filter, after a reduced-size JPEG decode that keeps at least twice the target's pixels
each way) and stored as the rule above says for a converted image, but a lossy source as JPEG
at quality 90 with colour at half resolution (``SCALED_JPEG``), else PNG. Smaller images are
stored as they came.
"""

from __future__ import annotations

import io
from typing import NamedTuple, Optional

from trainer.data import images, jpeg_limits

LOSSY_FORMATS = ("JPEG", "MPO", "WEBP", "JPEG2000", "AVIF", "HEIF")
JPEG_QUALITY = 95
# A lossy image scaled down (--max_shorter_side): what the decode costs matters more than the last
# detail, so it is coded as most photographs are: quality 90, colour at half resolution (4:2:0).
# On tests/photos.py's photographs this decodes 2.9x as fast as quality 95 at full colour
# resolution, in 0.6x the bytes.
SCALED_JPEG = {"quality": 90, "subsampling": 2}
# Modes the reader turns into RGB exactly as it would any other: 8-bit channels.
EIGHT_BIT_MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "CMYK")
# Start-of-frame markers of the codings every JPEG decoder reads: baseline, extended and
# progressive, Huffman-coded (not lossless, hierarchical or arithmetic-coded).
PLAIN_FRAMES = (0xC0, 0xC1, 0xC2)


class Stored(NamedTuple):
    extension: str  # "jpg" or "png"
    data: bytes
    source_format: str  # what Pillow called the source


def stored(data: bytes, max_side: int = 0) -> Optional[Stored]:
    """What to store for the image file ``data`` (its shorter side at most ``max_side`` px,
    when set); None when it does not decode (at the smallest draft size, which still reads
    every byte of a JPEG's compressed data)."""
    try:
        image = images.open_image(data)
        source_format = image.format or "unknown"
        if max_side and min(image.size) > max_side:
            converted = _converted(_scaled_down(image, max_side), source_format, SCALED_JPEG)
            return Stored(converted[0], converted[1], source_format) if _decodes(
                converted[1]) else None
        kept = _kept_bytes(data, image)
        if kept is not None and _decodes(kept[1]):
            return Stored(kept[0], kept[1], source_format)
        image.load()  # what the kept bytes lack (an MPO's first image cut wrong) is converted
        converted = _converted(image, source_format)
        return Stored(converted[0], converted[1], source_format) if _decodes(
            converted[1]) else None
    except Exception:  # Pillow raises many types for broken files; each means "skip it"
        return None


def _kept_bytes(data: bytes, image) -> Optional[tuple]:
    """("jpg" or "png", the bytes to store) when the source's own bytes (or an MPO's first
    image) are a plain JPEG or 8-bit PNG; None when the image must be converted."""
    if image.format == "PNG" and image.mode in EIGHT_BIT_MODES:
        return "png", data
    if image.format == "MPO":
        try:
            data = _without_mpf(data[:image.mpinfo[0xB002][0]["Size"]])
        except (KeyError, IndexError, TypeError):  # no usable size: converted instead
            return None
    if image.format in ("JPEG", "MPO") and image.mode in ("L", "RGB", "CMYK") and (
            jpeg_frame(data) in [(marker, 8) for marker in PLAIN_FRAMES]):
        return "jpg", data
    return None


def _converted(image, source_format: str, jpeg_options: Optional[dict] = None) -> tuple:
    """("jpg" or "png", bytes) of the decoded ``image`` (see the module's docstring); a JPEG
    at quality 95 with full colour resolution unless ``jpeg_options`` say otherwise."""
    if image.mode not in EIGHT_BIT_MODES:
        image = _eight_bit(image)
    buffer = io.BytesIO()
    if source_format in LOSSY_FORMATS:
        image.convert("L" if image.mode in ("1", "L", "LA") else "RGB").save(
            buffer, "JPEG", **(jpeg_options or {"quality": JPEG_QUALITY, "subsampling": 0}))
        return "jpg", buffer.getvalue()
    if image.mode in ("CMYK", "PA"):  # PNG has no CMYK; Pillow writes no PA
        image = image.convert("RGBA" if image.mode == "PA" else "RGB")
    image.save(buffer, "PNG")
    return "png", buffer.getvalue()


def scaled_size(width: int, height: int, max_side: int) -> tuple:
    """(width, height) of a ``width x height`` image scaled so that its shorter side is
    ``max_side`` (the longer one rounded, at least 1)."""
    scale = max_side / min(width, height)
    return ((max_side, max(1, int(round(height * scale)))) if width <= height
            else (max(1, int(round(width * scale))), max_side))


def _scaled_down(image, max_side: int):
    """The first frame of ``image`` scaled down to ``scaled_size``, in a mode of 8-bit
    channels."""
    from PIL import Image

    target = scaled_size(image.size[0], image.size[1], max_side)
    # libjpeg's reduced decode (1/2, 1/4, 1/8) down to twice the target: the filter below
    # then still sees enough pixels to antialias as from the full image.
    image.draft(image.mode if image.mode in ("L", "RGB") else None,
                (2 * target[0], 2 * target[1]))
    if image.mode not in EIGHT_BIT_MODES:
        image = _eight_bit(image)
    elif image.mode in ("1", "P", "PA"):
        image = image.convert("RGBA" if image.mode == "PA" or "transparency" in image.info
                              else "RGB")
    return image.resize(target, Image.BICUBIC, reducing_gap=None)


def _eight_bit(image):
    """``image`` in a mode of 8-bit channels: grayscale of 16 bits (``I;16``) scaled by
    255/65535, of 32-bit integers or floats by 255 over its largest value; other modes (a
    YCbCr or LAB TIFF ...) converted to RGB by Pillow."""
    import numpy
    from PIL import Image

    if not (image.mode.startswith("I") or image.mode == "F"):
        return image.convert("RGB")
    values = numpy.asarray(image, dtype=numpy.float64)
    top = 65535.0 if image.mode.startswith("I;16") else max(float(values.max()), 1.0)
    scaled = numpy.clip(numpy.round(values * (255.0 / top)), 0, 255).astype(numpy.uint8)
    return Image.fromarray(scaled)  # 2-D uint8: mode L


def _decodes(data: bytes) -> bool:
    """Whether every byte of ``data`` decodes as the trainers' workers will decode it: strictly
    and within their limits (``images.verify``)."""
    try:
        images.verify(data)
    except images.DamagedImage:
        return False
    return True


def jpeg_frame(data: bytes) -> Optional[tuple]:
    """(start-of-frame marker, sample precision in bits) of a JPEG's frame header, or None
    when the segments before it are not well formed."""
    segments = jpeg_limits.segments(data)
    for marker, start, end in segments:
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and end > start:
            return marker, data[start]
    return None


def _without_mpf(data: bytes) -> bytes:
    """A JPEG without its APP2 ``MPF`` segment (which says more images follow)."""
    for marker, start, end in jpeg_limits.segments(data):
        if marker == 0xE2 and data[start:start + 4] == b"MPF\0":
            return data[:start - 4] + data[end:]
    return data
