"""The TPU rules for a GKE JobSet that runs the pjrt image on one multi-host slice, on top of
the schema (``jobspec.k8s_schema``); the reasons are in docs/gke.md. Per replicated job:

- one slice (``replicas: 1``): the bundled trainers run one SPMD program on one slice;
- the node selectors name a known accelerator and topology (``jobspec.gke_tpus``); the TPU
  container's ``google.com/tpu`` limit is the chips of one host; ``parallelism`` and
  ``completions`` are the hosts: else the pods stay pending or the slice never forms;
- ``completionMode`` Indexed and ``network.enableDNSHostnames`` left on: GKE injects
  ``TPU_WORKER_ID``/``TPU_WORKER_HOSTNAMES`` only into an indexed Job with a subdomain;
- no ``command``: it replaces the image's launcher (the job's arguments go in ``args``);
- ImageNet with data workers: a memory ``emptyDir`` at ``/dev/shm`` at least what
  ``trainer.data.plan`` computes for the arguments (``jobspec.container_args``);
- ``terminationGracePeriodSeconds`` at least 30 (the checkpoint at SIGTERM must fit);
- ``failurePolicy.maxRestarts`` at least 1, and a ``gs://`` job dir, the same for every pod and
  restart (``jobspec.container_args``): preemption restarts the pods, which resume from its
  newest checkpoint;
- how the pods fail, restart and are named (``jobspec.jobset_pods``), who the trainer runs as
  (``jobspec.pod_security``), and which trainer the arguments are for
  (``jobspec.container_args``).

Values of the wrong type are the schema's findings; the rules read around them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from jobspec import gke_tpus
from jobspec.container_args import (
    job_dir_rule,
    mesh_rule,
    shared_memory_rule,
    spot_checkpoint_rule,
    trainer_module,
    trainer_rule,
)
from jobspec.findings import ERROR, Finding
from jobspec.gke_tpus import as_list as _list
from jobspec.gke_tpus import as_mapping as _mapping
from jobspec.jobset_pods import failure_policy_rules, name_rules, pod_rules
from jobspec.pod_security import security_rules

MIN_GRACE_SECONDS = 30
IMAGENET = "trainer.imagenet"


def jobset_rules(job: Dict[str, Any]) -> List[Finding]:
    """Findings of the TPU rules for a JobSet manifest (a mapping)."""
    spec = _mapping(job.get("spec"))
    findings = name_rules(job) + _restarts(spec) + failure_policy_rules(job) + _network(spec)
    jobs = spec.get("replicatedJobs")
    for index, replicated in enumerate(jobs if isinstance(jobs, list) else []):
        if isinstance(replicated, dict):
            findings += _replicated_job(replicated, "spec.replicatedJobs[{}]".format(index))
    return findings


def tpu_containers(job: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    """(path, container) of each container that requests TPU chips, or of each pod's first
    container where none does: where the image and the job's arguments go."""
    found = []
    jobs = _mapping(job.get("spec")).get("replicatedJobs")
    for index, replicated in enumerate(jobs if isinstance(jobs, list) else []):
        path = "spec.replicatedJobs[{}].template.spec.template.spec".format(index)
        pod = _pod(_mapping(replicated))
        containers = [(i, c) for i, c in enumerate(_list(pod.get("containers")))
                      if isinstance(c, dict)]
        chosen = [(i, c) for i, c in containers if _tpu_limit(c) is not None] or containers[:1]
        found += [("{}.containers[{}]".format(path, i), c) for i, c in chosen]
    return found


def _restarts(spec: Dict[str, Any]) -> List[Finding]:
    policy = _mapping(spec.get("failurePolicy"))
    restarts = policy.get("maxRestarts", 0)
    if isinstance(restarts, int) and not isinstance(restarts, bool) and restarts < 1:
        return [Finding(ERROR, "spec.failurePolicy.maxRestarts", "is {} ({}): the first "
                        "preemption or maintenance event ends the JobSet".format(
                            restarts, "set" if "maxRestarts" in policy else "the default"),
                        "set maxRestarts: 10 (each restart resumes from the newest "
                        "checkpoint in the gs:// job dir)")]
    return []


