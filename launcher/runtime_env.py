"""The trainer's runtime variables: a pure function of (platform, runtime, TPU endpoint).

==========  ========  ===============================================================
platform    runtime   exported
==========  ========  ===============================================================
tpu-node    xrt       ``XRT_TPU_CONFIG=tpu_worker;0;IP:PORT``, ``TPU_IP_ADDRESS=IP``
tpu-node    pjrt      error: PJRT cannot drive a remote TPU node
tpu-vm      pjrt      ``PJRT_DEVICE=TPU``
tpu-vm      xrt       ``XRT_TPU_CONFIG=localservice;0;localhost:51011`` (torch_xla 1.x)
local       pjrt      ``PJRT_DEVICE=CPU``
local       xrt       ``XRT_DEVICE_MAP``/``XRT_WORKERS`` for the XRT CPU device
explicit    pjrt      nothing new
explicit    xrt       ``XRT_TPU_CONFIG`` derived from ``TPU_IP_ADDRESS``; for
                      ``PJRT_DEVICE=CPU``, the XRT CPU device's two variables
==========  ========  ===============================================================

torch_xla 1.11 (the XRT image) does not know ``PJRT_DEVICE`` at all; a later 1.x takes
``PJRT_DEVICE=CPU`` over the XRT variables, so exporting both gives the CPU either way.

Variables the user set are never overwritten: they are returned as ``kept``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from launcher.address import Endpoint, parse_endpoint
from launcher.errors import ConfigError
from launcher.platforms.base import EXPLICIT, LOCAL, TPU_NODE, TPU_VM, Platform
from launcher.runtime import PJRT, XRT, XlaRuntime

XRT_IMAGE = "gcr.io/tpu-pytorch/xla:r1.11_3.7"
TPU_NODE_PORT = 8470
# torch_xla 1.x conventions for a TPU VM's local service and the XRT CPU device.
XRT_TPU_VM_CONFIG = "localservice;0;localhost:51011"
XRT_CPU_DEVICE_MAP = "CPU:0;/job:localservice/replica:0/task:0/device:XLA_CPU:0"
XRT_CPU_WORKERS = "localservice:0;grpc://localhost:40934"


@dataclass(frozen=True)
class RuntimeEnv:
    """``exports`` are set for the trainer; ``kept`` are the user's own, passed through."""

    exports: Tuple[Tuple[str, str], ...]
    kept: Tuple[Tuple[str, str], ...]


def check_supported(platform: Platform, runtime: XlaRuntime) -> None:
    """Raise ConfigError when ``runtime`` cannot drive ``platform``.

    Called before waiting for a TPU node, so a wrong image fails in seconds, not after the
    TPU is provisioned; ``runtime_env`` applies the same rules.
    """
    settings = dict(platform.user_settings)
    if runtime.name == PJRT and platform.kind == TPU_NODE:
        raise ConfigError(
            "{} names TPU node {!r}, but torch_xla {} uses the PJRT runtime, which cannot drive "
            "a remote TPU node".format(platform.description,
                                       platform.tpu_node.name if platform.tpu_node else "?",
                                       runtime.torch_xla_version or ""),
            "build the image with the XRT-era base {} (make build RUNTIME=xrt), or run on a "
            "TPU VM (Vertex AI)".format(XRT_IMAGE))
    if (runtime.name == PJRT and platform.kind == EXPLICIT and "PJRT_DEVICE" not in settings):
        names = ", ".join(sorted(settings))
        raise ConfigError(
            "{} is set but torch_xla {} uses the PJRT runtime, which ignores it".format(
                names, runtime.torch_xla_version or ""),
            "for a TPU node use the XRT-era image {}; otherwise set PJRT_DEVICE=TPU|CPU and "
            "unset {}".format(XRT_IMAGE, names))


def runtime_env(platform: Platform, runtime: XlaRuntime,
                endpoint: Optional[Endpoint] = None) -> RuntimeEnv:
    """The variables the trainer needs; ``endpoint`` is the resolved TPU node (tpu-node only)."""
    check_supported(platform, runtime)
    kept = dict(platform.user_settings)
    exports = _exports(platform, runtime, endpoint, kept)
    return RuntimeEnv(
        exports=tuple((name, value) for name, value in exports.items() if name not in kept),
        kept=tuple(sorted(kept.items())),
    )


def _exports(platform: Platform, runtime: XlaRuntime, endpoint: Optional[Endpoint],
             settings: Dict[str, str]) -> Dict[str, str]:
    if platform.kind == TPU_NODE:
        if endpoint is None:
            raise ValueError("a tpu-node platform needs its resolved endpoint")
        return {"XRT_TPU_CONFIG": xrt_tpu_config(endpoint), "TPU_IP_ADDRESS": endpoint.host}
    if platform.kind == TPU_VM:
        return {"PJRT_DEVICE": "TPU"} if runtime.name == PJRT else {
            "XRT_TPU_CONFIG": XRT_TPU_VM_CONFIG}
    if platform.kind == LOCAL:
        return {"PJRT_DEVICE": "CPU"} if runtime.name == PJRT else {
            "XRT_DEVICE_MAP": XRT_CPU_DEVICE_MAP, "XRT_WORKERS": XRT_CPU_WORKERS}
    # EXPLICIT: validate what the user wrote; derive XRT_TPU_CONFIG from a bare address.
    if "XRT_TPU_CONFIG" in settings:
        validate_xrt_tpu_config(settings["XRT_TPU_CONFIG"])
    elif runtime.name == XRT and "TPU_IP_ADDRESS" in settings:
        address = parse_endpoint(settings["TPU_IP_ADDRESS"], "TPU_IP_ADDRESS", TPU_NODE_PORT)
        return {"XRT_TPU_CONFIG": xrt_tpu_config(address)}
    elif runtime.name == XRT and settings.get("PJRT_DEVICE") == "CPU":
        return {"XRT_DEVICE_MAP": XRT_CPU_DEVICE_MAP, "XRT_WORKERS": XRT_CPU_WORKERS}
    return {}


def xrt_tpu_config(endpoint: Endpoint) -> str:
    """``XRT_TPU_CONFIG`` for a single remote TPU node worker."""
    return "tpu_worker;0;{}".format(endpoint)


def validate_xrt_tpu_config(value: str) -> None:
    """Check ``JOB;TASK;HOST:PORT`` entries, separated by ``|``; raise ConfigError if bad."""
    for entry in value.split("|"):
        parts = entry.strip().split(";")
        if len(parts) != 3 or not parts[0] or not (parts[1].isdigit() and parts[1].isascii()):
            raise ConfigError(
                "XRT_TPU_CONFIG entry {!r} is not JOB;TASK;HOST:PORT".format(entry),
                'use e.g. XRT_TPU_CONFIG="tpu_worker;0;10.0.0.2:8470"')
        parse_endpoint(parts[2], "XRT_TPU_CONFIG")
