"""The container tier's helpers (fixtures ``engine`` and ``images`` in ``conftest``): the
shipped Dockerfile built on both stand-in bases with a real Docker engine, and real containers
run the ways users run them (``tests/images``).

``make test-images`` finds or starts the engine (``tests/images/engine.sh``) and sets
``DOCKER_HOST`` and ``DOCKER``. Without an engine every test there *fails* with one line: the
tier is never skipped silently. The images are built once per session through the same
``make standin-base`` / ``make build`` targets users run; build times and image sizes are
printed at the end of the session (the README quotes them).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Mapping

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCKER = os.environ.get("DOCKER", "docker")
RUNTIMES = ("xrt", "pjrt")
IMAGE = "tpu-xla-test:{}"
STANDIN = "tpu-standin:{}"
REPORT: List[str] = []  # build times and sizes, printed at the end of the session


def docker(*args: str, timeout: float = 600, check: bool = True,
           **kwargs) -> subprocess.CompletedProcess:
    """Run the docker client; on failure (with ``check``) the test fails with its stderr."""
    result = subprocess.run([DOCKER] + list(args), capture_output=True, text=True,
                            timeout=timeout, **kwargs)
    if check and result.returncode != 0:
        pytest.fail("docker {} failed ({}): {}".format(args[0], result.returncode,
                                                       result.stderr.strip()[-2000:]),
                    pytrace=False)
    return result


def make(*args: str, env: Mapping[str, str], timeout: float = 1800
         ) -> subprocess.CompletedProcess:
    """Run a Makefile target as a user would, with this session's engine."""
    env = dict(env, DOCKER=DOCKER)
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO)] + list(args),
                          env=env, capture_output=True, text=True, timeout=timeout)


def check_engine() -> str:
    """The engine's address; fails the test (never skips) when none answers."""
    host = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        answer = subprocess.run([DOCKER, "info", "--format", "{{.ServerVersion}}"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.fail("no Docker engine for the container tier ({}): run `make test-images`, "
                    "which starts one as root".format(error), pytrace=False)
    if answer.returncode != 0:
        pytest.fail("no Docker engine answers at {}: run `make test-images`, which starts one "
                    "as root ({})".format(host, answer.stderr.strip().splitlines()[-1:]),
                    pytrace=False)
    return host


def build_images(env: Mapping[str, str]) -> Dict[str, str]:
    """Both profiles built with ``make standin-base`` and ``make build`` (the shipped
    Dockerfile, unchanged): runtime -> image name."""
    built = {}
    for runtime in RUNTIMES:
        for target, args in (
                ("standin-base", ["RUNTIME=" + runtime]),
                ("build", ["PROJECT=test", "RUNTIME=" + runtime,
                           "BASE_IMAGE=" + STANDIN.format(runtime),
                           "IMAGE_URI=" + IMAGE.format(runtime),
                           # This engine has no bridge network (PLATFORM.md section 7).
                           "DOCKER_BUILD_ARGS=--network=host"])):
            started = time.monotonic()
            result = make(target, *args, env=env)
            if result.returncode != 0:
                pytest.fail("make {} {} failed: {}".format(target, " ".join(args),
                                                           result.stderr.strip()[-3000:]),
                            pytrace=False)
            REPORT.append("make {:<12} RUNTIME={:<4}  {:6.1f} s".format(
                target, runtime, time.monotonic() - started))
        built[runtime] = IMAGE.format(runtime)
    for runtime in RUNTIMES:
        for name in (STANDIN.format(runtime), IMAGE.format(runtime)):
            size = int(docker("image", "inspect", "--format", "{{.Size}}", name).stdout)
            REPORT.append("{:<20} {:6.2f} GB".format(name, size / 1e9))
    return built


def run_container(image: str, *args: str, env: Dict[str, str] = None,
                  volumes: Dict[str, str] = None, network: str = "host",
                  entrypoint: str = None, name: str = None, timeout: float = 600,
                  ) -> subprocess.CompletedProcess:
    """``docker run --rm`` with ``-e`` variables and ``-v host:container`` mounts."""
    command = ["run", "--rm", "--network", network]
    if name:
        command += ["--name", name]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    for key, value in (env or {}).items():
        command += ["-e", "{}={}".format(key, value)]
    for host_path, container_path in (volumes or {}).items():
        command += ["-v", "{}:{}".format(host_path, container_path)]
    return docker(*(command + [image] + list(args)), timeout=timeout, check=False)


def container_environ(cloud) -> Dict[str, str]:
    """The emulated Cloud TPU API and metadata server, as the container reaches them
    (``--network host``: the host's loopback is the container's)."""
    env = dict(cloud.environ)
    env["CLOUDSDK_CONFIG"] = "/tmp/gcloud"  # the host's temp folder is not mounted
    return env


def stderr_lines(result: subprocess.CompletedProcess) -> List[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def json_lines(text: str) -> List[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