def _network(spec: Dict[str, Any]) -> List[Finding]:
    if _mapping(spec.get("network")).get("enableDNSHostnames") is False:
        return [Finding(ERROR, "spec.network.enableDNSHostnames", "is false: without the "
                        "headless service GKE injects no TPU_WORKER_HOSTNAMES and torch_xla "
                        "cannot name the hosts to each other", "remove it (true by default)")]
    return []


def _replicated_job(replicated: Dict[str, Any], path: str) -> List[Finding]:
    findings = []
    replicas = replicated.get("replicas", 1)
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas != 1:
        findings.append(Finding(ERROR, path + ".replicas", "is {}: {} slices (multislice); the "
                                "bundled trainers run one SPMD program on one slice".format(
                                    replicas, replicas), "set replicas: 1"))
    job_path = path + ".template.spec"
    job = _mapping(_mapping(replicated.get("template")).get("spec"))
    pod_path = job_path + ".template.spec"
    pod = _pod(replicated)
    mode = job.get("completionMode")
    if isinstance(mode, str) and mode != "Indexed":
        findings.append(Finding(ERROR, job_path + ".completionMode", "is {!r}: GKE injects "
                                "TPU_WORKER_ID and TPU_WORKER_HOSTNAMES only into an Indexed "
                                "Job".format(mode), "remove it (JobSet makes its Jobs Indexed)"))
    shape, slice_findings = _slice(pod, pod_path)
    findings += slice_findings
    if shape is not None:
        findings += _hosts(job, job_path, shape.hosts)
    containers = [(i, c) for i, c in enumerate(_list(pod.get("containers")))
                  if isinstance(c, dict)]
    tpu = [(i, c) for i, c in containers if _tpu_limit(c) is not None]
    if containers and not tpu:
        findings.append(Finding(ERROR, pod_path + ".containers", "no container requests "
                                "google.com/tpu: the pods get no TPU chips and GKE injects no "
                                "TPU_WORKER_ID", "add resources.limits: {{google.com/tpu: {}}} "
                                "to the trainer's container".format(
                                    shape.chips_per_host if shape else 4)))
    findings += pod_rules(job, job_path, pod, pod_path, tpu)
    for index, container in tpu[:1]:
        findings += _container(container, "{}.containers[{}]".format(pod_path, index), pod,
                               pod_path, shape)
    grace = pod.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and not isinstance(grace, bool) and grace < MIN_GRACE_SECONDS:
        findings.append(Finding(ERROR, pod_path + ".terminationGracePeriodSeconds", "is {} s: "
                                "the checkpoint at SIGTERM must be written before the pod is "
                                "killed".format(grace), "set at least {} (the templates give "
                                "120)".format(MIN_GRACE_SECONDS)))
    return findings


def _slice(pod: Dict[str, Any], pod_path: str
           ) -> Tuple[Optional[gke_tpus.SliceShape], List[Finding]]:
    selector = _mapping(pod.get("nodeSelector"))
    where = pod_path + ".nodeSelector[{}]"
    accelerator = selector.get(gke_tpus.ACCELERATOR_LABEL)
    topology = selector.get(gke_tpus.TOPOLOGY_LABEL)
    known = " or ".join(sorted(gke_tpus.ACCELERATORS))
    if accelerator is None:
        return None, [Finding(ERROR, where.format(gke_tpus.ACCELERATOR_LABEL), "is missing: "
                              "the pods are not placed on TPU nodes", "set it to " + known)]
    if not isinstance(accelerator, str) or accelerator not in gke_tpus.ACCELERATORS:
        return None, [Finding(ERROR, where.format(gke_tpus.ACCELERATOR_LABEL), "{!r} is not a "
                              "TPU this image runs on GKE".format(accelerator),
                              "use " + known)]
    spec = gke_tpus.ACCELERATORS[accelerator]
    if not isinstance(topology, str) or topology not in spec.topologies:
        problem = "is missing" if topology is None else "{!r} is not a {} topology".format(
            topology, spec.tpu)
        return None, [Finding(ERROR, where.format(gke_tpus.TOPOLOGY_LABEL), problem + ": no "
                              "node pool has it, the pods stay pending",
                              "use one of {} (4x4: 16 chips on 4 hosts)".format(
                                  ", ".join(spec.topologies)))]
    return gke_tpus.slice_shape(topology), []


