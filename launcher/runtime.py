"""Which torch_xla runtime the trainer will use: XRT (torch_xla <= 2.0, or a ``+xrt`` build)
or PJRT (2.1 and later).

The version comes from the installed package's metadata, so neither torch nor torch_xla is
imported (importing them costs seconds and, next to TensorFlow, aborts the process). The
``--xla-runtime`` option (``LAUNCHER_XLA_RUNTIME``) overrides the detection, e.g. to rehearse
the XRT image's behaviour on a machine that has torch_xla 2.9.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.errors import ConfigError

XRT = "xrt"
PJRT = "pjrt"
RUNTIMES = (XRT, PJRT)

# The last release whose default runtime is XRT; 2.1 switched the default to PJRT.
_LAST_XRT_RELEASE = (2, 0)


@dataclass(frozen=True)
class XlaRuntime:
    """The runtime (``xrt`` or ``pjrt``), the torch_xla version seen, and how it was chosen."""

    name: str
    torch_xla_version: Optional[str]
    source: str

    def __str__(self) -> str:
        version = self.torch_xla_version or "not installed"
        return "{} (torch_xla {}; {})".format(self.name.upper(), version, self.source)


def runtime_for_version(version: str) -> str:
    """XRT for torch_xla <= 2.0 and for ``+xrt`` local builds, PJRT otherwise."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if not match:
        raise ConfigError(
            "cannot read the torch_xla version {!r}".format(version),
            "pass --xla-runtime=xrt or --xla-runtime=pjrt (or set LAUNCHER_XLA_RUNTIME)")
    release = (int(match.group(1)), int(match.group(2)))
    if release <= _LAST_XRT_RELEASE or "+xrt" in version.lower():
        return XRT
    return PJRT


def detect_runtime(override: Optional[str],
                   read_version: Optional[Callable[[], Optional[str]]] = None) -> XlaRuntime:
    """Return the runtime to configure; ``override`` (already validated) wins."""
    version = (read_version or installed_torch_xla_version)()
    if override:
        return XlaRuntime(override, version, "set by --xla-runtime")
    if version is None:
        raise ConfigError(
            "torch_xla is not installed, so the XLA runtime cannot be detected",
            "run inside the training image, or pass --xla-runtime=xrt|pjrt to rehearse")
    return XlaRuntime(runtime_for_version(version), version, "from installed torch_xla")


def installed_torch_xla_version() -> Optional[str]:
    """The installed torch_xla's version string, or None; never imports torch_xla."""
    try:
        from importlib import metadata  # novm (3.8+; the except branch serves 3.7)
    except ImportError:  # Python 3.7, the XRT-era image: setuptools provides pkg_resources.
        import pkg_resources
        try:
            return pkg_resources.get_distribution("torch_xla").version
        except pkg_resources.DistributionNotFound:
            return None
    try:
        return metadata.version("torch_xla")
    except metadata.PackageNotFoundError:
        return None
