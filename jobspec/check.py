"""``python -m jobspec check FILE [--image URI] [--write OUT]``: validate a job file offline.

Legacy AI Platform (a Job with ``trainingInput``, for ``gcloud ai-platform jobs submit training
--config``) is checked against the ``ml.v1`` API description and the TPU rules of the platform
documentation: ``workerType: cloud_tpu`` with ``workerCount: 1``; accelerator count 8 for
TPU_V2/TPU_V3, 32/128/256/512 for TPU_V2_POD and 32/128/256 for TPU_V3_POD; no parameter
servers; ``tpuTfVersion`` set for custom containers; a real image URI. Vertex AI (a
``CustomJobSpec`` with ``workerPoolSpecs``, for ``gcloud ai custom-jobs create --config``) is
checked against ``aiplatform.v1``. A region outside us-central1/europe-west4 is a warning.

``--base-image`` checks the image's base against the platform and ``tpuTfVersion`` (the pairing
table in ``jobspec.images``). ``--image`` replaces the template's image URIs before checking,
``--write`` saves the result (what ``make submit`` sends). Each finding is one line: level,
YAML path, problem, fix.
Exit code: 0 valid, 1 errors found, 2 unreadable file.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import yaml

from jobspec.api import enum, fields
from jobspec.images import PJRT, XRT, XRT_BASE_RUNTIMES, runtime_of_base

ML, VERTEX = "ml.v1", "aiplatform.v1"
TPU_COUNTS = {"TPU_V2": (8,), "TPU_V3": (8,), "TPU_V2_POD": (32, 128, 256, 512),
              "TPU_V3_POD": (32, 128, 256)}
TPU_REGIONS = ("us-central1", "europe-west4")
_PLACEHOLDERS = ("YOUR_", "YOUR-", "PROJECT_ID", "<", ">", "${", "PLACEHOLDER", "CHANGE_ME")


@dataclass(frozen=True)
class Finding:
    level: str  # "error" or "warning"
    path: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return "{}: {}: {}; fix: {}".format(self.level, self.path, self.problem, self.fix)


def check_job(job: Any, region: Optional[str] = None) -> List[Finding]:
    """All findings for a parsed job file (AI Platform Job or Vertex CustomJobSpec)."""
    if not isinstance(job, dict):
        return [Finding("error", "(top)", "the file is not a YAML mapping",
                        "start from a template in config/")]
    if "trainingInput" in job:
        return _check_ai_platform(job, region) + _placeholders(job, "")
    if "workerPoolSpecs" in job:
        return _check_vertex(job, region) + _placeholders(job, "")
    return [Finding("error", "(top)", "neither trainingInput (AI Platform) nor workerPoolSpecs "
                    "(Vertex AI) found", "start from a template in config/")]


def check_pairing(job: Any, base_image: str) -> List[Finding]:
    """The image's base against where the job runs it (table: ``jobspec.images``).

    A TPU node (legacy AI Platform) needs an XRT base whose torch_xla matches the node's
    runtime (``tpuTfVersion``); a TPU VM (Vertex AI) needs the PJRT base.
    """
    runtime = runtime_of_base(base_image)
    if runtime is None or not isinstance(job, dict):
        return []  # a custom base: nothing known to compare
    spec = job.get("trainingInput")
    if isinstance(spec, dict):
        path = "trainingInput.workerConfig.tpuTfVersion"
        if runtime == PJRT:
            return [Finding("error", "trainingInput", "a TPU node needs the xrt image, but the "
                            "image is built on {}".format(base_image),
                            "make build RUNTIME=xrt (or submit to Vertex AI)")]
        version = (spec.get("workerConfig") or {}).get("tpuTfVersion")
        wanted = XRT_BASE_RUNTIMES[base_image]
        if version is not None and str(version) != wanted:
            return [Finding("error", path, "is {!r}, but the image's torch_xla ({}) only talks to "
                            "a {} TPU runtime".format(version, base_image, wanted),
                            'set tpuTfVersion: "{}"'.format(wanted))]
    elif "workerPoolSpecs" in job and runtime == XRT:
        return [Finding("error", "workerPoolSpecs", "Vertex AI runs TPU VMs, which need the pjrt "
                        "image, but the image is built on {}".format(base_image),
                        "make build push RUNTIME=pjrt")]
    return []


def _check_ai_platform(job: Dict[str, Any], region: Optional[str]) -> List[Finding]:
    findings = _unknown_fields(job, ML, "GoogleCloudMlV1__Job", "")
    spec = job["trainingInput"]
    if not isinstance(spec, dict):
        return findings + [Finding("error", "trainingInput", "must be a mapping",
                                   "see config/ai-platform-tpu-v3.yaml")]
    findings += _unknown_fields(spec, ML, "GoogleCloudMlV1__TrainingInput", "trainingInput")
    findings += _enum(spec, "scaleTier", ML, "GoogleCloudMlV1__TrainingInput", "trainingInput")
    master = spec.get("masterConfig") or {}
    findings += _unknown_fields(master, ML, "GoogleCloudMlV1__ReplicaConfig",
                                "trainingInput.masterConfig")
    findings += _image(master.get("imageUri"), "trainingInput.masterConfig.imageUri")
    if spec.get("parameterServerCount") or spec.get("parameterServerType"):
        findings.append(Finding("error", "trainingInput.parameterServerCount",
                                "TPU jobs cannot have parameter servers",
                                "remove parameterServerType/parameterServerCount"))
    tpu_tier = spec.get("scaleTier") == "BASIC_TPU"
    if not tpu_tier:
        findings += _tpu_worker(spec)
    findings += _region(spec.get("region") or region, "trainingInput.region")
    return findings


def _tpu_worker(spec: Dict[str, Any]) -> List[Finding]:
    path = "trainingInput"
    findings = []
    if spec.get("workerType") != "cloud_tpu":
        findings.append(Finding("error", path + ".workerType", "is {!r}; a TPU job's worker is "
                                "the TPU".format(spec.get("workerType")),
                                "set workerType: cloud_tpu"))
    if _as_int(spec.get("workerCount")) != 1:
        findings.append(Finding("error", path + ".workerCount", "is {!r}; a TPU job has exactly "
                                "one TPU worker".format(spec.get("workerCount")),
                                "set workerCount: 1"))
    worker = spec.get("workerConfig")
    if not isinstance(worker, dict):
        return findings + [Finding("error", path + ".workerConfig", "is missing",
                                   "add workerConfig with acceleratorConfig and tpuTfVersion")]
    findings += _unknown_fields(worker, ML, "GoogleCloudMlV1__ReplicaConfig",
                                path + ".workerConfig")
    if not worker.get("tpuTfVersion"):
        findings.append(Finding("error", path + ".workerConfig.tpuTfVersion",
                                "is required for a custom container on a TPU",
                                'set tpuTfVersion, e.g. "pytorch-1.11" or "2.11"'))
    if worker.get("imageUri") is not None:
        findings += _image(worker.get("imageUri"), path + ".workerConfig.imageUri")
    accel = worker.get("acceleratorConfig") or {}
    accel_path = path + ".workerConfig.acceleratorConfig"
    findings += _enum(accel, "type", ML, "GoogleCloudMlV1__AcceleratorConfig", accel_path)
    kind = accel.get("type")
    if kind in TPU_COUNTS and _as_int(accel.get("count")) not in TPU_COUNTS[kind]:
        counts = " or ".join(str(count) for count in TPU_COUNTS[kind])
        findings.append(Finding("error", accel_path + ".count", "is {!r}; {} takes {}".format(
            accel.get("count"), kind, counts), "set count: {}".format(TPU_COUNTS[kind][0])))
    elif kind not in TPU_COUNTS and kind in enum(ML, "GoogleCloudMlV1__AcceleratorConfig",
                                                 "type"):
        findings.append(Finding("error", accel_path + ".type", "{} is not a TPU type this "
                                "platform supports".format(kind),
                                "use one of {}".format(", ".join(TPU_COUNTS))))
    return findings


def _check_vertex(spec: Dict[str, Any], region: Optional[str]) -> List[Finding]:
    findings = _unknown_fields(spec, VERTEX, "GoogleCloudAiplatformV1CustomJobSpec", "")
    pools = spec.get("workerPoolSpecs")
    if not isinstance(pools, list) or not pools:
        return findings + [Finding("error", "workerPoolSpecs", "needs at least one pool",
                                   "see config/vertex-tpu.yaml")]
    for index, pool in enumerate(pools):
        path = "workerPoolSpecs[{}]".format(index)
        if not isinstance(pool, dict):
            findings.append(Finding("error", path, "must be a mapping", "see the template"))
            continue
        findings += _unknown_fields(pool, VERTEX, "GoogleCloudAiplatformV1WorkerPoolSpec", path)
        machine = pool.get("machineSpec") or {}
        findings += _unknown_fields(machine, VERTEX, "GoogleCloudAiplatformV1MachineSpec",
                                    path + ".machineSpec")
        findings += _enum(machine, "acceleratorType", VERTEX,
                          "GoogleCloudAiplatformV1MachineSpec", path + ".machineSpec")
        if not machine.get("machineType"):
            findings.append(Finding("error", path + ".machineSpec.machineType", "is missing",
                                    "e.g. cloud-tpu (TPU v2/v3) or ct5lp-hightpu-4t (v5e)"))
        if (machine.get("acceleratorType") in TPU_COUNTS
                and _as_int(machine.get("acceleratorCount")) not in TPU_COUNTS[
                    machine["acceleratorType"]]):
            findings.append(Finding("error", path + ".machineSpec.acceleratorCount",
                                    "must be 8 for {}".format(machine["acceleratorType"]),
                                    "set acceleratorCount: 8"))
        findings += _image((pool.get("containerSpec") or {}).get("imageUri"),
                           path + ".containerSpec.imageUri")
    findings += _region(region, "--region")
    return findings


def _unknown_fields(obj: Any, document: str, schema: str, path: str) -> List[Finding]:
    if not isinstance(obj, dict):
        return []
    known = fields(document, schema)
    findings = []
    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            findings.append(Finding("error", _join(path, key), "is not a field of {}".format(
                schema.split("__")[-1].replace("GoogleCloudAiplatformV1", "")),
                "did you mean {}?".format(close[0]) if close else "remove it"))
    return findings


def _enum(obj: Dict[str, Any], key: str, document: str, schema: str, path: str
          ) -> List[Finding]:
    allowed = enum(document, schema, key)
    value = obj.get(key)
    if value is None or value in allowed:
        return []
    return [Finding("error", _join(path, key), "{!r} is not one of the API's values".format(
        value), "use one of {}".format(", ".join(v for v in allowed if "UNSPECIFIED" not in v)))]


def _image(uri: Any, path: str) -> List[Finding]:
    if not uri:
        return [Finding("error", path, "is missing", "set it to your pushed image "
                        "(make check-job IMAGE_URI=... fills it in)")]
    if any(marker in str(uri) for marker in _PLACEHOLDERS):
        return [Finding("error", path, "{!r} is a placeholder".format(uri),
                        "pass --image gcr.io/PROJECT/IMAGE:TAG (make check-job does)")]
    return []


def _placeholders(value: Any, path: str) -> List[Finding]:
    """Template values left unfilled anywhere else in the file (buckets, arguments)."""
    if isinstance(value, dict):
        return [f for key, item in value.items() for f in _placeholders(item, _join(path, key))]
    if isinstance(value, list):
        return [f for index, item in enumerate(value)
                for f in _placeholders(item, "{}[{}]".format(path, index))]
    # Image URIs are checked (and reported) by _image.
    if isinstance(value, str) and "YOUR_" in value and not path.endswith("imageUri"):
        return [Finding("error", path, "{!r} is a template placeholder".format(value),
                        "replace it with your value")]
    return []


def set_container_args(job: Dict[str, Any], args: List[str]) -> None:
    """Vertex AI: the job's arguments (they reach the launcher, then the trainer)."""
    for pool in job.get("workerPoolSpecs") or []:
        if isinstance(pool, dict):
            pool.setdefault("containerSpec", {})["args"] = list(args)


