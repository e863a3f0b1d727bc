"""The Dockerfile as a parser reads it: sources exist, exec-form entrypoint, trusted bases,
the trainer chosen by ENV, a tight build context."""

import re

import pytest
import yaml

from conftest import REPO
from image import read_image
from jobspec.images import DEFAULT_BASES as BASES
from jobspec.images import XRT_BASE_RUNTIMES
from launcher.runtime_env import XRT_IMAGE


@pytest.mark.parametrize("runtime", ["xrt", "pjrt"])
def test_every_copy_source_exists(runtime):
    spec = read_image(runtime)
    assert spec.copies
    for source, _ in spec.copies:
        assert (REPO / source).exists(), source


def test_entrypoint_is_exec_form_and_its_module_exists():
    spec = read_image()
    assert spec.entrypoint == ["python", "-m", "launcher"]
    assert ("launcher/", "/app/launcher/") in spec.copies
    assert (REPO / "launcher" / "__main__.py").is_file()


def test_trainer_is_chosen_by_env_and_exists():
    spec = read_image()
    module = spec.env["LAUNCHER_TRAINER"].split()[-1]
    assert (REPO / (module.replace(".", "/") + ".py")).is_file()
    assert spec.env["PYTHONPATH"] == spec.workdir


def test_profiles_and_trusted_registries_match_the_makefile():
    makefile = (REPO / "Makefile").read_text()
    trusted = yaml.safe_load((REPO / ".hadolint.yaml").read_text())["trustedRegistries"]
    assert read_image().base_image == BASES["xrt"]  # the default profile
    for runtime, base in BASES.items():
        assert "BASE_IMAGE_{} := {}".format(runtime, base) in makefile
        assert base.split("/")[0] in trusted


def test_image_pins_are_exact():
    for runtime in BASES:
        lines = [line for line in (REPO / "requirements" / "image-{}.txt".format(runtime))
                 .read_text().splitlines() if line and not line.startswith("#")]
        assert lines and all(re.match(r"^[A-Za-z0-9_.-]+==[\w.]+$", line) for line in lines)
        assert not any(line.startswith("cloud-tpu-client") for line in lines)
    assert "tensorflow-cpu==2.11.0" in (REPO / "requirements/image-xrt.txt").read_text()


def test_dockerignore_keeps_tests_venv_and_data_out():
    rules = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert rules[0] == "*" and "!launcher/" in rules and "!trainer/" in rules
    assert not any(rule.startswith("!tests") or rule.startswith("!.venv") for rule in rules)


def test_every_default_follows_the_pairing_table():
    """The default XRT base is the one legacy AI Platform's newest runtime accepts."""
    assert XRT_BASE_RUNTIMES[BASES["xrt"]] == "pytorch-1.11"
    cloudbuild = yaml.safe_load((REPO / "cloudbuild.yaml").read_text())
    assert cloudbuild["substitutions"]["_RUNTIME"] == "xrt"  # its base: test_cloudbuild.py
    assert XRT_IMAGE == BASES["xrt"]  # named by the launcher's TPU-node-on-PJRT hint
    for template in sorted((REPO / "config").glob("ai-platform-*.yaml")):
        worker = yaml.safe_load(template.read_text())["trainingInput"]["workerConfig"]
        assert worker["tpuTfVersion"] == XRT_BASE_RUNTIMES[BASES["xrt"]], template.name
