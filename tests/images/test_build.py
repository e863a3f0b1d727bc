"""What the builds produce: stand-ins that hold what they claim (and no fake torch_xla), images
that carry nothing but the launcher, the trainers, their locked packages and the SBOM (no pip
cache, tests, .git, credentials or the build's CA bundle), and ``make push`` to a real registry
on loopback whose pulled-back image is the one that was built."""

import json
import os
import re
import subprocess
import urllib.request

import pytest

from conftest import REPO, clean_environ
from containers import STANDIN, docker, image_id, make, run_container

ENGINE_DIR = os.environ.get("TPU_XLA_ENGINE_DIR", "/var/lib/tpu-xla-dockerd")
# engine.sh's bound (TPU_XLA_BUILD_CACHE, default 12GB), as docker reads it: binary units.
BUILD_CACHE = re.fullmatch(r"(\d+)([KMG]B)", os.environ.get("TPU_XLA_BUILD_CACHE", "12GB"))
BUILD_CACHE_BOUND = int(BUILD_CACHE.group(1)) * {"KB": 2 ** 10, "MB": 2 ** 20,
                                                 "GB": 2 ** 30}[BUILD_CACHE.group(2)]
# docker system df's sizes, as go-units writes them: 4 significant digits, decimal units.
DF_UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}

LIST_FILES = ("import os\n"
              "for root, dirs, files in os.walk('/'):\n"
              "    if root in ('/proc', '/sys', '/dev'):\n"
              "        dirs[:] = []\n"
              "        continue\n"
              "    for name in files:\n"
              "        print(os.path.join(root, name))\n")
FACTS = ("import sys, importlib\n"
         "def version(name):\n"
         "    try:\n"
         "        return importlib.import_module(name).__version__\n"
         "    except ImportError:\n"
         "        return None\n"
         "print(sys.executable, '%d.%d' % sys.version_info[:2], version('torch'),"
         " version('torch_xla'))\n")


@pytest.mark.parametrize("runtime, facts", [
    ("xrt", ["/root/anaconda3/envs/pytorch/bin/python", "3.7", "1.11.0+cu102", "None"]),
    ("pjrt", ["/usr/local/bin/python", "3.10", "2.9.0+cu128", "2.9.0"]),
])
def test_standins_hold_what_the_real_bases_hold(images, runtime, facts):
    result = run_container(STANDIN.format(runtime), "python", "-c", FACTS, network="none")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == facts  # torch_xla 1.11 cannot be had: absent, not faked


def test_xrt_standin_keeps_the_real_entrypoint_and_path(images):
    config = docker("image", "inspect", "--format", "{{json .Config.Entrypoint}} "
                    "{{range .Config.Env}}{{println .}}{{end}}", STANDIN.format("xrt")).stdout
    assert config.startswith('["docker-entrypoint.sh"]')
    assert "PATH=/root/anaconda3/envs/pytorch/bin:/root/anaconda3/bin:" in config


@pytest.mark.parametrize("runtime", ["xrt", "pjrt"])
def test_image_adds_only_the_app_and_its_pins(images, runtime):
    def files(image):
        listing = run_container(image, "-c", LIST_FILES, entrypoint="python", network="none")
        assert listing.returncode == 0, listing.stderr
        return set(listing.stdout.splitlines())

    added = files(images[runtime]) - files(STANDIN.format(runtime))
    app = {path for path in added if path.startswith("/app/")}
    assert {path.split("/")[2] for path in app} == {"launcher", "trainer", "sbom.cdx.json"}
    assert "/app/launcher/__main__.py" in app and not any("/tests/" in p for p in app)
    forbidden = re.compile(r"/\.cache/pip/|/\.git/|/run/secrets|pip_cert|/tmp/build|"
                           r"application_default_credentials|\.netrc$|\.pypirc$|pip\.conf$|"
                           r"__pycache__/.*\.pyc$")
    site = re.compile(r"/(site|dist)-packages/")
    assert [p for p in added if forbidden.search(p) and not site.search(p)] == []
    assert [p for p in added if p.endswith((".pem", ".crt", ".key")) and not site.search(p)
            ] == []


