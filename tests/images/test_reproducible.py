"""Images you can rebuild: what the build installs is exactly its lock (both images), a second
build from nothing installs the same set, a changed hash stops the build with pip's error,
``pip check`` finds nothing but the conflicts the pins allow, the stand-ins hold exactly their
pinned versions (whose hashes ``make standin-pins`` writes), a re-lock keeps the lock's pins
unless asked to upgrade, the SBOM in the image
is valid CycloneDX and lists every locked package, the Debian packages, the base and the
project, and a base pinned by digest (make pin-bases, against a registry on loopback) builds
while a wrong digest fails."""

import json
import re
import shutil
import subprocess
import sys

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from conftest import REPO, clean_environ
from containers import DOCKER, RUNTIMES, STANDIN, build_steps, docker, make, run_container
from imagebuild.pin_bases import FILES as PINNED_FILES
from imagebuild.pin_bases import current_bases
from imagebuild.pip_check import conflict_key, read_allowed
from imagebuild.sbom import normalize, read_lock

PIP_LIST = ["-m", "pip", "list", "--format=json", "--disable-pip-version-check"]


def installed(image):
    """{normalized name: version} of the image's Python packages, as pip lists them."""
    result = run_container(image, *PIP_LIST, entrypoint="python", network="none")
    assert result.returncode == 0, result.stderr
    return {normalize(entry["name"]): entry["version"] for entry in json.loads(result.stdout)}


def lock(runtime):
    return read_lock(REPO / "requirements" / "image-{}.lock".format(runtime))


def build_args(runtime, **overrides):
    """``make build``'s arguments for ``runtime`` as the container tier builds it."""
    [_, build] = build_steps(runtime)
    args = dict(arg.split("=", 1) for arg in build[1:])
    args.update(overrides)
    return ["build"] + ["{}={}".format(key, value) for key, value in args.items()]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_image_installs_exactly_its_lock(images, runtime):
    locked = {name: version for name, (version, _) in lock(runtime).items()}
    image, base = installed(images[runtime]), installed(STANDIN.format(runtime))
    assert {name: image.get(name) for name in locked} == locked
    added_or_changed = {name for name, version in image.items() if base.get(name) != version}
    assert added_or_changed <= set(locked)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_second_build_from_nothing_installs_the_same_set(images, runtime):
    again = "tpu-xla-test:{}-again".format(runtime)
    result = make(*build_args(runtime, IMAGE_URI=again,
                              DOCKER_BUILD_ARGS="--network=host --no-cache"),
                  env=clean_environ(), timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    try:
        assert installed(again) == installed(images[runtime])
    finally:
        docker("rmi", again, check=False)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_make_sbom_prints_a_valid_sbom_of_every_locked_package(images, runtime):
    result = make("sbom", "PROJECT=test", "RUNTIME=" + runtime, "IMAGE_URI=" + images[runtime],
                  env=clean_environ())
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout[result.stdout.index("{"):])
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document))
    assert error is None, str(error).splitlines()[0]
    hashes = {c["name"]: (c.get("version"), c.get("hashes", [{}])[0].get("content"))
              for c in document["components"]}
    assert {name: hashes.get(name) for name in lock(runtime)} == lock(runtime)
    assert json.loads((REPO / "build" / "sbom-{}.cdx.json".format(runtime)).read_text()) \
        == document
    by_source = {}
    for entry in document["components"]:
        source = {p["name"]: p["value"] for p in entry.get("properties", [])}.get(
            "tpu-xla:source", entry["type"])
        by_source.setdefault(source, []).append(entry)
    debs = {entry["name"]: entry["purl"] for entry in by_source["os"]}
    assert debs["libc6"].startswith("pkg:deb/debian/libc6@") and "distro=debian-12" in \
        debs["libc6"]  # the stand-ins are Debian bookworm
    assert [entry["name"] for entry in by_source["operating-system"]] == ["debian"]
    # The pjrt image's region JPEG decoder carries the base release's libjpeg-turbo in
    # /app/trainer/data; the xrt image has no region decoder.
    bundled = {entry["name"]: entry["version"] for entry in by_source.get("bundled", [])}
    assert sorted(bundled) == (["libjpeg62-turbo"] if runtime == "pjrt" else [])
    assert all(re.fullmatch(r"1:2\.\d+\.\d+-\S+", version) for version in bundled.values())
    [base] = by_source["base-image"]
    assert base["name"] == "tpu-standin" and base["version"] == runtime
    [project] = by_source["project"]
    assert re.fullmatch(r"[0-9a-f]{64}", project["hashes"][0]["content"])
    assert all("+" not in entry["purl"].split("?")[0] for entry in document["components"]
               if "purl" in entry)
    assert [c["aggregate"] for c in document["compositions"]] == ["incomplete", "unknown"]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pip_check_finds_only_the_conflicts_the_pins_allow(images, runtime):
    result = run_container(images[runtime], "-m", "pip", "check",
                           "--disable-pip-version-check", entrypoint="python", network="none")
    found = {conflict_key(line) for line in result.stdout.splitlines()
             if line and not line.startswith("No broken requirements")}
    pins = REPO / "requirements" / "image-{}.txt".format(runtime)
    assert found == set(read_allowed(pins.read_text()))
    assert (result.returncode == 0) == (not found)


