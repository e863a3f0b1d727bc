"""The TPU rules the API descriptions do not state (``../shared/PLATFORM.md`` §3 and the
Vertex AI documentation), checked on top of ``jobspec.shape``.

Legacy AI Platform Training: ``CUSTOM`` needs a ``masterType`` (a VM; ``cloud_tpu`` is only a
worker type); the TPU is the one worker (``workerType: cloud_tpu``, ``workerCount: 1``); counts
8 for TPU_V2/TPU_V3, 32/128/256/512 for TPU_V2_POD, 32/128/256 for TPU_V3_POD; no parameter
servers; a custom container needs a ``tpuTfVersion`` the service has (``pytorch-1.6`` ...
``pytorch-1.11``, TensorFlow ``1.15``, ``2.1`` ... ``2.11``); ``BASIC_TPU`` takes no master or
worker settings. The xrt image trains on one core of the node, so every legacy TPU job gets
a warning naming the cores that stay idle.

Vertex AI: TPU v2/v3 run on machine type ``cloud-tpu``, which needs ``acceleratorType``
TPU_V2/TPU_V3 and ``acceleratorCount: 8``. The newer TPU machine types name their TPU and its
chips per host (``ct4p-hightpu-4t`` v4, ``ct5lp-hightpu-{1t,4t,8t}`` v5e,
``ct6e-standard-{1t,4t,8t}`` v6e): they need a ``tpuTopology`` whose chips are a whole number
of such hosts, and ``acceleratorType`` may be left out (as Google's examples do) or must name
the same TPU; v6e has no ``acceleratorType`` value in the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from jobspec.api import ML, enum
from jobspec.findings import ERROR, WARNING, Finding

TPU_COUNTS = {"TPU_V2": (8,), "TPU_V3": (8,), "TPU_V2_POD": (32, 128, 256, 512),
              "TPU_V3_POD": (32, 128, 256)}
TPU_RUNTIMES = tuple(["pytorch-1.{}".format(minor) for minor in (6, 7, 9, 10, 11)]
                     + ["1.15"] + ["2.{}".format(minor) for minor in range(1, 12)])
# Machine types a legacy master may not use: they name the TPU worker, not a VM.
_NOT_A_MASTER = ("cloud_tpu",)
# Vertex AI: TPU types that machine type cloud-tpu carries, with their accelerator count.
CLOUD_TPU_MACHINE = "cloud-tpu"
CLOUD_TPU_TYPES = {"TPU_V2": 8, "TPU_V3": 8}


@dataclass(frozen=True)
class TpuMachine:
    """A Vertex AI machine type that carries its TPU: which one, how many chips a host has,
    and the topology of one host."""

    tpu: str
    accelerator_type: Optional[str]  # the API's name for it, None where it has none
    chips_per_host: int
    one_host: str


TPU_MACHINES = {
    "ct4p-hightpu-4t": TpuMachine("v4", "TPU_V4_POD", 4, "2x2x1"),
    "ct5lp-hightpu-1t": TpuMachine("v5e", "TPU_V5_LITEPOD", 1, "1x1"),
    "ct5lp-hightpu-4t": TpuMachine("v5e", "TPU_V5_LITEPOD", 4, "2x2"),
    "ct5lp-hightpu-8t": TpuMachine("v5e", "TPU_V5_LITEPOD", 8, "2x4"),
    "ct6e-standard-1t": TpuMachine("v6e", None, 1, "1x1"),
    "ct6e-standard-4t": TpuMachine("v6e", None, 4, "2x2"),
    "ct6e-standard-8t": TpuMachine("v6e", None, 8, "2x4"),
}
TPU_REGIONS = ("us-central1", "europe-west4")
_TOPOLOGY = re.compile(r"[1-9]\d*x[1-9]\d*(x[1-9]\d*)?")


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
    else:
        findings.append(idle_cores(_as_int(count), accel_path + ".count"))
    return findings


def idle_cores(cores: int, path: str) -> Finding:
    """The warning every legacy TPU job gets: the xrt image's torch_xla 1.11 trains on one
    core of the node. torch_xla 1.x reaches the others only with one process per core
    (``xmp.spawn``), which the bundled trainers do not run (no torch_xla 1.x here to test it)."""
    return Finding(WARNING, path, "{} TPU cores, of which the bundled trainers use 1 ({} stay "
                   "idle): torch_xla 1.x uses a TPU node's other cores only with one process "
                   "per core".format(cores, cores - 1),
                   "to use every core, run on Vertex AI TPU VMs with the pjrt image "
                   "(config/vertex-tpu-v5e.yaml), or a multi-process trainer of your own "
                   "(LAUNCHER_TRAINER)")


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
                        "e.g. ct5lp-hightpu-4t (TPU v5e) or ct6e-standard-4t (v6e)")]
    if machine_type in TPU_MACHINES:
        return _tpu_machine(machine, machine_type, kind, path)
    carriers = [name for name, spec in TPU_MACHINES.items() if spec.accelerator_type == kind]
    if carriers:
        return [Finding(ERROR, path + ".machineType", "{} does not carry {}".format(
            machine_type, kind), "use machineType {}".format(" or ".join(carriers)))]
    if machine_type == CLOUD_TPU_MACHINE or kind in CLOUD_TPU_TYPES:
        return _cloud_tpu(machine, machine_type, kind, path)
    if kind is None:
        return [Finding(WARNING, path + ".acceleratorType", "no TPU: the job runs on the "
                        "XLA CPU device", "for a TPU use e.g. machineType ct5lp-hightpu-4t "
                        "with tpuTopology 2x2")]
    return []  # a GPU, or a value that is not the API's (reported by jobspec.shape)


def _cloud_tpu(machine: Dict[str, Any], machine_type: str, kind: Optional[str],
               path: str) -> List[Finding]:
    """TPU v2/v3 on Vertex AI: machine type cloud-tpu with its accelerator type and count."""
    if kind not in CLOUD_TPU_TYPES:
        return [Finding(ERROR, path + ".acceleratorType", "{} needs a TPU type, got "
                        "{!r}".format(machine_type, kind), "set acceleratorType: {}".format(
                            " or ".join(CLOUD_TPU_TYPES)))]
    if machine_type != CLOUD_TPU_MACHINE:
        return [Finding(ERROR, path + ".machineType", "{} does not carry {}".format(
            machine_type, kind), "use machineType {}".format(CLOUD_TPU_MACHINE))]
    count = CLOUD_TPU_TYPES[kind]
    if _as_int(machine.get("acceleratorCount")) != count:
        return [Finding(ERROR, path + ".acceleratorCount", "must be {} for {}".format(
            count, kind), "set acceleratorCount: {}".format(count))]
    return []


def _tpu_machine(machine: Dict[str, Any], machine_type: str, kind: Optional[str],
                 path: str) -> List[Finding]:
    """A machine type that names its TPU: the accelerator type, if given, must agree, and the
    topology must be a whole number of hosts of this machine's chips."""
    spec = TPU_MACHINES[machine_type]
    findings = []
    if kind is not None and kind != spec.accelerator_type:
        findings.append(Finding(ERROR, path + ".acceleratorType", "{} carries TPU {}, not "
                                "{}".format(machine_type, spec.tpu, kind),
                                "leave acceleratorType out (the machine type names the TPU)"
                                if spec.accelerator_type is None else
                                "set acceleratorType: {} or leave it out".format(
                                    spec.accelerator_type)))
    topology = machine.get("tpuTopology")
    if not isinstance(topology, str):
        if topology is None:  # a number is jobspec.shape's finding
            findings.append(Finding(ERROR, path + ".tpuTopology", "is required for {}".format(
                machine_type), "set tpuTopology: {} (one host)".format(spec.one_host)))
        return findings
    if not _TOPOLOGY.fullmatch(topology):
        return findings + [Finding(ERROR, path + ".tpuTopology", "{!r} is not a topology "
                                   "like 2x2 or 2x2x1".format(topology),
                                   "set tpuTopology: {} (one host)".format(spec.one_host))]
    chips = 1
    for size in topology.split("x"):
        chips *= int(size)
    if chips < spec.chips_per_host or chips % spec.chips_per_host:
        findings.append(Finding(ERROR, path + ".tpuTopology", "{} has {} chips, not a whole "
                                "number of {} hosts of {} chips".format(
                                    topology, chips, machine_type, spec.chips_per_host),
                                "set tpuTopology: {} (one host)".format(spec.one_host)))
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
    except (TypeError, ValueError, OverflowError):  # OverflowError: YAML's .inf
        return None