@pytest.mark.parametrize("runtime", ["xrt", "pjrt"])
def test_the_build_ca_bundle_is_nowhere_in_the_image_history(images, runtime):
    bundle = os.environ.get("PIP_CERT")
    if not bundle or not os.path.isfile(bundle):
        pytest.skip("no PIP_CERT bundle was passed to the build")
    with open(bundle) as handle:
        body = [line for line in handle.read().splitlines() if line and "-----" not in line]
    history = docker("history", "--no-trunc", images[runtime]).stdout
    assert "pip_cert" in history  # the secret's mount point is named ...
    assert body[-2] not in history  # ... its content is not


def test_make_push_to_a_real_registry_and_pull_back(images, registry):
    uri = "{}/tpu-xla/pytorch-xla-trainer:xrt".format(registry)
    docker("tag", images["xrt"], uri)
    pushed = make("push", "PROJECT=test", "RUNTIME=xrt", "IMAGE_URI=" + uri,
                  env=clean_environ(), timeout=1200)
    assert pushed.returncode == 0, pushed.stderr
    digest = re.search(r"digest: (sha256:[0-9a-f]{64})", pushed.stdout).group(1)
    request = urllib.request.Request(
        "http://{}/v2/tpu-xla/pytorch-xla-trainer/manifests/xrt".format(registry),
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    assert urllib.request.urlopen(request).headers["Docker-Content-Digest"] == digest
    built_id = image_id(images["xrt"])
    docker("rmi", uri)
    pulled = docker("pull", uri, timeout=1200)
    assert "Digest: {}".format(digest) in pulled.stdout
    assert image_id(uri) == built_id
    docker("rmi", uri)


def test_the_xrt_image_runs_as_any_user(images):
    """docs/submitting.md, "Running as another user": neither image sets a user, and the xrt
    image's launcher and Python run as uid 1000 on a read-only root. Its base keeps the
    interpreter in root's home (0700 on Debian): as another user it could not start (``exec:
    "python": executable file not found in $PATH``, exit 127). (torch_xla 1.11 cannot be had
    for the stand-in, so its training is not run here; the pjrt image trains, stops and
    resumes as uid 1000: test_vertex_and_local.py.)"""
    for image in images.values():
        assert docker("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() \
            in ("", "root", "0")
    launcher = run_container(images["xrt"], "--dry-run", "--xla-runtime=xrt", network="none",
                             user="1000:1000", read_only=True)
    assert launcher.returncode == 0, launcher.stderr
    assert "export USER=uid1000" in launcher.stdout and "export HOME=/tmp" in launcher.stdout
    python = run_container(images["xrt"], "-c", "import torch, trainer.checkpoints; "
                           "print(torch.__version__)", entrypoint="python", network="none",
                           user="1000:1000", read_only=True)
    assert python.returncode == 0, python.stderr
    assert python.stdout.startswith("1.11")


def build_cache_bytes():
    """The engine's build cache, as ``docker system df`` reports it (rounded up by its
    4-digit display, so that a cache at the bound is not read as over it)."""
    for line in docker("system", "df", "--format", "{{json .}}").stdout.splitlines():
        row = json.loads(line)
        if row["Type"] == "Build Cache":
            number, unit = re.fullmatch(r"([0-9.]+)([kMGT]?B)", row["Size"]).groups()
            return float(number) * DF_UNITS[unit] * (1 - 5e-4)
    raise AssertionError("docker system df has no build cache row")


def test_the_engine_of_its_own_keeps_its_build_cache_bounded(images):
    """Every run adds build contexts and a --no-cache rebuild (about 1.3 GB); unpruned they
    filled the disk. Starting the engine (every make test-images does) prunes to 12 GB
    (TPU_XLA_BUILD_CACHE)."""
    if os.environ.get("DOCKER_HOST") != "unix://{}/docker.sock".format(ENGINE_DIR):
        pytest.skip("the tier runs on an engine of the user's own, which is never pruned")
    environ = {key: value for key, value in clean_environ().items() if key != "DOCKER_HOST"}
    started = subprocess.run([str(REPO / "tests/images/engine.sh")], env=environ,
                             capture_output=True, text=True, timeout=600)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("DOCKER_HOST=unix://{}/docker.sock ".format(ENGINE_DIR))
    assert build_cache_bytes() <= BUILD_CACHE_BOUND
