"""The image rehearsed without a Docker engine: its file layout assembled from the Dockerfile,
its ENTRYPOINT run exactly as written as PID 1 (``unshare --pid --fork``), with the seed's
TF_CONFIG/TPU_CONFIG, platform-style arguments and the emulated Cloud TPU API."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import fake_cloud_tpu as fake
from conftest import SEED_TF_CONFIG, SEED_TPU_CONFIG, TESTS, clean_environ, read_records
from image import assemble, read_image

pytestmark = pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                                reason="needs unshare and root for a PID namespace")


def test_entrypoint_as_pid1_resolves_the_tpu_and_passes_everything_on(cloud, tmp_path):
    spec = read_image("xrt")
    workdir = assemble(spec, tmp_path / "image")
    shutil.copy2(str(TESTS / "fake_trainer.py"), str(workdir / "fake_trainer.py"))
    out = tmp_path / "trainer.jsonl"
    cloud.api.answer_with(fake.state("CREATING"), fake.ready(ip="10.240.3.4"))
    env = clean_environ(**spec.env)
    env.update(cloud.environ, TPU_CONFIG=SEED_TPU_CONFIG, TF_CONFIG=SEED_TF_CONFIG,
               PYTHONPATH=str(workdir),  # the image's /app, relocated
               # The xrt image's torch_xla 1.12 is XRT; this venv has 2.9, so say it.
               LAUNCHER_XLA_RUNTIME="xrt",
               # Stand-in for the image's trainer, recording what it receives.
               LAUNCHER_TRAINER="python fake_trainer.py", FAKE_TRAINER_OUT=str(out),
               FAKE_TRAINER_WAIT="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    args = ["--job-dir=gs://my-bucket/jobs/7", "--lr=0.1"]
    process = subprocess.Popen(["unshare", "--pid", "--fork"] + spec.entrypoint + args,
                               cwd=str(workdir), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not read_records(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        [start] = read_records(out)
        # A command of the user's: dumb-init is PID 1 and runs it as its child (launcher.init).
        assert (start["pid"] > 1, start["ppid"], start["argv"]) == (True, 1, args)
        assert start["env"]["XRT_TPU_CONFIG"] == "tpu_worker;0;10.240.3.4:8470"
        with open("/proc/{0}/task/{0}/children".format(process.pid)) as handle:
            pid1 = int(handle.read().split()[0])
        os.kill(pid1, signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        while len(read_records(out)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert read_records(out)[-1]["event"] == "sigterm"
        assert process.wait(10) == 0
    finally:
        process.kill()
