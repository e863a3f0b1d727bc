"""Shared fixtures: the emulated Cloud TPU API, a fake TPU sysfs, and launcher runners.

The suite runs in three pytest sessions (see the Makefile), because TensorFlow and torch_xla
abort when loaded into one process: ``tests/launcher`` and ``tests/delivery`` without the
``tensorflow`` marker, ``tests/launcher`` with it, and ``tests/trainer``. Launcher tests never
import torch_xla; only tests marked ``tensorflow`` import TensorFlow in-process (subprocesses
may import either).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
from hypothesis import settings

import fake_cloud_tpu
import time_budget

REPO = Path(__file__).resolve().parent.parent
# Where make venv builds the region JPEG decoder (imagebuild/jpeg_region.py): a C compiler
# and libjpeg-turbo's headers; elsewhere its tests skip and say why.
REGION_DECODER_BUILDABLE = (shutil.which("cc") is not None
                            and Path("/usr/include/jpeglib.h").exists())
TESTS = REPO / "tests"
SHARED = REPO.parent / "shared"
MNIST_SUBSET = SHARED / "data" / "mnist-subset"

# Property tests: ``make test`` runs the "ci" profile, the same examples on every machine and
# every run (a seed derived from each test; no example database, so nothing a machine saw
# before changes what it runs). ``make fuzz`` runs "fuzz": random seeds, FUZZ_SCALE times the
# examples, failures kept in .hypothesis/ and printed with how to reproduce them.
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
FUZZ_SCALE = int(os.environ.get("FUZZ_SCALE", "30"))
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("fuzz", derandomize=False, print_blob=True)
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(count: int) -> int:
    """A property test's number of examples: ``count`` under ``make test``, FUZZ_SCALE times
    as many under ``make fuzz``."""
    return count * FUZZ_SCALE if HYPOTHESIS_PROFILE == "fuzz" else count


def pytest_runtest_logreport(report) -> None:
    time_budget.record(report)


def pytest_terminal_summary(terminalreporter) -> None:
    """A warning for each test over its tier's time budget (tests/time_budget.py)."""
    lines = time_budget.summary_lines()
    if lines:
        terminalreporter.section("over the time budget", sep="=", yellow=True)
        for line in lines:
            terminalreporter.line("WARNING: " + line, yellow=True)


def pytest_collection_modifyitems(items) -> None:
    """Mark every hypothesis test ``property``, so ``make fuzz`` can select them."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


# The exact values legacy AI Platform passed in the article the design follows (seed 003).
SEED_TPU_CONFIG = json.dumps({"project": fake_cloud_tpu.PROJECT, "zone": fake_cloud_tpu.ZONE,
                              "tpu_node_name": fake_cloud_tpu.NODE})
SEED_TF_CONFIG = (
    '{"cluster":{"master":["127.0.0.1:2222"]},"environment":"cloud","task":{"type":"master",'
    '"index":0},"job":"{\\n \\"scale_tier\\": \\"CUSTOM\\",\\n \\"master_type\\": '
    '\\"n1-highcpu-16\\",\\n \\"worker_type\\": \\"cloud_tpu\\",\\n \\"worker_count\\": '
    '\\"1\\",\\n \\"region\\": \\"us-central1\\",\\n \\"master_config\\": {\\n '
    '\\"image_uri\\": \\"gcr.io/ml-3d-segmentation/mnist_pytorch_custom_container:'
    'mnist_pytorch_tpu\\"\\n },\\n \\"worker_config\\": {\\n \\"accelerator_config\\": {\\n '
    '\\"count\\": \\"8\\",\\n \\"type\\": \\"TPU_V3\\"\\n },\\n \\"tpu_tf_version\\": '
    '\\"1.15\\"\\n }\\n}"}')

# Variables of the developer's machine that would change what the launcher detects.
_PLATFORM_VARIABLES = ("TPU_CONFIG", "TF_CONFIG", "CLUSTER_SPEC", "TPU_NAME", "XRT_TPU_CONFIG",
                       "TPU_IP_ADDRESS", "PJRT_DEVICE", "XRT_WORKERS", "XRT_DEVICE_MAP",
                       "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES",
                       "GOOGLE_APPLICATION_CREDENTIALS", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS")


# make test runs the launcher, delivery and image-tool tests on two pytest-xdist workers.
# Tests that run make targets or documented blocks in the checkout write its build/ and runs/
# (build/vertex-job, build/gke-last-job, runs/rehearsal-DATE) and look at what appeared there:
# their modules carry this mark, and make test runs them apart, in one process, in order.
WRITES_THE_CHECKOUT = pytest.mark.writes_checkout


def wait_for_line(process, needle: str, timeout: float = 180) -> None:
    """Read ``process``'s stdout until a line contains ``needle``; fails if it ends or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if needle in line:
            return
        if not line and process.poll() is not None:
            break
    raise AssertionError("the trainer never printed {!r}".format(needle))


