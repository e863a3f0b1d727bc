"""What each TPU chip has, by the runtime's device kind (``xla.device_kind``): its
high-bandwidth memory (``--sharding=auto``) and its peak dense bfloat16 rate (the MFU of
``trainer.throughput``). Cloud TPU's published figures per chip; a kind not listed (the CPU
device, a chip newer than this table) has neither, and what needs them says so."""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

GIB = 1 << 30
TERA = 1e12


class Chip(NamedTuple):
    memory: int  # bytes of high-bandwidth memory
    peak_flops: float  # dense bfloat16 operations per second


# By the device kind's prefix, lower case, longest prefixes first where one is another's.
CHIPS: Tuple[Tuple[str, Chip], ...] = (
    ("tpu v5 lite", Chip(16 * GIB, 197 * TERA)),  # v5e
    ("tpu v5e", Chip(16 * GIB, 197 * TERA)),
    ("tpu v6 lite", Chip(32 * GIB, 918 * TERA)),  # v6e (Trillium)
    ("tpu v6e", Chip(32 * GIB, 918 * TERA)),
    ("tpu v5p", Chip(95 * GIB, 459 * TERA)),
    ("tpu v5", Chip(95 * GIB, 459 * TERA)),  # v5p reports itself so
    ("tpu v4", Chip(32 * GIB, 275 * TERA)),
    ("tpu7x", Chip(192 * GIB, 2307 * TERA)),  # Ironwood
)


def chip(kind: str) -> Optional[Chip]:
    """The chip of device ``kind``, None where it is not in ``CHIPS``."""
    kind = kind.lower()
    for prefix, found in CHIPS:
        if kind.startswith(prefix):
            return found
    return None
