"""jobspec: the templates pass; broken specs fail with the right one-line finding."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from jobspec.check import check_job, check_pairing, set_image
from jobspec.cloudbuild import check_cloudbuild
from jobspec.images import PJRT_BASE

TEMPLATES = sorted((REPO / "config").glob("*.yaml"))
V3 = yaml.safe_load((REPO / "config" / "ai-platform-tpu-v3.yaml").read_text())
set_image(V3, "gcr.io/my-project/trainer:xrt")


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_template_passes_once_the_image_is_set(template):
    result = subprocess.run([sys.executable, "-m", "jobspec", "check", str(template),
                             "--image", "gcr.io/my-project/trainer:v1"], cwd=str(REPO),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def broken(change):
    job = copy.deepcopy(V3)
    change(job["trainingInput"])
    return job


@pytest.mark.parametrize("job, path, text", [
    (broken(lambda t: t["workerConfig"]["acceleratorConfig"].update(count=4)),
     "trainingInput.workerConfig.acceleratorConfig.count", "TPU_V3 takes 8"),
    (broken(lambda t: t.update(parameterServerCount=1, parameterServerType="n1-standard-4")),
     "trainingInput.parameterServerCount", "cannot have parameter servers"),
    (broken(lambda t: t["workerConfig"].pop("tpuTfVersion")),
     "trainingInput.workerConfig.tpuTfVersion", "is required"),
    (broken(lambda t: t["workerConfig"]["acceleratorConfig"].update(type="TPU_V9")),
     "trainingInput.workerConfig.acceleratorConfig.type", "not one of the API's values"),
    (broken(lambda t: t["workerConfig"]["acceleratorConfig"].update(type="TPU_V2_POD",
                                                                    count=64)),
     "trainingInput.workerConfig.acceleratorConfig.count", "32 or 128 or 256 or 512"),
    (broken(lambda t: t["masterConfig"].update(imageUri="gcr.io/YOUR_PROJECT/x:y")),
     "trainingInput.masterConfig.imageUri", "placeholder"),
    (broken(lambda t: t.update(workerCount=2)), "trainingInput.workerCount", "exactly one"),
    (broken(lambda t: t.update(workerType="n1-standard-8")), "trainingInput.workerType",
     "cloud_tpu"),
    (broken(lambda t: t.update(scaleTeir="CUSTOM")), "trainingInput.scaleTeir",
     "did you mean scaleTier?"),
    (broken(lambda t: t["workerConfig"]["acceleratorConfig"].update(type="NVIDIA_TESLA_T4")),
     "trainingInput.workerConfig.acceleratorConfig.type", "not a TPU type"),
])
def test_broken_specs_fail_with_the_right_finding(job, path, text):
    errors = [f for f in check_job(job) if f.level == "error"]
    assert any(f.path == path and text in str(f) for f in errors), [str(f) for f in errors]
    assert all("\n" not in str(f) and "; fix: " in str(f) for f in errors)


def test_region_outside_tpu_regions_is_only_a_warning():
    findings = check_job(V3, region="asia-east1")
    assert [f.level for f in findings] == ["warning"] and "us-central1" in findings[0].fix


def test_vertex_spec_rules():
    spec = yaml.safe_load((REPO / "config" / "vertex-tpu.yaml").read_text())
    set_image(spec, "gcr.io/p/i:pjrt")
    assert check_job(spec) == []
    spec["workerPoolSpecs"][0]["machineSpec"].update(acceleratorCount=4)
    assert any("acceleratorCount" in f.path for f in check_job(spec))


def test_cli_exit_codes_and_write(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(broken(lambda t: t.update(workerCount=3))))
    result = subprocess.run([sys.executable, "-m", "jobspec", "check", str(bad)],
                            cwd=str(REPO), capture_output=True, text=True)
    assert result.returncode == 1 and "workerCount" in result.stderr
    out = tmp_path / "job.yaml"
    assert subprocess.run([sys.executable, "-m", "jobspec", "check",
                           str(REPO / "config" / "ai-platform-tpu-v2.yaml"), "--image",
                           "gcr.io/p/i:t", "--write", str(out)], cwd=str(REPO)).returncode == 0
    assert yaml.safe_load(out.read_text())["trainingInput"]["masterConfig"]["imageUri"] == \
        "gcr.io/p/i:t"
    (tmp_path / "broken.yaml").write_text("a: [")
    assert subprocess.run([sys.executable, "-m", "jobspec", "check",
                           str(tmp_path / "broken.yaml")], cwd=str(REPO)).returncode == 2


def test_cloudbuild_rules_the_schema_misses():
    build = yaml.safe_load((Path(REPO) / "cloudbuild.yaml").read_text())
    assert check_cloudbuild(build) == []
    build["steps"].append({"args": ["echo"]})
    build["substitutions"]["RUNTIME"] = "xrt"
    paths = {f.path for f in check_cloudbuild(build)}
    assert {"steps[1].name", "substitutions.RUNTIME"} <= paths


@pytest.mark.parametrize("base, version, problem", [
    ("gcr.io/tpu-pytorch/xla:r1.11_3.7", "pytorch-1.11", None),
    ("gcr.io/tpu-pytorch/xla:r1.12_3.7", "pytorch-1.12", None),
    ("gcr.io/tpu-pytorch/xla:r1.12_3.7", "pytorch-1.11", "pytorch-1.12"),
    ("gcr.io/tpu-pytorch/xla:r1.11_3.7", "2.11", "pytorch-1.11"),
    (PJRT_BASE, "pytorch-1.11", "needs the xrt image"),
    ("my-registry/custom:base", "banana", None),  # a custom base: nothing known to compare
])
def test_xrt_base_must_match_the_tpu_runtime(base, version, problem):
    job = copy.deepcopy(V3)
    job["trainingInput"]["workerConfig"]["tpuTfVersion"] = version
    findings = check_pairing(job, base)
    assert [f.level for f in findings] == ([] if problem is None else ["error"])
    assert problem is None or problem in str(findings[0])


def test_vertex_needs_the_pjrt_base():
    spec = yaml.safe_load((REPO / "config" / "vertex-tpu.yaml").read_text())
    assert check_pairing(spec, PJRT_BASE) == []
    [finding] = check_pairing(spec, "gcr.io/tpu-pytorch/xla:r1.11_3.7")
    assert finding.path == "workerPoolSpecs" and "RUNTIME=pjrt" in finding.fix