# What gcloud prints for any command while no account is logged in (gcloud auth list: none).
NO_ACCOUNT = """ERROR: (gcloud.artifacts.docker.images.describe) You do not currently have an \
active account selected.
Please run:

  $ gcloud auth login

to obtain new credentials.

If you have already logged in with a different account, run:

  $ gcloud config set account ACCOUNT

to select an already authenticated account to use."""


def clean_environ(**extra: str) -> Dict[str, str]:
    """This process's environment without any platform variable, plus ``extra``."""
    # XLA_USE_SPMD is how torch_xla marks *this* process as SPMD (the spmd session's): a
    # child must decide for itself.
    env = {k: v for k, v in os.environ.items()
           if k not in _PLATFORM_VARIABLES and not k.startswith("LAUNCHER_")
           and k != "XLA_USE_SPMD"}
    env.update(extra)
    return env


# XLA's CPU backend with LLVM at optimisation level 0: the same graph, compiled about 5 times
# faster into slower code (MobileNet v3 small's training step: 29 s instead of 150 s on this
# machine). For a trainer process whose test checks what the trainer does with a model (it
# builds, trains, stops), not how fast the compiled code runs.
QUICK_COMPILE = "--xla_backend_optimization_level=0"


def quick_compile(environ: Dict[str, str]) -> Dict[str, str]:
    """``environ`` (for a child process) with ``QUICK_COMPILE`` added to its ``XLA_FLAGS``."""
    environ["XLA_FLAGS"] = (environ.get("XLA_FLAGS", "") + " " + QUICK_COMPILE).strip()
    return environ


@pytest.fixture(scope="session")
def metadata_server():
    """One GCE metadata server per session: oauth2client reads its address at import time."""
    server = fake_cloud_tpu.FakeMetadataServer().start()
    yield server
    server.stop()


@pytest.fixture
def cloud(tmp_path, metadata_server):
    """A running emulated Cloud TPU API + metadata server; ``cloud.environ`` points at them."""
    servers = _Cloud(tmp_path, metadata_server)
    yield servers
    servers.stop()


class _Cloud:
    def __init__(self, tmp_path: Path, metadata: fake_cloud_tpu.FakeMetadataServer) -> None:
        self.metadata = metadata
        self.api = fake_cloud_tpu.FakeCloudTpuApi().start()
        self.sdk_config = tmp_path / "gcloud"
        self.sdk_config.mkdir()

    @property
    def environ(self) -> Dict[str, str]:
        return fake_cloud_tpu.client_environ(self.api.discovery_url, self.metadata.host,
                                             str(self.sdk_config))

    def stop(self) -> None:
        self.api.stop()


GVNIC = "0x0042"  # Google's network card, on VMs with and without TPUs


def make_tpu_sysfs(root: Path, device_id: str = "0x005e", chips: int = 4,
                   others: Sequence[str] = (GVNIC,)) -> Path:
    """A fake ``/sys/bus/pci/devices`` under ``root``: ``chips`` Google PCI functions of
    ``device_id`` (a TPU by default) after Google devices of the ids ``others`` (a gVNIC, as
    on every TPU VM)."""
    ids = list(others) + [device_id] * chips
    for index, pci_id in enumerate(ids):
        device = root / "sys" / "bus" / "pci" / "devices" / "0000:00:{:02x}.0".format(4 + index)
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x1ae0\n")
        (device / "device").write_text(pci_id + "\n")
    return root


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """tempfile's folder for this test, empty, so that what a test leaves behind there (files
    staged for an upload, working folders) can be seen."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def trainer_out(tmp_path) -> Path:
    return tmp_path / "trainer.jsonl"


def read_records(path: Path) -> List[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RecordingExec:
    """Stands in for os.execvpe, which would replace the test process."""

    def __init__(self, error=None):
        self.calls, self.error = [], error

    def __call__(self, file, args, env):
        if self.error:
            raise self.error
        self.calls.append((file, list(args), dict(env)))


def launcher_command(*args: str, prefix: Optional[List[str]] = None) -> List[str]:
    return list(prefix or []) + [sys.executable, "-m", "launcher"] + list(args)


def run_launcher(*args: str, env: Dict[str, str], timeout: float = 120,
                 prefix: Optional[List[str]] = None) -> subprocess.CompletedProcess:
    """Run ``python -m launcher ARGS`` from the repository, capturing its output."""
    return subprocess.run(launcher_command(*args, prefix=prefix), cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=timeout)


def fake_trainer_env(out: Path, **extra: str) -> Dict[str, str]:
    """Environment that makes the launcher exec ``tests/fake_trainer.py`` writing to ``out``."""
    return clean_environ(LAUNCHER_TRAINER="python {}".format(TESTS / "fake_trainer.py"),
                         FAKE_TRAINER_OUT=str(out), **extra)


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server (the real Go binary) on loopback for gs:// paths."""
    import fake_gcs

    server = fake_gcs.started()
    yield server
    server.stop()


