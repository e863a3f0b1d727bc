"""The base image of each image profile, and the TPU runtime each XRT base must run against.

An XRT client drives a remote TPU node, whose runtime (``tpuTfVersion``) must be the same
PyTorch/XLA release as the client's torch_xla. Legacy AI Platform Training's newest PyTorch
runtime is ``pytorch-1.11``, so the default XRT profile pairs ``r1.11_3.7`` with it;
``r1.12_3.7`` only fits TPU nodes created by hand with ``--version=pytorch-1.12``.

This table is the one place the pairing is written down: the Dockerfile, Makefile and
cloudbuild.yaml defaults, the launcher's hint and the job templates are tested against it.
A base may be pinned by digest (``NAME:TAG@sha256:...``, ``make pin-bases``): the pairing
follows its tag.
"""

from __future__ import annotations

from typing import Dict, Optional

XRT, PJRT = "xrt", "pjrt"

# XRT base image (by tag) -> the TPU node runtime version (tpuTfVersion) it pairs with.
XRT_BASE_RUNTIMES: Dict[str, str] = {
    "gcr.io/tpu-pytorch/xla:r1.11_3.7": "pytorch-1.11",
    "gcr.io/tpu-pytorch/xla:r1.12_3.7": "pytorch-1.12",
}
# The default base of each profile, as make pin-bases writes it (tag, or tag@digest).
XRT_BASE = "gcr.io/tpu-pytorch/xla:r1.11_3.7"
PJRT_BASE = "us-central1-docker.pkg.dev/tpu-pytorch-releases/docker/xla:r2.9.0_3.10_tpuvm"
DEFAULT_BASES: Dict[str, str] = {XRT: XRT_BASE, PJRT: PJRT_BASE}


def tag_of(base_image: str) -> str:
    """``NAME:TAG`` of a base reference that may carry ``@sha256:...``."""
    return base_image.split("@", 1)[0]


def xrt_runtime_of(base_image: str) -> Optional[str]:
    """The TPU node runtime an XRT base pairs with, or None for a base not in the table."""
    return {tag_of(base): runtime for base, runtime in XRT_BASE_RUNTIMES.items()}.get(
        tag_of(base_image))


def runtime_of_base(base_image: str) -> Optional[str]:
    """``xrt`` or ``pjrt`` for a base image this project knows, else None (a custom base)."""
    if xrt_runtime_of(base_image) is not None:
        return XRT
    if tag_of(base_image) == tag_of(PJRT_BASE) or tag_of(base_image).endswith("_tpuvm"):
        return PJRT
    return None