def _region(region: Optional[str], path: str) -> List[Finding]:
    if region and region not in TPU_REGIONS:
        return [Finding("warning", path, "{} may not offer these TPUs".format(region),
                        "use {}".format(" or ".join(TPU_REGIONS)))]
    return []


def _as_int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _join(path: str, key: Any) -> str:
    return "{}.{}".format(path, key) if path else str(key)


def set_image(job: Dict[str, Any], image: str) -> None:
    """Put ``image`` wherever the job names its container image."""
    spec = job.get("trainingInput")
    if isinstance(spec, dict):
        for replica in ("masterConfig", "workerConfig"):
            config = spec.get(replica)
            if isinstance(config, dict) and (replica == "masterConfig" or "imageUri" in config):
                config["imageUri"] = image
    for pool in job.get("workerPoolSpecs") or []:
        if isinstance(pool, dict):
            pool.setdefault("containerSpec", {})["imageUri"] = image


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobspec", description=__doc__.split(
        "\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a job file")
    check.add_argument("file")
    check.add_argument("--image", help="image URI to put into the job before checking")
    check.add_argument("--region", help="region the job is submitted to (for the warning)")
    check.add_argument("--base-image", help="the image's base (make passes BASE_IMAGE): checks "
                       "it against the platform and tpuTfVersion")
    check.add_argument("--write", help="write the (image-filled) job here when it is valid")
    check.add_argument("--container-arg", action="append", default=[], dest="container_args",
                       help="Vertex AI: an argument for the container (repeatable)")
    build = sub.add_parser("cloudbuild", help="check what the cloudbuild JSON schema misses")
    build.add_argument("file")
    args = parser.parse_args(argv)
    try:
        with open(args.file) as handle:
            job = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        print("error: {}: cannot read ({})".format(args.file, " ".join(str(error).split())),
              file=sys.stderr)
        return 2
    if args.command == "cloudbuild":
        from jobspec.cloudbuild import check_cloudbuild

        return _report(args.file, check_cloudbuild(job), None)
    if args.image and isinstance(job, dict):
        set_image(job, args.image)
    if args.container_args and isinstance(job, dict):
        set_container_args(job, args.container_args)
    findings = check_job(job, args.region)
    if args.base_image:
        findings += check_pairing(job, args.base_image)
    return _report(args.file, findings, job if args.write else None, args.write)


def _report(path: str, findings: List[Finding], job: Any, write: Optional[str] = None) -> int:
    """Print findings one per line; on no errors, optionally write ``job`` to ``write``."""
    for finding in findings:
        print("{}: {}".format(path, finding), file=sys.stderr)
    if any(finding.level == "error" for finding in findings):
        return 1
    if write:
        with open(write, "w") as handle:
            yaml.safe_dump(job, handle, sort_keys=False)
    print("{}: ok{}".format(path, " (wrote {})".format(write) if write else ""))
    return 0
