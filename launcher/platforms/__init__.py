"""Platform detection: one module per platform, tried in one fixed order.

The order goes from what the user said to what the machine shows:

1. ``explicit``  the user set ``XRT_TPU_CONFIG``/``TPU_IP_ADDRESS``/``PJRT_DEVICE``: their
                 choice beats any guess, which also makes every other platform overridable;
2. ``tpu_node``  ``TPU_CONFIG``/``TPU_NAME``: the legacy platform told us about a remote TPU,
                 and a TPU node machine has no local chips to find;
3. ``tpu_vm``    local TPU chips (Vertex AI, GKE, TPU VMs);
4. ``local``     nothing asked for a TPU: the XLA CPU device.

Each ``detect(job_env, root)`` returns a ``Platform`` or None; ``job_env`` is the environment
already parsed by ``JobEnvironment.from_environ`` and ``root`` is the filesystem root holding
``/sys`` and ``/dev`` (a temporary directory in tests).
"""

from __future__ import annotations

from launcher.job_env import JobEnvironment
from launcher.platforms import explicit, local, tpu_node, tpu_vm
from launcher.platforms.base import Platform

DETECTORS = (explicit.detect, tpu_node.detect, tpu_vm.detect, local.detect)


def detect_platform(job_env: JobEnvironment, root: str = "/", rehearsal: bool = False
                    ) -> Platform:
    """The first platform whose detector matches; ``local`` always does. ``rehearsal`` (a
    dry run): TPU chips the environment expects but this machine lacks are a warning, and the
    platform is what a host with them would be."""
    try:
        for detect in DETECTORS:
            platform = detect(job_env, root)
            if platform is not None:
                return platform
    except tpu_vm.NoTpuChipsError as missing:
        if rehearsal and missing.rehearsal is not None:
            return missing.rehearsal
        raise
    raise AssertionError("local.detect always matches")  # pragma: no cover
