"""The image locks as shipped (requirements/image-*.lock) and imagebuild/lock.py's rules:
every entry pinned with a sha256, every top-level pin locked at its version, what the base must
provide listed; the Dockerfile installs them in pip's hash-checking mode."""

import re

import pytest

from conftest import REPO
from imagebuild.lock import assumed, kept_pins, locked_pins, render
from imagebuild.sbom import normalize, read_lock
from imagebuild.standin_pins import render as render_pins

RUNTIMES = ("xrt", "pjrt")


def top_level(runtime):
    text = (REPO / "requirements" / "image-{}.txt".format(runtime)).read_text()
    return {normalize(name): version for name, version in
            re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_entry_has_a_version_and_a_sha256(runtime):
    path = REPO / "requirements" / "image-{}.lock".format(runtime)
    entries = read_lock(path)
    assert entries and all(re.fullmatch(r"[0-9a-f]{64}", digest) and version
                           for version, digest in entries.values())
    assert len(entries) == path.read_text().count("--hash=sha256:")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_top_level_pin_is_locked_at_its_version(runtime):
    locked = read_lock(REPO / "requirements" / "image-{}.lock".format(runtime))
    assert {name: locked[name][0] for name in top_level(runtime)} == top_level(runtime)


def test_the_dockerfile_installs_the_lock_in_hash_checking_mode():
    dockerfile = REPO / "Dockerfile"
    text = dockerfile.read_text()
    assert "--no-deps --require-hashes" in text and "image-${RUNTIME}.lock" in text
    assert "--no-index -r /tmp/build/image-${RUNTIME}.txt" in text  # the base is checked
    assert "!requirements/image-*.lock" in (REPO / ".dockerignore").read_text()


def item(name, version, requested=False):
    return {"metadata": {"name": name, "version": version}, "requested": requested,
            "download_info": {"url": "https://x/{}.whl".format(name),
                              "archive_info": {"hashes": {"sha256": name[0] * 64}}}}


REPORTS = {
    "base": [{"name": "absl_py", "version": "2.5.1"}, {"name": "numpy", "version": "2.2.6"}],
    "install": {"install": [item("google-cloud-storage", "3.17.1", True),
                            item("protobuf", "7.36.2")]},
    "all": {"install": [item("absl-py", "2.5.1", True),
                        item("google-cloud-storage", "3.17.1", True),
                        item("protobuf", "7.36.2"), item("numpy", "2.2.6")]},
}


def test_top_level_pins_are_locked_even_where_the_stand_in_has_them():
    assert [pin[:2] for pin in locked_pins(REPORTS)] == [
        ("absl-py", "2.5.1"), ("google-cloud-storage", "3.17.1"), ("protobuf", "7.36.2")]
    assert assumed(REPORTS) == [("numpy", "2.2.6")]


def test_what_only_a_fresh_resolution_of_a_base_package_needs_is_not_assumed():
    # torch, resolved afresh from the index for a pin that needs it (timm), names CUDA wheels
    # the base never had: not something the lock assumes the base provides.
    reports = dict(REPORTS, all={"install": REPORTS["all"]["install"] + [
        item("nvidia-cublas", "13.1.0"), item("numpy", "2.2.6")]})
    assert assumed(reports) == [("numpy", "2.2.6")]


def test_render_and_read_back(tmp_path):
    path = tmp_path / "image-pjrt.lock"
    path.write_text(render("pjrt", locked_pins(REPORTS), assumed(REPORTS)))
    assert read_lock(path) == {"absl-py": ("2.5.1", "a" * 64),
                               "google-cloud-storage": ("3.17.1", "g" * 64),
                               "protobuf": ("7.36.2", "p" * 64)}
    assert "#   numpy==2.2.6" in path.read_text()


def test_a_relock_keeps_the_existing_pins_but_the_top_level_ones(tmp_path):
    requirements = tmp_path / "requirements"
    requirements.mkdir()
    (requirements / "image-pjrt.txt").write_text("# pins\ngoogle-cloud-storage==3.17.1\n")
    (requirements / "image-pjrt.lock").write_text(
        render("pjrt", locked_pins(REPORTS), assumed(REPORTS)))
    # The top-level pin says its own version; the rest stay where the lock has them.
    assert kept_pins("pjrt", tmp_path) == ["absl-py==2.5.1", "protobuf==7.36.2"]
    (requirements / "image-pjrt.lock").unlink()
    assert kept_pins("pjrt", tmp_path) == []  # a first lock: nothing to keep


def test_the_shipped_locks_constrain_a_relock():
    for runtime in RUNTIMES:
        kept = kept_pins(runtime)
        locked = read_lock(REPO / "requirements" / "image-{}.lock".format(runtime))
        assert kept and len(kept) == len(locked) - len(top_level(runtime))


STANDIN = REPO / "standin"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_stand_ins_install_every_package_at_a_pinned_version_and_file(runtime):
    dockerfile = (STANDIN / "{}.Dockerfile".format(runtime)).read_text()
    steps = "\n".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    installs = [install.strip() for install in re.findall(r"pip install ([^;\\]*)", steps)]
    assert installs == [installs[0], "--no-deps --require-hashes -r /tmp/pins.txt"]
    assert re.fullmatch(r"--force-reinstall pip==[\d.]+", installs[0])  # pip itself: exact
    assert "--mount=type=bind,source=pins.txt,target=/tmp/pins.txt" in dockerfile
    path = STANDIN / "{}-pins.txt".format(runtime)
    pinned = read_lock(path)
    assert pinned and all(re.fullmatch(r"[0-9a-f]{64}", digest) and version
                          for version, digest in pinned.values())
    assert len(pinned) == path.read_text().count("--hash=sha256:")
    assert '"$here/$runtime-pins.txt" "$work/context/pins.txt"' in \
        (STANDIN / "build.sh").read_text()


def test_the_stand_in_pins_render_and_read_back(tmp_path):
    path = tmp_path / "xrt-pins.txt"
    path.write_text(render_pins("xrt", [("numpy", "1.21.6", "a" * 64),
                                        ("torch", "1.11.0", "b" * 64)]))
    assert read_lock(path) == {"numpy": ("1.21.6", "a" * 64), "torch": ("1.11.0", "b" * 64)}
    assert "CPython 3.7" in path.read_text() and "make standin-pins" in path.read_text()
