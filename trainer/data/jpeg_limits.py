"""What a JPEG's markers say it will cost to decode, read before any decoder runs, and the
limits a data worker holds every image to (docs/data.md, "Damaged images").

A JPEG's bytes come from a bucket: a corrupt upload, a bad disk, anyone who can write there.
Two kinds of small files cost a worker far more than their size, in every decoder the
workers run (the region decoder, simplejpeg, Pillow, torchvision all wrap libjpeg):

- **scans**: a progressive JPEG is decoded once per scan; a valid 158 KB file of 883 scans took
  14 s. Real encoders write about 10 (libjpeg's default progression) and rarely more than a
  few dozen; libjpeg-turbo's own fuzzers stop at 500. ``MAX_SCANS`` is 100.
- **memory**: a progressive JPEG keeps every DCT coefficient of the whole image until its last
  scan (2 bytes each, 64 per 8 x 8 block of each component), whatever the scale or region
  decoded: a 781 KB DC-only 20000 x 20000 file took 774 MB in one worker. ``DECODE_BUDGET``
  (512 MiB) bounds it; it admits a progressive 4:2:0 photograph of 170 megapixels and a
  4:4:4 one of 85 (ImageNet-1k's largest images are near 100 megapixels), and the region
  decoder passes the same budget to libjpeg (``max_memory_to_use``) for what this estimate
  does not see.

``segments`` lists the markers up to the first scan and ``layout`` reads the frame from them
(no entropy decoding: microseconds); ``problem`` says what is over a limit, or None.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Optional, Tuple

MAX_SCANS = 100
DECODE_BUDGET = 512 * 2 ** 20
# Start Of Frame markers (not DHT 0xC4, JPG 0xC8, DAC 0xCC); 0xC2, 0xC6, 0xCA, 0xCE are
# progressive.
_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PROGRESSIVE = frozenset((0xC2, 0xC6, 0xCA, 0xCE))
_SOS = b"\xff\xda"


class Layout(NamedTuple):
    """A JPEG's frame as its markers declare it: ``sampling`` is each component's (h, v)."""

    width: int
    height: int
    precision: int
    progressive: bool
    sampling: Tuple[Tuple[int, int], ...]
    scans: int  # counted in a progressive JPEG; 1 for a sequential one (not counted)

    def coefficient_bytes(self) -> int:
        """What libjpeg holds for a progressive decode: every component's DCT blocks, 128
        bytes each (64 coefficients of 2 bytes), over the whole image."""
        most_h = max(h for h, _ in self.sampling)
        most_v = max(v for _, v in self.sampling)
        total = 0
        for h, v in self.sampling:
            columns = _ceil(_ceil(self.width * h, most_h), 8)
            rows = _ceil(_ceil(self.height * v, most_v), 8)
            total += columns * rows * 128
        return total


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def segments(data: bytes) -> list:
    """[(marker, payload start, payload end)] of a JPEG's segments from its start up to and
    including the start of scan; [] when they are not well formed."""
    if data[:2] != b"\xff\xd8":
        return []
    found, at = [], 2
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
            continue
        end = at + 2 + int.from_bytes(data[at + 2:at + 4], "big")
        if end > len(data):
            return []
        found.append((marker, at + 4, end))
        if marker == 0xDA:
            return found
        at = end
    return []


def layout(data: bytes) -> Optional[Layout]:
    """The frame of the JPEG in ``data`` and its number of scans, or None where its markers do
    not read as a JPEG's up to the first scan (the decoders then say why)."""
    found = segments(data)
    frames = [(marker, start, end) for marker, start, end in found if marker in _FRAMES]
    if not found or not frames:
        return None
    marker, start, end = frames[0]
    if end - start < 6:
        return None
    precision, height, width, count = struct.unpack_from(">BHHB", data, start)
    factors = tuple((byte >> 4, byte & 15) for byte in data[start + 7:end:3][:count])
    if not count or len(factors) != count or any(
            not (1 <= h <= 4 and 1 <= v <= 4) for h, v in factors):
        return None
    progressive = marker in _PROGRESSIVE
    # 0xFF 0xDA never occurs inside entropy-coded data (an 0xFF there is followed by 0x00 or
    # a restart marker), so each occurrence from the first scan on is a scan. Counted for a
    # progressive JPEG only, where each scan is another pass over the whole image (a sequential
    # one has a scan per component at most); the count reads every byte (34 us for 45 KB,
    # 4 % of a training decode: bench/damage_checks.py), the markers alone 3 us.
    scans = data.count(_SOS, found[-1][1] - 4) if progressive else 1
    return Layout(width, height, precision, progressive, factors, scans)


def problem(found: Layout) -> Optional[str]:
    """Why a worker will not decode the JPEG ``found`` describes, or None: too many scans, or
    more decoder memory than ``DECODE_BUDGET``."""
    if found.scans > MAX_SCANS:
        return "{} scans, more than the {} a worker decodes".format(found.scans, MAX_SCANS)
    if found.progressive and found.coefficient_bytes() > DECODE_BUDGET:
        return ("a progressive {} x {} JPEG needs {} MiB to decode, more than the {} MiB a "
                "worker allows an image".format(found.width, found.height,
                                                 found.coefficient_bytes() >> 20,
                                                 DECODE_BUDGET >> 20))
    return None