def _new_bucket(url: str, monkeypatch, tmp_path):
    """A fresh bucket on the fake-gcs-server at ``url``; google-cloud-storage points at it."""
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
    name = "bucket-" + tmp_path.name.lower().replace("_", "-")[-40:]
    return storage.Client(project="test").create_bucket(name)


@pytest.fixture
def gcs(gcs_server, monkeypatch, tmp_path):
    """A fresh bucket in the session's fake-gcs-server."""
    return _new_bucket(gcs_server.url, monkeypatch, tmp_path)


@pytest.fixture
def faulty_gcs(monkeypatch, tmp_path):
    """(bucket, proxy): a bucket on a fake-gcs-server of this test's own, and the fault proxy
    in front of it (``tests/gcs_fault_proxy.py``); point the code under test at ``proxy.url``.
    A server of its own, so that the broken and held requests never touch other tests'."""
    import fake_gcs
    from gcs_fault_proxy import GcsFaultProxy

    server = fake_gcs.started()
    proxy = GcsFaultProxy(server.url).start()
    try:
        yield _new_bucket(server.url, monkeypatch, tmp_path), proxy
    finally:
        proxy.stop()
        server.stop()


def upload_folder(folder: Path, bucket, prefix: str, pattern: str = "*") -> str:
    """Copies the files of ``folder`` matching ``pattern`` to ``gs://BUCKET/PREFIX/``;
    returns that URI."""
    for path in sorted(folder.glob(pattern)):
        bucket.blob("{}/{}".format(prefix, path.name)).upload_from_filename(str(path))
    return "gs://{}/{}".format(bucket.name, prefix)


def copy_mnist_to_bucket(bucket, prefix: str = "mnist") -> str:
    return upload_folder(MNIST_SUBSET, bucket, prefix, "*.gz")


needs_mnist = pytest.mark.skipif(not MNIST_SUBSET.is_dir(),
                                 reason="../shared/data/mnist-subset is not present")


@pytest.fixture(scope="session")
def engine() -> str:
    """A Docker engine (``make test-images`` starts one); fails, never skips, without one."""
    import containers

    return containers.check_engine()


@pytest.fixture(scope="session")
def images(engine) -> Dict[str, str]:
    """Both image profiles, built on the stand-in bases: runtime -> image name."""
    import containers

    return containers.build_images(clean_environ())



@pytest.fixture(scope="session")
def registry(engine, tmp_path_factory):
    """Debian's docker-registry (the real distribution registry) on a free loopback port, one
    per session (images pushed by one test share their layers with the next)."""
    tmp_path = tmp_path_factory.mktemp("registry")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\n"
                      "http:\n  addr: 127.0.0.1:{}\nlog:\n  level: error\n".format(
                          tmp_path / "storage", port))
    process = subprocess.Popen(["docker-registry", "serve", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    address = "127.0.0.1:{}".format(port)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen("http://{}/v2/".format(address), timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    yield address
    process.terminate()
    process.wait(10)


def make_image_folder(root: Path, classes: int = 3, per_class: int = 4) -> Path:
    """A class-folder tree of flat-colour PNGs, ``per_class`` per class and split."""
    from PIL import Image

    for split in ("train", "val"):
        for label in range(classes):
            folder = root / split / "class{}".format(label)
            folder.mkdir(parents=True)
            for index in range(per_class):
                color = (80 * label, 255 - 60 * index, 120)
                Image.new("RGB", (40, 36), color).save(str(folder / "{}.png".format(index)))
    return root


@pytest.fixture(scope="session")
def photos(tmp_path_factory) -> Path:
    """A class-folder tree of real photographs (``tests/photos.py``: 8 classes, 24 train and
    8 val images each, with ImageNet's quirks)."""
    import photos as photo_set

    return photo_set.build(tmp_path_factory.mktemp("photos"))


@pytest.fixture(scope="session")
def photo_shards(photos, tmp_path_factory) -> Path:
    """``photos`` as shards of 24 images, in a local folder (8 train and 3 val shards)."""
    from trainer.data.make_shards import convert

    dest = tmp_path_factory.mktemp("photo-shards")
    convert(str(photos), str(dest), shard_size=24, workers=0)  # in this process
    return dest
