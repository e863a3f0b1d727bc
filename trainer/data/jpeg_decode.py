"""JPEG bytes straight to uint8 pixels, by the fastest decoder this environment has (all
wrap libjpeg-turbo):

- ``_jpeg_region`` with simplejpeg's header (the pjrt image and the dev environment, where
  ``imagebuild/jpeg_region.py`` built it): only the region a crop needs is decoded
  (``region``): libjpeg-turbo's ``jpeg_crop_scanline`` and ``jpeg_skip_scanlines``, so the rows
  above it are entropy-decoded only and the rows below it not at all; the same pixels as a
  full decode, at the same DCT scale and IDCT.
- ``simplejpeg`` (where the extension is not built): the header alone without Pillow,
  a decode at a reduced DCT scale (1/2, 1/4, 1/8) as Pillow's ``draft``, into a numpy array
  that torch takes without a copy; with libjpeg-turbo's fast integer IDCT (``FAST_DCT``).
- ``torchvision`` (where simplejpeg is absent: the xrt image, Python 3.7): the full-size decode
  straight into a tensor; ``images`` takes Pillow where the crop allows a reduced decode.
- ``Pillow`` alone where neither decodes (``images`` then never calls this module's decodes).

Pillow decodes to 4 bytes per pixel and a tensor needs a copy out of it (about a third of the
decode's time again); the others write the 3 bytes per pixel once. ``decoder()`` names the
one that runs (the trainer's start-up line says it).
"""

from __future__ import annotations

import functools
import io
from typing import Optional, Sequence, Tuple

import torch

from trainer.data.resample import box_rows

# libjpeg-turbo's fast integer IDCT (JDCT_IFAST, TensorFlow's default for decode_jpeg) instead
# of the accurate one: about 10 % of the decode, at most a few levels on a pixel and under one
# on average before the resize averages further (tests/trainer/data/test_images.py's bound).
# The chroma upsampling stays the smooth one (the fast one differs by tens of levels at edges).
FAST_DCT = True
# What simplejpeg's header calls a JPEG it decodes to RGB as Pillow does (CMYK and YCCK are
# left to Pillow, which inverts Adobe's CMYK as the other readers expect).
RGB_SPACES = ("YCbCr", "Gray", "RGB")


@functools.lru_cache(maxsize=None)
def decoder() -> str:
    """The decoder plain JPEGs take here: "region" (``_jpeg_region``, the crop's region
    only), "simplejpeg", "torchvision" or "Pillow"."""
    if _simplejpeg() is not None:
        return "region" if _region_module() is not None else "simplejpeg"
    return "torchvision" if available() else "Pillow"


def described() -> str:
    """What the start-up line says of the decoder (``decoder()``), e.g. "JPEGs decoded by
    libjpeg-turbo 2.1.5, the crop's region only (fast IDCT)"."""
    name = decoder()
    idct = " (fast IDCT)" if FAST_DCT else ""
    if name == "region":
        number = _region_module().LIBJPEG_TURBO_VERSION
        return "JPEGs decoded by libjpeg-turbo {}.{}.{}, the crop's region only{}".format(
            number // 1000000, number // 1000 % 1000, number % 1000, idct)
    if name == "simplejpeg":
        return "JPEGs decoded by simplejpeg {}{}".format(
            getattr(_simplejpeg(), "__version__", "?"), idct)
    return "JPEGs decoded by {}".format(name)


@functools.lru_cache(maxsize=None)
def _region_module():
    """``trainer.data._jpeg_region`` when it is built for this Python, loads and decodes a
    small JPEG's region, else None (not built: a machine without a C compiler or
    libjpeg62-turbo-dev, or the xrt image; then simplejpeg decodes whole images)."""
    try:
        from trainer.data import _jpeg_region

        pixels, x, width = _jpeg_region.decode(_probe(), 1, 4, 4, 8, 7, FAST_DCT, True)
    # Whatever keeps it from decoding the probe (a module built from an older source, with
    # another signature, raises TypeError) leaves simplejpeg to decode, never every image
    # failing.
    except Exception:  # noqa: BLE001
        return None
    return _jpeg_region if x <= 4 and x + width >= 8 and len(pixels) == 3 * width * 3 else None


@functools.lru_cache(maxsize=None)
def _simplejpeg():
    """The simplejpeg module when it imports and decodes a small JPEG, else None (absent on
    Python 3.7: the xrt image keeps torchvision's decoder, without a word)."""
    try:
        import simplejpeg

        pixels = simplejpeg.decode_jpeg(_probe())
    except (ImportError, OSError, ValueError):
        return None
    return simplejpeg if pixels.shape == (16, 16, 3) else None


def _probe() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buffer, "JPEG")
    return buffer.getvalue()


def header(data: bytes) -> Optional[Tuple[int, int]]:
    """(width, height) of the JPEG in ``data`` when simplejpeg runs here and decodes it to RGB
    (``scaled``), else None (no simplejpeg, not a JPEG, CMYK: Pillow opens it)."""
    simplejpeg = _simplejpeg()
    if simplejpeg is None:
        return None
    try:
        height, width, space, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:  # not a JPEG (a PNG ...), or no header libjpeg-turbo reads
        return None
    except (KeyError, IndexError, OverflowError):
        # A header simplejpeg's tables lack: 4:4:1 sampling (what jpegtran -transpose makes of
        # 4:1:1) raised KeyError: 6, a traceback that ended the run. Pillow opens it.
        return None
    return (width, height) if space in RGB_SPACES else None


