"""Explicit user configuration: the user already chose the device or the TPU address.

Detected when any of ``XRT_TPU_CONFIG``, ``TPU_IP_ADDRESS``, ``PJRT_DEVICE`` or ``XRT_WORKERS``
is set. Nothing is detected or resolved; those values reach the trainer untouched. Two
contradictions are refused rather than obeyed: ``PJRT_DEVICE`` next to an XRT setting
(``XRT_TPU_CONFIG``, ``TPU_IP_ADDRESS``, ``XRT_WORKERS``, ``XRT_DEVICE_MAP``), which configures
two runtimes at once; and ``PJRT_DEVICE`` naming another device while ``TPU_CONFIG``/``TPU_NAME``
names the job's TPU node.
"""

from __future__ import annotations

from typing import Optional

from launcher.errors import ConfigError
from launcher.job_env import RUNTIME_VARIABLES, JobEnvironment
from launcher.platforms.base import EXPLICIT, Platform

# The runtime variables of XRT (torch_xla <= 2.0): all but PJRT_DEVICE, which selects PJRT.
XRT_VARIABLES = tuple(name for name in RUNTIME_VARIABLES if name != "PJRT_DEVICE")


def detect(job_env: JobEnvironment, root: str) -> Optional[Platform]:
    """The explicit platform when the user set a runtime variable, else None."""
    del root  # explicit settings need no look at the machine
    if not job_env.runtime_settings:
        return None
    settings = dict(job_env.runtime_settings)
    device = settings.get("PJRT_DEVICE")
    xrt = [name for name in XRT_VARIABLES if name in settings]
    if device is not None and xrt:
        # A torch_xla that knows PJRT takes PJRT_DEVICE and ignores the XRT address; one that
        # does not (1.11) ignores PJRT_DEVICE. Which one wins depends on the image: refuse.
        raise ConfigError(
            "PJRT_DEVICE={} and {}={} configure two XLA runtimes at once (PJRT and XRT)".format(
                device, xrt[0], settings[xrt[0]]),
            "keep one: unset PJRT_DEVICE to use the XRT address (TPU node, torch_xla <= 2.0), "
            "or unset {} to use PJRT".format(" and ".join(xrt)))
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
