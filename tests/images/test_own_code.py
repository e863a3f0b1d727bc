"""The guide's example (docs/own-code.md, files in docs/examples/own-code/), built on the pjrt
image and run as the page shows: 4 XLA CPU devices, `docker stop` mid-training leaves a
checkpoint and exit 143, and the next run resumes from it and finishes."""

import re

from conftest import REPO
from containers import docker, stop_when_logged

EXAMPLE = REPO / "docs" / "examples" / "own-code"
OWN_IMAGE = "tpu-xla-own-code:test"


def test_the_guides_example_checkpoints_on_docker_stop_and_resumes(images, tmp_path):
    docker("build", "--build-arg", "BASE_IMAGE=" + images["pjrt"], "-t", OWN_IMAGE,
           str(EXAMPLE))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    run = ["-e", "CPU_NUM_DEVICES=4", "-e", "AIP_CHECKPOINT_DIR=/ckpt",
           "-v", "{}:/ckpt".format(ckpt)]
    logs = stop_when_logged(["--network", "none"] + run + [OWN_IMAGE, "--steps=100000"],
                            "step 20 ")
    assert logs.code == 143, logs.stderr
    assert "launcher: hand-over: dumb-init (PID 1) runs the command" in logs.stderr
    stopped = re.search(r"stopped by SIGTERM at step (\d+): checkpoint saved", logs.stdout)
    assert stopped, logs.stdout + logs.stderr
    step = int(stopped.group(1))
    assert (ckpt / "checkpoint.pt").is_file() and not (ckpt / "checkpoint.pt.tmp").exists()

    resumed = docker("run", "--rm", "--network", "none", *run, OWN_IMAGE,
                     "--steps={}".format(step + 20), check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from step {}".format(step) in resumed.stdout
    assert "done at step {}".format(step + 20) in resumed.stdout
