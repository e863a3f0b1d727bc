"""JPEG bytes straight to a uint8 tensor by torchvision's decoder (libjpeg-turbo, as Pillow's),
where this torchvision has a working one.

Pillow decodes to 4 bytes per pixel and a tensor needs a copy out of it (about a third of the
decode's time again); torchvision writes the 3 bytes per pixel into the tensor directly. It
cannot decode at a reduced size, so ``images`` keeps Pillow for the photographs where the crop
allows that, and for everything that is not a plain RGB or grayscale JPEG.
"""

from __future__ import annotations

import functools
import io

import torch


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether torchvision here decodes JPEGs (its image extension can be missing or fail to
    load, which only a decode shows)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buffer, "JPEG")
    try:
        return decoded(buffer.getvalue()).shape == (3, 16, 16)
    except (ImportError, OSError):
        return False


def decoded(data: bytes) -> torch.Tensor:
    """The JPEG in ``data`` as RGB (grayscale repeated): uint8 ``3 x H x W``, channels last in
    memory; OSError if it is not a whole JPEG."""
    from torchvision.io import ImageReadMode, decode_jpeg

    try:
        # A bytearray: torch takes only a writable buffer without a warning (and no empty one).
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return decode_jpeg(encoded, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError) as error:
        raise OSError("cannot decode the JPEG: {}".format(error))
