"""launcher.runtime: XRT vs PJRT from the installed torch_xla's metadata."""

import pytest

from launcher.errors import ConfigError
from launcher.runtime import (
    PJRT,
    XRT,
    detect_runtime,
    installed_torch_xla_version,
    runtime_for_version,
)


@pytest.mark.parametrize("version, runtime", [
    ("1.12", XRT), ("1.12.0", XRT), ("1.13.1", XRT), ("2.0.0", XRT), ("2.1.0+xrt", XRT),
    ("2.1.0", PJRT), ("2.9.0", PJRT), ("2.9.0+git1234", PJRT), ("10.0", PJRT),
])
def test_runtime_for_version(version, runtime):
    assert runtime_for_version(version) == runtime


def test_installed_version_read_without_importing_torch_xla():
    import sys

    version = installed_torch_xla_version()
    assert version == "2.9.0"  # the pinned development environment
    assert "torch_xla" not in sys.modules and "torch" not in sys.modules


def test_override_wins_and_missing_package_is_an_error():
    assert detect_runtime("xrt", lambda: "2.9.0").name == XRT
    assert detect_runtime(None, lambda: "2.9.0").name == PJRT
    with pytest.raises(ConfigError, match="torch_xla is not installed"):
        detect_runtime(None, lambda: None)
    with pytest.raises(ConfigError, match="cannot read the torch_xla version"):
        detect_runtime(None, lambda: "nightly")
