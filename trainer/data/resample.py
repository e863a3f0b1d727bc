"""A region of a decoded image, resized to ``3 x size x size`` uint8 in one antialiased
bilinear resample (and mirrored if asked): what torchvision's ``RandomResizedCrop`` does to a
PIL image, without the float conversion.

Two implementations of the same filter, the fastest this torch has chosen once per process:

- ``by_torch``: torch's vectorized uint8 kernel (``interpolate(antialias=True)`` on uint8,
  torch 2.1 and later; a port of Pillow's filter to AVX2). About 3x faster than Pillow's
  on one core.
- ``by_pillow``: ``Image.resize``, for the XRT image's torch 1.11.

Both take the box rounded to whole pixels of the decoded image, as a crop of its own (the
filter sees nothing outside it, as in torchvision's crop-then-resize).

They agree to within 2 levels (``tests/trainer/data/test_resample.py`` says why).
"""

from __future__ import annotations

import functools
from typing import Tuple

import torch

Box = Tuple[float, float, float, float]  # left, top, right, bottom


def crop_resized(image, box: Box, size: int, flip: bool) -> torch.Tensor:
    """``box`` of the PIL ``image`` resized to ``size x size`` (mirrored left to right if
    ``flip``), RGB whatever the image's mode: uint8, ``3 x size x size``."""
    resample = by_torch if torch_resamples_uint8() else by_pillow
    return resample(image, box, size, flip)


@functools.lru_cache(maxsize=None)
def torch_resamples_uint8() -> bool:
    """Whether this torch resizes uint8 images with antialiasing (2.1 and later)."""
    try:
        tensor_crop_resized(torch.zeros(3, 4, 4, dtype=torch.uint8), (0, 0, 4, 4), 2, False)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def pixel_box(box: Box, width: int, height: int) -> Tuple[int, int, int, int]:
    """``box`` rounded to whole pixels of a ``width x height`` image: inside it, and at least
    one pixel each way (a sliver of a very thin image rounds to nothing otherwise)."""
    left = min(int(round(box[0])), width - 1)
    top = min(int(round(box[1])), height - 1)
    right = min(max(int(round(box[2])), left + 1), width)
    bottom = min(max(int(round(box[3])), top + 1), height)
    return left, top, right, bottom


def by_torch(image, box: Box, size: int, flip: bool) -> torch.Tensor:
    import numpy

    region = _region(image, box)  # cropped by Pillow: only its pixels are copied out
    pixels = torch.from_numpy(numpy.array(region)).permute(2, 0, 1)
    return tensor_crop_resized(pixels, (0, 0) + region.size, size, flip)


def tensor_crop_resized(pixels: torch.Tensor, box: Box, size: int, flip: bool) -> torch.Tensor:
    """``crop_resized`` of a uint8 ``3 x H x W`` tensor, by torch's kernel."""
    region = pixel_box(box, pixels.shape[2], pixels.shape[1])
    return resized(box_rows(pixels.permute(1, 2, 0), region, flip), size)


def box_rows(rows: torch.Tensor, region: Tuple[int, int, int, int], flip: bool) -> torch.Tensor:
    """The pixel box ``region`` (left, top, right, bottom) of a uint8 ``H x W x 3`` tensor,
    copied out (mirrored if ``flip``): a contiguous ``h x w x 3`` tensor, what ``resized``
    takes."""
    left, top, right, bottom = region
    # The region copied out once, into channels last (the layout the vectorized kernel
    # takes), copied as height x width x 3 rows: torch copies those at memory speed, a
    # 3 x H x W view of the same pixels element by element (3x the time). The filter is
    # symmetric, so mirroring the region before the resize gives the same pixels as after it
    # (test_resample): that copy is also the mirror, and the output is not copied again.
    block = rows[top:bottom, left:right]
    return block.flip(1) if flip else block.contiguous()


def resized(block: torch.Tensor, size: int) -> torch.Tensor:
    """A contiguous uint8 ``h x w x 3`` tensor resized to ``3 x size x size`` by torch's
    antialiased bilinear kernel (channels last in memory)."""
    return _resized(block.unsqueeze(0).permute(0, 3, 1, 2), size)[0]


def by_pillow(image, box: Box, size: int, flip: bool) -> torch.Tensor:
    import numpy
    from PIL import Image

    resized = _region(image, box).resize((size, size), Image.BILINEAR)
    if flip:
        resized = resized.transpose(Image.FLIP_LEFT_RIGHT)
    return torch.from_numpy(numpy.array(resized)).permute(2, 0, 1)


def _region(image, box: Box):
    """The pixels of ``box`` as an RGB image of their own: the filter sees nothing outside
    them (as torchvision's crop-then-resize), whichever implementation resizes."""
    region = image.crop(pixel_box(box, image.size[0], image.size[1]))
    return region if region.mode == "RGB" else region.convert("RGB")


def _resized(pixels: torch.Tensor, size: int) -> torch.Tensor:
    return torch.nn.functional.interpolate(pixels, size=(size, size), mode="bilinear",
                                           antialias=True, align_corners=False)

