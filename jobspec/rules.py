"""The TPU rules the API descriptions do not state (``../shared/PLATFORM.md`` §3 and the
Vertex AI documentation), checked on top of ``jobspec.shape``.

Legacy AI Platform Training: ``CUSTOM`` needs a ``masterType`` (a VM; ``cloud_tpu`` is only a
worker type); the TPU is the one worker (``workerType: cloud_tpu``, ``workerCount: 1``); counts
8 for TPU_V2/TPU_V3, 32/128/256/512 for TPU_V2_POD, 32/128/256 for TPU_V3_POD; no parameter
servers; a custom container needs a ``tpuTfVersion`` the service has (``pytorch-1.6`` ...
``pytorch-1.11``, TensorFlow ``1.15``, ``2.1`` ... ``2.11``); ``BASIC_TPU`` takes no master or
worker settings.

Vertex AI: each TPU type runs on its machine types: TPU_V2/TPU_V3 on ``cloud-tpu`` with 8
accelerators; TPU_V5_LITEPOD on ``ct5lp-hightpu-{1t,4t,8t}`` with a ``tpuTopology``; TPU_V4_POD
on ``ct4p-hightpu-4t`` with a ``tpuTopology``. A TPU machine type needs its TPU type and a TPU
type its machine type.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from jobspec.api import ML, enum
from jobspec.findings import ERROR, WARNING, Finding

TPU_COUNTS = {"TPU_V2": (8,), "TPU_V3": (8,), "TPU_V2_POD": (32, 128, 256, 512),
              "TPU_V3_POD": (32, 128, 256)}
TPU_RUNTIMES = tuple(["pytorch-1.{}".format(minor) for minor in (6, 7, 9, 10, 11)]
                     + ["1.15"] + ["2.{}".format(minor) for minor in range(1, 12)])
# Machine types a legacy master may not use: they name the TPU worker, not a VM.
_NOT_A_MASTER = ("cloud_tpu",)
# Vertex AI: TPU type -> (machine types, topology required, accelerator count or None).
VERTEX_TPUS = {
    "TPU_V2": (("cloud-tpu",), False, 8),
    "TPU_V3": (("cloud-tpu",), False, 8),
    "TPU_V5_LITEPOD": (("ct5lp-hightpu-1t", "ct5lp-hightpu-4t", "ct5lp-hightpu-8t"), True, None),
    "TPU_V4_POD": (("ct4p-hightpu-4t",), True, None),
}
TPU_REGIONS = ("us-central1", "europe-west4")
_TOPOLOGY = re.compile(r"\d+x\d+(x\d+)?")


def legacy_rules(spec: Dict[str, Any], region: Optional[str]) -> List[Finding]:
    """``trainingInput`` of a legacy job, already known to be a mapping."""
    path = "trainingInput"
    findings = []
    if spec.get("parameterServerCount") or spec.get("parameterServerType"):
        findings.append(Finding(ERROR, path + ".parameterServerCount",
                                "TPU jobs cannot have parameter servers",
                                "remove parameterServerType/parameterServerCount"))
    tier = spec.get("scaleTier")
    if tier == "BASIC_TPU":
        findings += [Finding(ERROR, "{}.{}".format(path, key), "BASIC_TPU takes no {} (it "
                             "always gives one TPU v2-8)".format(key), "remove it, or use "
                             "scaleTier: CUSTOM with workerType: cloud_tpu")
                     for key in ("masterType", "workerType", "workerCount", "workerConfig")
                     if key in spec]
    elif tier == "CUSTOM":
        findings += _master(spec.get("masterType"), path + ".masterType")
        findings += _tpu_worker(spec, path)
    elif tier is not None:
        findings.append(Finding(ERROR, path + ".scaleTier", "{} has no TPU".format(tier),
                                "use CUSTOM (with workerType: cloud_tpu) or BASIC_TPU"))
    else:
        findings.append(Finding(ERROR, path + ".scaleTier", "is missing",
                                "set scaleTier: CUSTOM"))
    return findings + region_advice(spec.get("region") or region, path + ".region")


def _master(machine: Any, path: str) -> List[Finding]:
    if machine is None:
        return [Finding(ERROR, path, "is required when scaleTier is CUSTOM",
                        "set masterType, e.g. n1-highcpu-16")]
    if machine in _NOT_A_MASTER:
        return [Finding(ERROR, path, "{} is the TPU worker's type, not a VM".format(machine),
                        "set masterType to a VM, e.g. n1-highcpu-16, and workerType: "
                        "cloud_tpu")]
    return []


def _tpu_worker(spec: Dict[str, Any], path: str) -> List[Finding]:
    findings = []
    if spec.get("workerType") != "cloud_tpu":
        findings.append(Finding(ERROR, path + ".workerType", "is {!r}; a TPU job's worker is "
                                "the TPU".format(spec.get("workerType")),
                                "set workerType: cloud_tpu"))
    if _as_int(spec.get("workerCount")) != 1:
        findings.append(Finding(ERROR, path + ".workerCount", "is {!r}; a TPU job has exactly "
                                "one TPU worker".format(spec.get("workerCount")),
                                "set workerCount: 1"))
    worker = spec.get("workerConfig")
    if not isinstance(worker, dict):
        return findings + [Finding(ERROR, path + ".workerConfig", "is missing",
                                   "add workerConfig with acceleratorConfig and tpuTfVersion")]
    version = worker.get("tpuTfVersion")
    version_path = path + ".workerConfig.tpuTfVersion"
    if not version:
        findings.append(Finding(ERROR, version_path, "is required for a custom container on "
                                "a TPU", 'set tpuTfVersion, e.g. "pytorch-1.11"'))
    elif str(version) not in TPU_RUNTIMES:
        findings.append(Finding(ERROR, version_path, "{!r} is not a TPU runtime of the "
                                "service".format(version), "use one of {}".format(
                                    ", ".join(TPU_RUNTIMES))))
    accel = worker.get("acceleratorConfig")
    accel_path = path + ".workerConfig.acceleratorConfig"
    if not isinstance(accel, dict):
        return findings + [Finding(ERROR, accel_path, "is missing", "add acceleratorConfig "
                                   "with type: TPU_V3 and count: 8")]
    kind, count = _name(accel.get("type")), accel.get("count")
    if kind is None:
        findings.append(Finding(ERROR, accel_path + ".type", "is missing",
                                "set type: TPU_V3 (or TPU_V2, TPU_V2_POD, TPU_V3_POD)"))
    elif kind not in TPU_COUNTS:
        if kind in enum(ML, "GoogleCloudMlV1__AcceleratorConfig", "type"):  # else: shape's
            findings.append(Finding(ERROR, accel_path + ".type", "{} is not a TPU type of this "
                                    "platform".format(kind), "use one of {}".format(
                                        ", ".join(TPU_COUNTS))))
    elif _as_int(count) not in TPU_COUNTS[kind]:
        findings.append(Finding(ERROR, accel_path + ".count", "is {!r}; {} takes {}".format(
            count, kind, " or ".join(str(c) for c in TPU_COUNTS[kind])),
            "set count: {}".format(TPU_COUNTS[kind][0])))
    return findings


def vertex_rules(pool: Dict[str, Any], path: str) -> List[Finding]:
    """One worker pool (a mapping) of a Vertex AI custom job."""
    machine = pool.get("machineSpec")
    if not isinstance(machine, dict):
        return [Finding(ERROR, path + ".machineSpec", "is missing", "add machineSpec with "
                        "machineType, e.g. ct5lp-hightpu-4t")]
    path += ".machineSpec"
    machine_type = _name(machine.get("machineType"))
    kind = _name(machine.get("acceleratorType"))
    if not machine_type:
        return [Finding(ERROR, path + ".machineType", "is missing",
                        "e.g. cloud-tpu (TPU v2/v3) or ct5lp-hightpu-4t (v5e)")]
    wanted = [name for name, (types, _, _) in VERTEX_TPUS.items() if machine_type in types]
    if kind not in VERTEX_TPUS:
        if wanted:
            return [Finding(ERROR, path + ".acceleratorType", "{} needs a TPU type, got "
                            "{!r}".format(machine_type, kind), "set acceleratorType: {}".format(
                                " or ".join(wanted)))]
        if kind is None:
            return [Finding(WARNING, path + ".acceleratorType", "no TPU: the job runs on the "
                            "XLA CPU device", "for a TPU use e.g. machineType ct5lp-hightpu-4t "
                            "with acceleratorType TPU_V5_LITEPOD")]
        return []  # a GPU, or a value that is not the API's (reported by jobspec.shape)
    types, needs_topology, count = VERTEX_TPUS[kind]
    findings = []
    if machine_type not in types:
        findings.append(Finding(ERROR, path + ".machineType", "{} does not carry {}".format(
            machine_type, kind), "use machineType {}".format(" or ".join(types))))
    if count is not None and _as_int(machine.get("acceleratorCount")) != count:
        findings.append(Finding(ERROR, path + ".acceleratorCount", "must be {} for {}".format(
            count, kind), "set acceleratorCount: {}".format(count)))
    topology = machine.get("tpuTopology")
    if needs_topology and not (isinstance(topology, str) and _TOPOLOGY.fullmatch(topology)):
        findings.append(Finding(ERROR, path + ".tpuTopology", "{} needs a topology like 2x2, "
                                "got {!r}".format(kind, topology),
                                "set tpuTopology, e.g. 2x2 for ct5lp-hightpu-4t"))
    return findings


def region_advice(region: Optional[str], path: str) -> List[Finding]:
    if region and region not in TPU_REGIONS:
        return [Finding(WARNING, path, "{} may not offer these TPUs".format(region),
                        "use {}".format(" or ".join(TPU_REGIONS)))]
    return []


def _name(value: Any) -> Optional[str]:
    """A field that should hold a name, or None: other types are reported by jobspec.shape."""
    return value if isinstance(value, str) else None


def _as_int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
