"""imagebuild/pip_check.py: the build's ``pip check`` with the allow-list in the image pins. Real
pip checks real metadata (dist-info folders on ``PYTHONPATH``); only the allow-listed conflicts
pass, anything else fails with one line, and the shipped allow-list names exactly the conflict
the xrt base forces."""

import subprocess
import sys

import pytest

from conftest import REPO
from imagebuild.pip_check import AllowListError, conflict_key, judge, read_allowed

SCRIPT = REPO / "imagebuild" / "pip_check.py"
ALLOW_BETA = "# allow-conflict: Alpha_Pkg requires beta: the base pins it\n"


def dist(site, name, version, *requires):
    info = site / "{}-{}.dist-info".format(name.replace("-", "_"), version)
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join("Requires-Dist: {}\n".format(r) for r in requires)))


def run(tmp_path, pins_text, *dists):
    """pip_check.py with ``pins_text`` as the pins file, the ``dists`` installed on top of
    this interpreter's environment (which pip finds clean)."""
    site = tmp_path / "site"
    for spec in dists:
        dist(site, *spec)
    pins = tmp_path / "image-test.txt"
    pins.write_text(pins_text)
    return subprocess.run([sys.executable, str(SCRIPT), str(pins)], capture_output=True,
                          text=True, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})


def test_an_allowed_conflict_passes_and_is_printed(tmp_path):
    result = run(tmp_path, "beta==2.0\n" + ALLOW_BETA, ("alpha-pkg", "1.0", "beta==1.0"),
                 ("beta", "2.0"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "pip check: allowed by {}: alpha-pkg 1.0 has requirement beta==1.0, but you have beta"
        " 2.0.".format(tmp_path / "image-test.txt")]


def test_any_other_conflict_fails_with_one_line(tmp_path):
    result = run(tmp_path, ALLOW_BETA, ("alpha-pkg", "1.0", "beta==1.0", "gamma>=1"),
                 ("beta", "2.0"), ("delta", "1", "beta<2"))
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("pip check: conflicts {} does not allow: ".format(
        tmp_path / "image-test.txt"))
    assert "alpha-pkg 1.0 requires gamma, which is not installed." in line
    assert "delta 1 has requirement beta<2, but you have beta 2.0." in line
    assert "alpha-pkg 1.0 has requirement beta==1.0" not in line  # allowed
    assert "HINT: " in line and "Traceback" not in result.stderr


def test_a_clean_environment_passes_and_a_stale_entry_is_named(tmp_path):
    result = run(tmp_path, ALLOW_BETA, ("alpha-pkg", "1.0", "beta==2.0"), ("beta", "2.0"))
    assert result.returncode == 0, result.stderr
    assert "stale allow-conflict" in result.stdout and "alpha-pkg requires beta" in result.stdout


@pytest.mark.parametrize("line", [
    "# allow-conflict: alpha requires beta",  # no reason
    "# allow-conflict: alpha needs beta: why",
])
def test_an_allow_line_without_its_shape_is_refused(tmp_path, line):
    with pytest.raises(AllowListError, match=r"^x.txt:2: expected"):
        read_allowed("beta==1\n" + line + "\n", "x.txt")
    result = run(tmp_path, line + "\n")
    assert result.returncode == 65 and len(result.stderr.splitlines()) == 1


def test_a_missing_pins_file_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.txt")],
                            capture_output=True, text=True)
    assert result.returncode == 66 and result.stderr.startswith("pip_check.py: cannot read ")


def test_pips_lines_are_read_and_unknown_lines_refused():
    assert conflict_key("cloud-tpu-client 0.10 has requirement google-api-python-client==1.8.0,"
                        " but you have google-api-python-client 2.86.0.") == (
        "cloud-tpu-client", "google-api-python-client")
    assert conflict_key("torch 1.11.0 requires typing_extensions, which is not installed.") == (
        "torch", "typing-extensions")
    unknown = "libtpu 0.1 is not supported on this platform"
    assert conflict_key(unknown) is None
    assert judge(unknown + "\n", {}) == ([], [unknown], [])


@pytest.mark.parametrize("runtime, allowed", [
    ("xrt", [("cloud-tpu-client", "google-api-python-client")]),
    ("pjrt", []),
])
def test_the_shipped_allow_lists(runtime, allowed):
    path = REPO / "requirements" / "image-{}.txt".format(runtime)
    reasons = read_allowed(path.read_text(), str(path))
    assert sorted(reasons) == allowed
    assert all(len(reason) > 40 for reason in reasons.values())  # each says why


def test_the_dockerfile_runs_the_check_after_the_lock():
    text = (REPO / "Dockerfile").read_text()
    install = text.index("--no-deps --require-hashes")
    check = text.index("python /tmp/build/pip_check.py /tmp/build/image-${RUNTIME}.txt")
    assert install < check
    assert "!imagebuild/pip_check.py" in (REPO / ".dockerignore").read_text()