def test_the_build_check_refuses_a_conflict_the_pins_do_not_allow(images, tmp_path):
    pins = tmp_path / "image-xrt.txt"
    pins.write_text("\n".join(line for line in (REPO / "requirements" / "image-xrt.txt")
                              .read_text().splitlines() if "allow-conflict" not in line))
    result = run_container(images["xrt"], "/check/pip_check.py", "/pins/image-xrt.txt",
                           entrypoint="python", network="none",
                           volumes={str(REPO / "imagebuild"): "/check:ro",
                                    str(tmp_path): "/pins:ro"})
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("pip check: conflicts /pins/image-xrt.txt does not allow: "
                           "cloud-tpu-client 0.10 has requirement google-api-python-client==")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_stand_ins_hold_exactly_their_pinned_versions(images, runtime):
    pinned = read_lock(REPO / "standin" / "{}-pins.txt".format(runtime))
    held = installed(STANDIN.format(runtime))
    assert {name: version for name, (version, _) in pinned.items()} == {
        name: version for name, version in held.items() if name not in ("pip", "setuptools")}


def test_a_relock_keeps_the_locks_pins_unless_asked_to_upgrade(images, tmp_path):
    checkout = tmp_path / "checkout"
    for name in ("requirements", "imagebuild"):
        shutil.copytree(str(REPO / name), str(checkout / name))
    path = checkout / "requirements" / "image-pjrt.lock"
    shipped = path.read_text()
    path.write_text(re.sub(r"^packaging==\S+", "packaging==24.2", shipped, flags=re.MULTILINE))

    def relock(*extra):
        result = subprocess.run([sys.executable, "-m", "imagebuild.lock", "pjrt"] + list(extra),
                                cwd=str(checkout), env=clean_environ(DOCKER=DOCKER),
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-2000:]
        return read_lock(path)

    kept = relock()
    assert kept["packaging"][0] == "24.2"  # an older file, with its own sha256
    assert kept["packaging"][1] != lock("pjrt")["packaging"][1]
    assert {n: v for n, v in kept.items() if n != "packaging"} == {
        n: v for n, v in lock("pjrt").items() if n != "packaging"}
    # From scratch: the newest packaging the pins allow (what the shipped lock has, or newer).
    upgraded = relock("--upgrade")
    assert upgraded["packaging"][0] not in ("24.2", "") and upgraded.keys() == kept.keys()


def test_a_changed_hash_stops_make_build_with_pips_error(images, tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("Makefile", "Dockerfile", ".dockerignore", "launcher", "trainer",
                 "requirements", "imagebuild"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(str(REPO / name), str(checkout / name))
    path = checkout / "requirements" / "image-pjrt.lock"
    text = path.read_text()
    digest = re.search(r"dumb-init==\S+ \\\n    --hash=sha256:([0-9a-f]{64})", text).group(1)
    path.write_text(text.replace(digest, "0" * 64))
    result = make("-C", str(checkout), *build_args("pjrt", IMAGE_URI="tpu-xla-test:bad-hash"),
                  env=clean_environ())
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE" in output
    assert "Expected sha256 " + "0" * 64 in output
    assert "Traceback" not in output


def test_pin_bases_pins_a_pushed_base_and_a_wrong_digest_fails(images, registry, tmp_path):
    pushed = "{}/tpu-standin:xrt".format(registry)
    docker("tag", STANDIN.format("xrt"), pushed)
    docker("push", pushed, timeout=1200)
    checkout = tmp_path / "checkout"
    for name in PINNED_FILES:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(str(REPO / name), str(checkout / name))
    makefile = checkout / "Makefile"
    makefile.write_text(re.sub(r"^BASE_IMAGE_xrt := .*$", "BASE_IMAGE_xrt := " + pushed,
                               makefile.read_text(), flags=re.MULTILINE)
                        .replace("BASE_IMAGE_pjrt := ", "# BASE_IMAGE_pjrt: "))
    # What make pin-bases runs, pointed at the copy instead of this checkout.
    result = subprocess.run([sys.executable, "-m", "imagebuild.pin_bases", "--root",
                             str(checkout)], cwd=str(REPO), env=clean_environ(),
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr
    pinned = current_bases(checkout)["xrt"]
    digest = docker("image", "inspect", "--format", "{{index .RepoDigests 0}}",
                    pushed).stdout.strip().partition("@")[2]
    assert pinned == "{}@{}".format(pushed, digest)

    good = make(*build_args("xrt", BASE_IMAGE=pinned, IMAGE_URI="tpu-xla-test:pinned"),
                env=clean_environ(), timeout=1800)
    assert good.returncode == 0, good.stderr[-3000:]
    wrong = make(*build_args("xrt", BASE_IMAGE=pushed + "@sha256:" + "0" * 64,
                             IMAGE_URI="tpu-xla-test:wrong-base"), env=clean_environ())
    assert wrong.returncode != 0 and "0" * 64 in wrong.stderr
    docker("rmi", "tpu-xla-test:pinned", pushed, check=False)


def test_make_standin_pins_writes_the_hash_of_the_file_pip_picks(images, tmp_path):
    checkout = tmp_path / "checkout"
    for name in ("requirements", "imagebuild", "standin"):
        shutil.copytree(str(REPO / name), str(checkout / name))
    shipped = read_lock(REPO / "standin" / "xrt-pins.txt")
    path = checkout / "standin" / "xrt-pins.txt"
    path.write_text("".join("{}=={}\n".format(name, version)
                            for name, (version, _) in shipped.items()))  # versions only
    result = subprocess.run([sys.executable, "-m", "imagebuild.standin_pins", "xrt"],
                            cwd=str(checkout), env=clean_environ(DOCKER=DOCKER),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    assert read_lock(path) == shipped
    assert path.read_text() == (REPO / "standin" / "xrt-pins.txt").read_text()