def scaled(data: bytes, width: int, height: int, reduction: int) -> torch.Tensor:
    """The JPEG in ``data`` (``header``: ``width x height``) decoded by simplejpeg at
    1/``reduction`` (1, 2, 4 or 8) of its size each way, rounded up as libjpeg does: RGB uint8
    ``3 x H x W``, channels last in memory; OSError if it is not a whole JPEG."""
    try:
        pixels = _simplejpeg().decode_jpeg(
            data, fastdct=FAST_DCT, min_height=-(-height // reduction),
            min_width=-(-width // reduction))
    except ValueError as error:  # strict: a cut or corrupt file is an error, not grey rows
        raise OSError("cannot decode the JPEG: {}".format(error))
    return torch.from_numpy(pixels).permute(2, 0, 1)


def region(data: bytes, width: int, height: int, reduction: int, box: Tuple[int, int, int, int],
           mirror: bool, sampling: Sequence[Tuple[int, int]] = ()) -> torch.Tensor:
    """The pixel box ``box`` (left, top, right, bottom) of the JPEG in ``data`` (``header``:
    ``width x height``) decoded at 1/``reduction`` (1, 2, 4 or 8; the box in that scale's
    pixels, inside the image), mirrored left to right if ``mirror``: a contiguous uint8 RGB
    ``h x w x 3`` tensor, the pixels of ``scaled`` (the same libjpeg-turbo decode: 0 levels
    apart, test_jpeg_decode). Where ``_jpeg_region`` is not built, cut out of ``scaled``'s
    whole image. OSError if it is not a whole JPEG. ``sampling``: its components' (h, v)
    (``jpeg_limits.Layout``), for the crops libjpeg-turbo gets wrong (``_crops_exactly``).

    A box outside the scaled image is a caller's bug: a RuntimeError, never a fallback."""
    scaled_width, scaled_height = -(-width // reduction), -(-height // reduction)
    if not (0 <= box[0] < box[2] <= scaled_width and 0 <= box[1] < box[3] <= scaled_height):
        raise RuntimeError("region {} is not inside the {} x {} image at 1/{}".format(
            box, scaled_width, scaled_height, reduction))
    module = _region_module()
    # A file cut short below the box would decode without a word: a file that does not end at
    # its End Of Image marker is decoded whole, strictly (bytes after the marker, which some
    # cameras write, take that path too and decode). Damage inside a file that still ends at
    # its marker is found by reading to the marker (``CHECK_TO_END``: libjpeg-turbo's
    # warning, an error here).
    if (module is None or not data.endswith(b"\xff\xd9")
            or not _crops_exactly(module, sampling, reduction)):
        return box_rows(scaled(data, width, height, reduction).permute(1, 2, 0), box, mirror)
    try:
        pixels, x, width = module.decode(data, reduction, *box, FAST_DCT, CHECK_TO_END)
    except ValueError as error:
        raise OSError("cannot decode the JPEG: {}".format(error))
    rows = torch.frombuffer(pixels, dtype=torch.uint8).view(box[3] - box[1], width, 3)
    return box_rows(rows, (box[0] - x, 0, box[2] - x, box[3] - box[1]), mirror)


# The region decoder reads every file to its End Of Image marker (the rows below the box
# entropy-decoded only): damage that desynchronises the entropy code (a zeroed run, a frame
# whose sampling its scan does not match) raises no error before the end, and the box's
# pixels after it are wrong. 7 to 9 % more CPU per training image, 3 to 4 % per evaluation
# image (bench/damage_checks.py, docs/benchmarks.md); the bench turns it off to measure it.
CHECK_TO_END = True

# The first libjpeg-turbo whose jpeg_crop_scanline decodes 4x2 and 2x4 chroma sampling right at
# 1/2 and 1/4 scale: 2.1.5 returned boxes up to 158 levels off there, from memory its
# upsampler never initialised (valgrind: jinit_upsampler).
CROP_FIXED_VERSION = 3000000


def _crops_exactly(module, sampling: Sequence[Tuple[int, int]], reduction: int) -> bool:
    """Whether ``module``'s libjpeg-turbo decodes a region of a JPEG of ``sampling`` at
    1/``reduction`` as a full decode does; where not, the image is decoded whole."""
    if reduction == 1 or module.LIBJPEG_TURBO_VERSION >= CROP_FIXED_VERSION or not sampling:
        return True
    most = (max(h for h, _ in sampling), max(v for _, v in sampling))
    return most not in ((4, 2), (2, 4))


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether torchvision here decodes JPEGs (its image extension can be missing or fail to
    load, which only a decode shows)."""
    try:
        return decoded(_probe()).shape == (3, 16, 16)
    except (ImportError, OSError):
        return False


def decoded(data: bytes) -> torch.Tensor:
    """The JPEG in ``data`` as RGB (grayscale repeated), by torchvision: uint8 ``3 x H x W``,
    channels last in memory; OSError if it is not a whole JPEG."""
    from torchvision.io import ImageReadMode, decode_jpeg

    try:
        # A bytearray: torch takes only a writable buffer without a warning (and no empty one).
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return decode_jpeg(encoded, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError) as error:
        raise OSError("cannot decode the JPEG: {}".format(error))
