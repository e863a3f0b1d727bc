"""launcher.runtime: XRT vs PJRT from the installed torch_xla's metadata."""

import subprocess
import sys

import pytest

from conftest import REPO, clean_environ
from launcher.errors import ConfigError
from launcher.runtime import (
    PJRT,
    XRT,
    detect_runtime,
    runtime_for_version,
)


@pytest.mark.parametrize("version, runtime", [
    ("1.12", XRT), ("1.12.0", XRT), ("1.13.1", XRT), ("2.0.0", XRT), ("2.1.0+xrt", XRT),
    ("2.1.0", PJRT), ("2.9.0", PJRT), ("2.9.0+git1234", PJRT), ("10.0", PJRT),
])
def test_runtime_for_version(version, runtime):
    assert runtime_for_version(version) == runtime


def test_installed_version_read_without_importing_torch_xla():
    # In a process of its own: a test session's process may have imported torch_xla already
    # (tests/launcher/test_gke_pod.py does), and which tests share an xdist worker varies.
    probe = ("import sys; from launcher.runtime import installed_torch_xla_version; "
             "print(installed_torch_xla_version(), 'torch_xla' in sys.modules, "
             "'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=str(REPO), env=clean_environ(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    # The pinned development environment's version; neither torch_xla nor torch imported.
    assert result.stdout.split() == ["2.9.0", "False", "False"]


def test_override_wins_and_missing_package_is_an_error():
    assert detect_runtime("xrt", lambda: "2.9.0").name == XRT
    assert detect_runtime(None, lambda: "2.9.0").name == PJRT
    with pytest.raises(ConfigError, match="torch_xla is not installed"):
        detect_runtime(None, lambda: None)
    with pytest.raises(ConfigError, match="cannot read the torch_xla version"):
        detect_runtime(None, lambda: "nightly")
