"""JPEGs damaged as a bucket's come (tests/trainer/data/test_images.py, bench/damage_checks.py):
``DAMAGE`` maps each kind to a function of a valid JPEG's bytes (4:2:0, baseline) that damages
them that way, and ``BOMBS`` to a function that makes a file over a worker's limits."""

from __future__ import annotations

import io
from typing import Callable, Dict, Iterable, Tuple

from PIL import Image


def entropy_start(data: bytes) -> int:
    """Where the first scan's entropy-coded data begins (after its SOS segment)."""
    at = data.index(b"\xff\xda")
    return at + 2 + int.from_bytes(data[at + 2:at + 4], "big")


def frame(data: bytes) -> int:
    """Where the Start Of Frame marker is. Its segment: marker (2), length (2), precision (1),
    height (2), width (2), components (1), then each component's id, sampling and table (3
    bytes each)."""
    return next(at for at in range(len(data) - 1)
                if data[at] == 0xFF and data[at + 1] in (0xC0, 0xC1, 0xC2))


def edited(data: bytes, edits: Iterable[Tuple[int, int]]) -> bytes:
    """``data`` with each (offset, byte) of ``edits`` written."""
    data = bytearray(data)
    for at, value in edits:
        data[at] = value
    return bytes(data)


def _zeroed(data: bytes) -> bytes:
    middle = (entropy_start(data) + len(data)) // 2
    return edited(data, [(at, 0) for at in range(middle, middle + 512)])


DAMAGE: Dict[str, Callable[[bytes], bytes]] = {
    "cut without its End Of Image marker": lambda data: data[:len(data) // 2],
    "cut, the marker appended": lambda data: data[:len(data) // 2] + b"\xff\xd9",
    "bits flipped in the scan": lambda data: edited(data, [
        (at, data[at] ^ 0x10) for at in range(entropy_start(data) + 200, len(data) - 2, 997)]),
    # Zero bytes are valid Huffman codes: libjpeg decodes on with wrong pixels and warns only
    # at the scan's end ("extraneous bytes before marker"), whatever the crop.
    "512 bytes of the scan zeroed": _zeroed,
    "a frame whose sampling its scan does not match": lambda data: edited(
        data, [(frame(data) + 11, 0x11)]),  # luma 2 x 2 declared 1 x 1
    "a scan naming a component the frame has not": lambda data: edited(
        data, [(data.index(b"\xff\xda") + 5, 9)]),
    "12-bit samples (libjpeg here decodes 8)": lambda data: edited(
        data, [(frame(data) + 1, 0xC1), (frame(data) + 4, 12)]),
}


def _progressive(size: Tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 20, 30)).save(buffer, "JPEG", progressive=True)
    return buffer.getvalue()


def scan_bomb() -> bytes:
    """A progressive file whose scans repeat past 100: decoders would redo each."""
    data = _progressive((256, 256))
    first = data.index(b"\xff\xda")
    scans = data[first:data.index(b"\xff\xd9", first)]
    return data[:-2] + scans * 120 + b"\xff\xd9"


def memory_bomb() -> bytes:
    """A small progressive file whose frame claims 20000 x 20000 (1,144 MiB of coefficients)."""
    data = bytearray(_progressive((64, 48)))
    at = frame(bytes(data)) + 5
    data[at:at + 4] = (20000).to_bytes(2, "big") * 2
    return bytes(data)


BOMBS: Dict[str, Callable[[], bytes]] = {
    "more than 100 progressive scans": scan_bomb,
    "a 20000 x 20000 progressive frame": memory_bomb,
}
