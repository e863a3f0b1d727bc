"""One image from its file's bytes to a ``3 x size x size`` uint8 tensor, as cheaply as the
host can: the float conversion and normalization happen on the device (``normalize``), so
the host copies 1 byte per value instead of 4.

Training takes torchvision's ``RandomResizedCrop`` (scale 0.08-1, aspect 3/4-4/3) and a
horizontal flip; evaluation resizes the shorter side to ``size * 256 / 224`` and takes the
centre (the usual 256/224). Both decode a JPEG at a reduced size where the crop allows it
(libjpeg scales by 1/2, 1/4 or 1/8 while decoding: far fewer pixels to decode), and crop and
resize in one resample (``resample``). A plain JPEG takes the fastest decoder here
(``jpeg_decode.decoder()``): simplejpeg's header and (reduced) decode where it is installed,
without Pillow; else Pillow's header and reduced decode, and torchvision's full-size decode
straight into a tensor. Grayscale, CMYK and palette images become RGB; any format Pillow
reads is accepted whatever the file's name says.

An image that does not decode is a ``DamagedImage`` naming it and why (the stream skips and
counts it: ``trainer.data.damage``): whatever a decoder raises on bad bytes, libjpeg's warnings
(the strict decoders'), and a file over a worker's limits (``jpeg_limits``: scans, decoder
memory; Pillow's pixel limit). A JPEG the strict decoders call damaged is never handed to
Pillow, which ignores libjpeg's warnings and would return made-up pixels.
"""

from __future__ import annotations

import contextlib
import io
import math
import random
import struct
import warnings
import zlib
from typing import Any, Iterator, NamedTuple, Tuple

import torch

from trainer.data import jpeg_decode, jpeg_limits
from trainer.data.resample import (
    Box,
    crop_resized,
    pixel_box,
    resized,
    tensor_crop_resized,
    torch_resamples_uint8,
)
from trainer.errors import DataError

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
# Pillow's pixel limit, from a worker's decode budget (``jpeg_limits.DECODE_BUDGET``): Pillow
# holds 4 bytes a pixel and refuses past twice this ("decompression bomb", a damaged image
# here), so a decode it runs stays within the budget: 134 million pixels (ImageNet has some
# near 100 million; Pillow's own default refuses past 179 million). Between this and twice it
# Pillow only warns, which is not printed: the image is within the budget.
MAX_PIXELS = jpeg_limits.DECODE_BUDGET // 8
# What decoders raise on bad bytes: Pillow's own errors (SyntaxError, struct.error, EOFError,
# DecompressionBombError among them), and the IndexError, KeyError, OverflowError and
# ZeroDivisionError of their header parsing (simplejpeg raised KeyError: 6 for a valid 4:4:1
# file, a traceback that ended the run). RuntimeError and TypeError are left out: from here
# they would be a bug, never a file's fault.
DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, struct.error, KeyError,
                 IndexError, OverflowError, ZeroDivisionError, MemoryError)


class DamagedImage(DataError):
    """An image that does not decode, or is over a worker's limits: ``name`` and ``reason``."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__("cannot decode {}: {}".format(name, reason),
                         "replace or remove the file; or, in a shard, write the shards again "
                         "with python -m trainer.data.make_shards, which decodes every image "
                         "it stores and skips those that do not decode")
        self.name, self.reason = name, reason


def open_image(data: bytes):
    """The image in ``data`` (not decoded yet); OSError or ValueError if it is not one."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return Image.open(io.BytesIO(data))


def draws(seed: int, epoch: int, key) -> random.Random:
    """The augmentation's random draws for one example (``key``: its name or index): the
    same for the same seed, epoch and example, whichever worker process decodes it (a
    string's ``hash`` changes per process, a CRC does not)."""
    return random.Random(zlib.crc32("{}/{}/{}".format(seed, epoch, key).encode()))


