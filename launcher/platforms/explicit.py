"""Explicit user configuration: the user already chose the device or the TPU address.

Detected when any of ``XRT_TPU_CONFIG``, ``TPU_IP_ADDRESS``, ``PJRT_DEVICE`` or ``XRT_WORKERS``
is set. Nothing is detected or resolved; those values reach the trainer untouched. One
contradiction is refused rather than obeyed: ``PJRT_DEVICE`` naming another device while
``TPU_CONFIG``/``TPU_NAME`` names the job's TPU node.
"""

from __future__ import annotations

from typing import Optional

from launcher.errors import ConfigError
from launcher.job_env import JobEnvironment
from launcher.platforms.base import EXPLICIT, Platform


def detect(job_env: JobEnvironment, root: str) -> Optional[Platform]:
    """The explicit platform when the user set a runtime variable, else None."""
    del root  # explicit settings need no look at the machine
    if not job_env.runtime_settings:
        return None
    settings = dict(job_env.runtime_settings)
    device = settings.get("PJRT_DEVICE")
    named = "TPU_NAME" if job_env.tpu_name else ("TPU_CONFIG" if job_env.tpu_config else None)
    if device is not None and device != "TPU" and named is not None:
        # Often inherited from an image or a shell profile: obeying it would silently leave
        # the job's TPU node idle and train on the CPU.
        raise ConfigError(
            "PJRT_DEVICE={} contradicts {}, which names a TPU node for this job".format(
                device, named),
            "unset PJRT_DEVICE to train on the TPU node; to train on the {} instead, unset "
            "{}".format(device, named))
    names = ", ".join(name for name, _ in job_env.runtime_settings)
    return Platform(
        kind=EXPLICIT,
        description="configured by the user ({})".format(names),
        user_settings=job_env.runtime_settings,
    )
