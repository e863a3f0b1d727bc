"""Explicit user configuration: the user already chose the device or the TPU address.

Detected when any of ``XRT_TPU_CONFIG``, ``TPU_IP_ADDRESS``, ``PJRT_DEVICE`` or ``XRT_WORKERS``
is set. Nothing is detected or resolved; those values reach the trainer untouched.
"""

from __future__ import annotations

from typing import Optional

from launcher.job_env import JobEnvironment
from launcher.platforms.base import EXPLICIT, Platform


def detect(job_env: JobEnvironment, root: str) -> Optional[Platform]:
    """The explicit platform when the user set a runtime variable, else None."""
    del root  # explicit settings need no look at the machine
    if not job_env.runtime_settings:
        return None
    names = ", ".join(name for name, _ in job_env.runtime_settings)
    return Platform(
        kind=EXPLICIT,
        description="configured by the user ({})".format(names),
        user_settings=job_env.runtime_settings,
    )