def crop_box(width: int, height: int, rng: random.Random) -> Box:
    """A random crop as torchvision's ``RandomResizedCrop`` draws it: an area fraction in
    ``SCALE`` and a log-uniform aspect in ``RATIO`` (10 tries), else the centre at the nearest
    allowed aspect."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    aspect = width / height
    if aspect < RATIO[0]:
        w, h = width, int(round(width / RATIO[0]))
    elif aspect > RATIO[1]:
        w, h = int(round(height * RATIO[1])), height
    else:
        w, h = width, height
    left, top = (width - w) // 2, (height - h) // 2
    return left, top, left + w, top + h


def least_shorter_side(size: int) -> int:
    """The shorter side an image needs so that a ``size`` px run never upsamples the
    evaluation's centre crop (``centre_box``: ``size * 224 / 256`` of the shorter side) nor a
    full-image training crop: ``ceil(size * 256 / 224)``, 256 px at 224."""
    return -(-size * 256 // 224)


def centre_box(width: int, height: int, size: int) -> Box:
    """The region of the original image that resize-shorter-side-to ``size * 256 / 224``
    then centre-crop ``size`` keeps."""
    side = min(width, height) * 224 / 256
    left, top = (width - side) / 2, (height - side) / 2
    return left, top, left + side, top + side


def train_image(data: bytes, size: int, rng: random.Random, name: str = "an image"
                ) -> torch.Tensor:
    """A random crop of the image in ``data`` resized to ``size`` and flipped half the time:
    uint8, ``3 x size x size``. A DataError names ``name`` if it does not decode."""
    with _decoding(name):
        opened = _opened(data)
        box = crop_box(opened.width, opened.height, rng)
        flip = rng.random() < 0.5
        return _crop_resized(data, opened, box, size, flip)


def eval_image(data: bytes, size: int, name: str = "an image") -> torch.Tensor:
    """The centre of the image in ``data`` (256/224 resize and crop): uint8, ``3 x size x
    size``. A DataError names ``name`` if it does not decode."""
    with _decoding(name):
        opened = _opened(data)
        return _crop_resized(data, opened, centre_box(opened.width, opened.height, size), size,
                             False)


@contextlib.contextmanager
def _decoding(name: str) -> Iterator[None]:
    """Turns what a decoder raises for data that is not a whole, usable image into a
    ``DamagedImage`` naming it."""
    from PIL import Image

    try:
        yield
    except DECODE_ERRORS + (Image.DecompressionBombError,) as error:
        # Pillow names what it could not identify by the repr of the BytesIO it was given.
        if isinstance(error, Image.UnidentifiedImageError):
            reason = "not an image file Pillow reads"
        else:
            reason = (str(error).splitlines() or [""])[0] or type(error).__name__
            if isinstance(error, (KeyError, IndexError, OverflowError, ZeroDivisionError)):
                reason = "{}: {}".format(type(error).__name__, reason)
        raise DamagedImage(name, reason)


def verify(data: bytes, name: str = "an image") -> None:
    """All of the image in ``data`` decoded at its smallest scale, by the strictest decoder
    here (``make_shards`` checks what it stores so): a ``DamagedImage`` if any of it is
    damaged or over a worker's limits. A crop finds the same damage where the region decoder
    reads every file to its end (``jpeg_decode.CHECK_TO_END``); this is the whole check for
    every decoder."""
    with _decoding(name):
        opened = _opened(data)
        if opened.image is None:
            jpeg_decode.scaled(data, opened.width, opened.height, 8)
        else:
            opened.image.draft("RGB", (64, 64))
            opened.image.load()


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``N x 3 x H x W`` images to float32 normalized with ImageNet's mean and std,
    where they are (on the device). Python numbers only: the compiled path traces this."""
    images = images.float()
    return torch.cat([(images[:, c:c + 1] - 255 * MEAN[c]) * (1 / (255 * STD[c]))
                      for c in range(3)], dim=1)