def _hosts(job: Dict[str, Any], job_path: str, hosts: int) -> List[Finding]:
    findings = []
    for field in ("parallelism", "completions"):
        value = job.get(field, 1)
        if isinstance(value, int) and not isinstance(value, bool) and value != hosts:
            findings.append(Finding(ERROR, "{}.{}".format(job_path, field), "is {}, but the "
                                    "slice has {} host{} (one pod each)".format(
                                        value if field in job else "left out (1)", hosts,
                                        "" if hosts == 1 else "s"),
                                    "set {}: {}".format(field, hosts)))
    return findings


def _container(container: Dict[str, Any], path: str, pod: Dict[str, Any], pod_path: str,
               shape: Optional[gke_tpus.SliceShape]) -> List[Finding]:
    findings = []
    resources = _mapping(container.get("resources"))
    limit, written = _tpu_limit(container), _mapping(resources.get("limits")).get(
        gke_tpus.TPU_RESOURCE)
    if shape is not None and limit != shape.chips_per_host:
        findings.append(Finding(ERROR, path + ".resources.limits[google.com/tpu]", "is {!r}, "
                                "but a host of this slice has {} chips".format(
                                    written, shape.chips_per_host),
                                "set google.com/tpu: {}".format(shape.chips_per_host)))
    request = _mapping(resources.get("requests")).get(gke_tpus.TPU_RESOURCE)
    if request is not None and gke_tpus.quantity(request) != limit:
        findings.append(Finding(ERROR, path + ".resources.requests[google.com/tpu]", "is {!r}, "
                                "not the limit {!r}".format(request, written),
                                "leave the request out (it follows the limit)"))
    image = container.get("image")
    if isinstance(image, str) and image.split("@")[0].endswith(":xrt"):
        findings.append(Finding(ERROR, path + ".image", "{!r} is the xrt image, which drives "
                                "a remote TPU node; a GKE slice's TPU VMs need the pjrt "
                                "image".format(image), "make build push RUNTIME=pjrt, and use "
                                "its :pjrt tag"))
    findings += security_rules(container, path, pod, pod_path)
    if "command" in container:
        return findings + [Finding(ERROR, path + ".command", "replaces the image's entrypoint, "
                                   "the launcher (python -m launcher), which sets up the TPU "
                                   "runtime and forwards SIGTERM", "remove command; put the "
                                   "job's arguments in args")]
    args = container.get("args")
    args = [str(arg) for arg in args] if isinstance(args, list) else []
    findings += job_dir_rule(args, path + ".args") + spot_checkpoint_rule(args, path + ".args",
                                                                         pod, pod_path)
    trainer = trainer_module(container, args)
    findings += trainer_rule(trainer, args, path + ".args", shape)
    if trainer:  # the trainers' flags; a command of the user's own may mean others by them
        findings += mesh_rule(args, path + ".args", shape)
    if trainer == IMAGENET and shape is not None:
        findings += shared_memory_rule(args, container, path, pod, pod_path, shape)
    return findings


def _tpu_limit(container: Dict[str, Any]) -> Optional[float]:
    limits = _mapping(_mapping(container.get("resources")).get("limits"))
    if gke_tpus.TPU_RESOURCE not in limits:
        return None
    value = gke_tpus.quantity(limits[gke_tpus.TPU_RESOURCE])
    return -1.0 if value is None else value


def _pod(replicated: Dict[str, Any]) -> Dict[str, Any]:
    job = _mapping(_mapping(replicated.get("template")).get("spec"))
    return _mapping(_mapping(job.get("template")).get("spec"))

