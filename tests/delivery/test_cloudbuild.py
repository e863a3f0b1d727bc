"""cloudbuild.yaml's build step run as Cloud Build would run it (substitutions applied, ``$$``
unescaped, bash in the builder), with a recording ``docker``: the base follows ``_RUNTIME``
(the pairing table) unless ``_BASE_IMAGE`` is given, and both the moving and the immutable tag
are built and pushed."""

import json
import os
import re
import subprocess

import pytest
import yaml

from conftest import REPO
from jobspec.images import DEFAULT_BASES

BUILD = yaml.safe_load((REPO / "cloudbuild.yaml").read_text())
BUILT_IN = {"PROJECT_ID": "my-proj", "BUILD_ID": "1b2c-3d4e"}


def substitute(text, values):
    """Cloud Build's substitution: ${NAME} (and $NAME) replaced, then $$ becomes $."""
    text = re.sub(r"(?<!\$)\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: values[m.group(1)], text)
    return text.replace("$$", "$")


def run_step(tmp_path, **substitutions):
    values = dict(BUILD["substitutions"], **BUILT_IN)
    values.update(substitutions)
    [step] = BUILD["steps"]
    log = tmp_path / "docker.jsonl"
    (tmp_path / "docker").write_text(
        "#!/bin/sh\npython3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\" "
        ">> {}\n".format(log))
    (tmp_path / "docker").chmod(0o755)
    env = dict(item.split("=", 1) for item in (substitute(e, values) for e in step["env"]))
    env["PATH"] = "{}:{}".format(tmp_path, os.environ["PATH"])
    args = [substitute(arg, values) for arg in step["args"]]
    result = subprocess.run([step["entrypoint"]] + args, env=env, cwd=str(REPO),
                            capture_output=True, text=True)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, calls


@pytest.mark.parametrize("runtime", sorted(DEFAULT_BASES))
def test_the_base_follows_the_runtime_and_both_tags_are_pushed(tmp_path, runtime):
    result, calls = run_step(tmp_path, _RUNTIME=runtime)
    assert result.returncode == 0, result.stderr
    image = "us-central1-docker.pkg.dev/my-proj/pytorch-xla/pytorch-xla-trainer:" + runtime
    assert calls == [
        ["build", "--build-arg", "BASE_IMAGE=" + DEFAULT_BASES[runtime], "--build-arg",
         "RUNTIME=" + runtime, "--tag", image, "--tag", image + "-1b2c-3d4e", "."],
        ["push", image], ["push", image + "-1b2c-3d4e"]]


def test_given_base_and_image_win(tmp_path):
    result, calls = run_step(tmp_path, _RUNTIME="xrt", _BASE_IMAGE="gcr.io/tpu-pytorch/xla:"
                             "r1.12_3.7", _IMAGE_URI="europe-west4-docker.pkg.dev/p/r/i:v2")
    assert result.returncode == 0, result.stderr
    assert calls[0][2] == "BASE_IMAGE=gcr.io/tpu-pytorch/xla:r1.12_3.7"
    assert calls[1:] == [["push", "europe-west4-docker.pkg.dev/p/r/i:v2"],
                         ["push", "europe-west4-docker.pkg.dev/p/r/i:v2-1b2c-3d4e"]]


def test_an_unknown_runtime_stops_before_building(tmp_path):
    result, calls = run_step(tmp_path, _RUNTIME="tpu")
    assert result.returncode == 1 and calls == []
    assert "_RUNTIME must be xrt or pjrt, got 'tpu'" in result.stderr


def test_a_machine_and_disk_that_fit_a_7_gb_base():
    assert BUILD["options"]["machineType"] == "E2_HIGHCPU_8"
    assert int(BUILD["options"]["diskSizeGb"]) >= 100
