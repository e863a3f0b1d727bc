"""The container tier's helpers (fixtures ``engine`` and ``images`` in ``conftest``): the
shipped Dockerfile built on both stand-in bases with a real Docker engine, and real containers
run the ways users run them (``tests/images``). ``bench/images.py`` times the same builds.

``make test-images`` finds or starts the engine (``tests/images/engine.sh``) and sets
``DOCKER_HOST`` and ``DOCKER``. Without an engine every test there *fails* with one line: the
tier is never skipped silently. The images are built once per session through the same
``make standin-base`` / ``make build`` targets users run.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Dict, List, Mapping, NamedTuple, Tuple

import pytest

from conftest import REPO, TESTS

DOCKER = os.environ.get("DOCKER", "docker")
RUNTIMES = ("xrt", "pjrt")
IMAGE = "tpu-xla-test:{}"
STANDIN = "tpu-standin:{}"
# Where tests/ is mounted in a container, for tests/fake_trainer.py.
TESTS_IN_CONTAINER = "/tests"


def docker(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run the docker client; on failure (with ``check``) the test fails with its stderr."""
    result = subprocess.run([DOCKER] + list(args), capture_output=True, text=True,
                            timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail("docker {} failed ({}): {}".format(args[0], result.returncode,
                                                       result.stderr.strip()[-2000:]),
                    pytrace=False)
    return result


def make(*args: str, env: Mapping[str, str], timeout: float = 1800
         ) -> subprocess.CompletedProcess:
    """Run a Makefile target as a user would, with this session's engine."""
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO)] + list(args),
                          env=dict(env, DOCKER=DOCKER), capture_output=True, text=True,
                          timeout=timeout)


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


def build_steps(runtime: str) -> List[Tuple[str, ...]]:
    """The ``make`` invocations that build profile ``runtime`` on its stand-in base."""
    return [("standin-base", "RUNTIME=" + runtime),
            ("build", "PROJECT=test", "RUNTIME=" + runtime,
             "BASE_IMAGE=" + STANDIN.format(runtime), "IMAGE_URI=" + IMAGE.format(runtime),
             # This engine has no bridge network (PLATFORM.md section 7).
             "DOCKER_BUILD_ARGS=--network=host")]


def build_images(env: Mapping[str, str]) -> Dict[str, str]:
    """Both profiles built with ``make standin-base`` and ``make build`` (the shipped
    Dockerfile, unchanged): runtime -> image name."""
    for runtime in RUNTIMES:
        previous = image_id(IMAGE.format(runtime))
        for step in build_steps(runtime):
            result = make(*step, env=env)
            if result.returncode != 0:
                pytest.fail("make {} failed: {}".format(" ".join(step),
                                                        result.stderr.strip()[-3000:]),
                            pytrace=False)
        # A rebuild leaves the last run's image untagged; without this every run keeps
        # gigabytes of them on the engine's disk.
        if previous and previous != image_id(IMAGE.format(runtime)):
            docker("rmi", previous, check=False)
    return {runtime: IMAGE.format(runtime) for runtime in RUNTIMES}


def image_id(name: str) -> str:
    """The image's id, or "" when the engine has no image by that name."""
    return docker("image", "inspect", "--format", "{{.Id}}", name, check=False).stdout.strip()


def image_size(name: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", name).stdout)


# A read-only root file system with a writable /tmp (GKE templates' securityContext).
ANY_USER_OPTIONS = ["--read-only", "--tmpfs", "/tmp:exec,mode=1777"]


def run_container(image: str, *args: str, env: Dict[str, str] = None,
                  volumes: Dict[str, str] = None, network: str = "host",
                  entrypoint: str = None, timeout: float = 600,
                  user: str = None, read_only: bool = False) -> subprocess.CompletedProcess:
    """``docker run --rm`` with ``-e`` variables and ``-v host:container`` mounts (``user``:
    ``--user``; ``read_only``: a read-only root file system with a ``/tmp`` in memory, as a
    pod with ``readOnlyRootFilesystem`` and an ``emptyDir`` there)."""
    command = ["run", "--rm", "--network", network] + (ANY_USER_OPTIONS if read_only else [])
    if user is not None:
        command += ["--user", user]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    for key, value in (env or {}).items():
        command += ["-e", "{}={}".format(key, value)]
    for host_path, container_path in (volumes or {}).items():
        command += ["-v", "{}:{}".format(host_path, container_path)]
    return docker(*(command + [image] + list(args)), timeout=timeout, check=False)


def fake_trainer_mounts(out_dir: str) -> Dict[str, str]:
    """Mounts that let a container exec ``tests/fake_trainer.py``, recording into ``out_dir``
    (``/out`` inside)."""
    return {str(TESTS): TESTS_IN_CONTAINER + ":ro", out_dir: "/out"}


def container_environ(cloud) -> Dict[str, str]:
    """The emulated Cloud TPU API and metadata server, as the container reaches them
    (``--network host``: the host's loopback is the container's)."""
    return dict(cloud.environ, CLOUDSDK_CONFIG="/tmp/gcloud")  # the host's temp dir isn't there


def stderr_lines(result: subprocess.CompletedProcess) -> List[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def wait_for_log(name: str, needle: str, timeout: float = 300) -> None:
    """Wait until container ``name`` has logged ``needle`` (stdout or stderr)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = docker("logs", name)
        if needle in logs.stdout + logs.stderr:
            return
        time.sleep(0.2)
    raise AssertionError("container {} never logged {!r}".format(name, needle))


class Stopped(NamedTuple):
    """A container ``docker stop`` ended: its exit code, its logs and how long the stop took."""

    code: int
    stdout: str
    stderr: str
    seconds: float


def stop_when_logged(run_args: List[str], needle: str, stop_after: int = 30,
                     timeout: float = 300) -> Stopped:
    """``docker run -d RUN_ARGS``; once the container logged ``needle``, ``docker stop`` it as
    the platform does (SIGTERM, SIGKILL ``stop_after`` seconds later). The container is
    removed either way."""
    name = "tpu-xla-stop-" + uuid.uuid4().hex[:8]
    docker("run", "-d", "--name", name, *run_args)
    try:
        wait_for_log(name, needle, timeout)
        started = time.monotonic()
        docker("stop", "--time", str(stop_after), name, timeout=stop_after + 90)
        seconds = time.monotonic() - started
        code = int(docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout)
        logs = docker("logs", name)
    finally:
        docker("rm", "-f", name, check=False)
    return Stopped(code, logs.stdout, logs.stderr, seconds)