def draft_size(width: int, height: int, box: Box, size: int) -> Tuple[int, int]:
    """The smallest decoded size of a ``width x height`` image at which ``box`` still has at
    least ``size x size`` pixels (what ``Image.draft`` is asked for: libjpeg then decodes at
    the smallest of 1/8, 1/4, 1/2, 1 that is at least that)."""
    crop_w, crop_h = box[2] - box[0], box[3] - box[1]
    return math.ceil(width * size / crop_w), math.ceil(height * size / crop_h)


def reduction(width: int, height: int, box: Box, size: int) -> int:
    """The DCT scale (1/1, 1/2, 1/4 or 1/8 each way) Pillow's ``draft`` picks for ``box`` of a
    ``width x height`` JPEG and a ``size`` output: the smallest at which the box keeps at least
    ``size`` pixels each way (``draft_size``); as a divisor."""
    least = draft_size(width, height, box, size)
    most = min(width // least[0], height // least[1])
    return next((divisor for divisor in (8, 4, 2) if most >= divisor), 1)


class _Opened(NamedTuple):
    """An image's size, and the image opened by Pillow, None where simplejpeg's header was
    read instead (a fraction of Pillow's ``open``); ``sampling``: a JPEG's components' (h, v)
    (``jpeg_limits.Layout``), empty where its markers were not read."""

    width: int
    height: int
    image: Any
    sampling: Tuple[Tuple[int, int], ...]


def _opened(data: bytes) -> _Opened:
    """The image in ``data`` opened; a JPEG over a worker's limits (``jpeg_limits``) is
    refused first (OSError)."""
    found = jpeg_limits.layout(data)
    if found is not None:
        reason = jpeg_limits.problem(found)
        if reason is not None:
            raise OSError(reason)
    sampling = found.sampling if found is not None else ()
    simple = jpeg_decode.header(data)
    # Past Pillow's refusal (twice MAX_PIXELS), Pillow opens it: its DecompressionBombError is
    # a damaged image, where a decode would take gigabytes in every worker.
    if (simple is not None and simple[0] * simple[1] <= 2 * MAX_PIXELS
            and torch_resamples_uint8()):
        return _Opened(simple[0], simple[1], None, sampling)
    image = open_image(data)
    return _Opened(image.size[0], image.size[1], image, sampling)


def _crop_resized(data: bytes, opened: _Opened, box: Box, size: int, flip: bool
                  ) -> torch.Tensor:
    """``box`` resized to ``size`` (mirrored if ``flip``) of the image ``opened`` from
    ``data``."""
    width, height, image = opened.width, opened.height, opened.image
    if image is None:
        divisor = reduction(width, height, box, size)
        # The decoded size libjpeg gives at 1/divisor (rounded up), and the box there in
        # whole pixels, taken before the decode: only that region need be decoded.
        scaled_width, scaled_height = -(-width // divisor), -(-height // divisor)
        sx, sy = scaled_width / width, scaled_height / height
        left, top, right, bottom = pixel_box((box[0] * sx, box[1] * sy, box[2] * sx,
                                              box[3] * sy), scaled_width, scaled_height)
        # Strict: what libjpeg-turbo refuses or warns of is damage (OSError), never handed
        # to Pillow, which ignores libjpeg's warnings and returns made-up pixels.
        block = jpeg_decode.region(data, width, height, divisor, (left, top, right, bottom),
                                   flip, opened.sampling)
        return resized(block, size)
    image.draft("RGB", draft_size(width, height, box, size))
    if image.size == (width, height) and _decodes_to_tensor(image):
        return tensor_crop_resized(jpeg_decode.decoded(data), box, size, flip)
    sx, sy = image.size[0] / width, image.size[1] / height
    return crop_resized(image, (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy), size, flip)


def _decodes_to_tensor(image) -> bool:
    """Whether torchvision decodes this image at full size (the same pixels as Pillow, sooner):
    a plain RGB or grayscale JPEG (or an MPO's first image), where torch resizes uint8 and
    torchvision decodes."""
    return (image.format in ("JPEG", "MPO") and image.mode in ("RGB", "L")
            and torch_resamples_uint8() and jpeg_decode.available())
