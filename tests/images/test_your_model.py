"""docs/examples/your-model/ built FROM the pjrt image that this tier builds, run by the
launcher: the bundled ImageNet trainer builds the user's model from
``--model=mymodels.tiny:tiny_net``; ``docker stop`` (SIGTERM) after its first step exits 143
with a checkpoint, and the next run resumes from it and completes. And the trainer.train
example (docs/examples/train-api/) in the same image, once trainer.train exists."""

import json
import re

import pytest

import trainer
from conftest import REPO
from containers import docker, run_container, stop_when_logged

EXAMPLES = REPO / "docs" / "examples"
MODEL = "--model=mymodels.tiny:tiny_net"
# Fake data at 16 px (tiny_net takes multiples of 4): one compile of a few seconds.
ARGS = [MODEL, "--fake_data", "--image_size=16", "--batch_size=8", "--num_epochs=1",
        "--log_steps=1", "--warmup_epochs=0", "--num_workers=0", "--job-dir=/job"]


def built(example, base, tag):
    """``docker build`` of ``docs/examples/EXAMPLE`` FROM ``base``, as the guide writes it."""
    docker("build", "--build-arg", "BASE_IMAGE=" + base, "-t", tag, str(EXAMPLES / example),
           timeout=900)
    return tag


@pytest.fixture(scope="module")
def your_model_image(images):
    image = built("your-model", images["pjrt"], "tpu-xla-test:your-model")
    yield image
    docker("rmi", image, check=False)


def test_your_model_by_flag_stops_on_sigterm_with_a_checkpoint_and_resumes(
        your_model_image, tmp_path):
    logs = stop_when_logged(["--network", "none", "-v", "{}:/job".format(tmp_path),
                             your_model_image] + ARGS + ["--num_steps=100000"], "step 1/",
                            stop_after=60)
    assert logs.code == 143, logs.stderr
    assert "imagenet-mymodels.tiny:tiny_net on 1 of 1 device" in logs.stderr + logs.stdout
    stopped = re.search(r"stopped by SIGTERM at step (\d+)", logs.stderr + logs.stdout)
    assert stopped, logs.stderr
    step = int(stopped.group(1))
    assert (tmp_path / "checkpoints" / "ckpt-{:09d}.pt".format(step)).is_file()
    resumed = run_container(your_model_image, *(ARGS + ["--num_steps={}".format(step + 2)]),
                            volumes={str(tmp_path): "/job"}, network="none")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from /job/checkpoints/ckpt-{:09d}.pt: epoch 1, step {}".format(
        step, step) in resumed.stdout + resumed.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["trainer"], summary["global_step"]) == (
        "imagenet-mymodels.tiny:tiny_net", step + 2)


@pytest.mark.skipif(not hasattr(trainer, "train"),
                    reason="trainer.train (issue 45 item 3) is not in this checkout yet")
def test_the_train_api_example_trains_in_the_image(images, tmp_path):
    image = built("train-api", images["pjrt"], "tpu-xla-test:train-api")
    try:
        result = run_container(image, "--job_dir=/job", "--num_epochs=2", network="none",
                               volumes={str(tmp_path): "/job"})
    finally:
        docker("rmi", image, check=False)
    assert result.returncode == 0, result.stderr
    assert "launcher: hand-over: dumb-init (PID 1) runs the command" in result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs"] == 2, summary
