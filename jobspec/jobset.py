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
  ``trainer.data.plan`` computes for the arguments (Kubernetes gives 64 MB; the trainer stops
  with exit 78), and a container memory limit, if any, no smaller;
- ``terminationGracePeriodSeconds`` at least 30 (the checkpoint at SIGTERM must fit);
- ``failurePolicy.maxRestarts`` at least 1, and a ``gs://`` job dir, the same for every pod and
  restart: preemption restarts the pods, which resume from its newest checkpoint.

Values of the wrong type are the schema's findings; the rules read around them.
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jobspec import gke_tpus
from jobspec.findings import ERROR, WARNING, Finding
from trainer.data import plan
from trainer.data.workers import auto_workers
from trainer.errors import TrainerError

MIN_GRACE_SECONDS = 30
SHM_PATH = "/dev/shm"
IMAGENET = "trainer.imagenet"
# The ImageNet trainer's defaults (trainer/imagenet.py, trainer/config.py) for what sizes
# /dev/shm: per-device batches, data workers (-1: one per host core but one), image size.
_IMAGENET_DEFAULTS = {"batch_size": 128, "eval_batch_size": 0, "num_workers": -1,
                      "image_size": 224}


def jobset_rules(job: Dict[str, Any]) -> List[Finding]:
    """Findings of the TPU rules for a JobSet manifest (a mapping)."""
    spec = _mapping(job.get("spec"))
    findings = _restarts(spec) + _network(spec)
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
    for index, container in tpu:
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
    if accelerator not in gke_tpus.ACCELERATORS:
        return None, [Finding(ERROR, where.format(gke_tpus.ACCELERATOR_LABEL), "{!r} is not a "
                              "TPU this image runs on GKE".format(accelerator),
                              "use " + known)]
    spec = gke_tpus.ACCELERATORS[accelerator]
    if topology not in spec.topologies:
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
                                    "slice has {} host{} (one pod each){}".format(
                                        value, hosts, "" if hosts == 1 else "s",
                                        "" if field in job else " (left out: 1)"),
                                    "set {}: {}".format(field, hosts)))
    return findings


def _container(container: Dict[str, Any], path: str, pod: Dict[str, Any], pod_path: str,
               shape: Optional[gke_tpus.SliceShape]) -> List[Finding]:
    findings = []
    resources = _mapping(container.get("resources"))
    limit = _tpu_limit(container)
    if shape is not None and limit != shape.chips_per_host:
        findings.append(Finding(ERROR, path + ".resources.limits[google.com/tpu]", "is {!r}, "
                                "but a host of this slice has {} chips".format(
                                    _mapping(resources.get("limits")).get(
                                        gke_tpus.TPU_RESOURCE), shape.chips_per_host),
                                "set google.com/tpu: {}".format(shape.chips_per_host)))
    request = _mapping(resources.get("requests")).get(gke_tpus.TPU_RESOURCE)
    if request is not None and gke_tpus.quantity(request) != limit:
        findings.append(Finding(ERROR, path + ".resources.requests[google.com/tpu]", "is {!r}, "
                                "not the limit {!r}".format(request, limit),
                                "leave the request out (it follows the limit)"))
    image = container.get("image")
    if isinstance(image, str) and image.split("@")[0].endswith(":xrt"):
        findings.append(Finding(ERROR, path + ".image", "{!r} is the xrt image, which drives "
                                "a remote TPU node; a GKE slice's TPU VMs need the pjrt "
                                "image".format(image), "make build push RUNTIME=pjrt, and use "
                                "its :pjrt tag"))
    if "command" in container:
        return findings + [Finding(ERROR, path + ".command", "replaces the image's entrypoint, "
                                   "the launcher (python -m launcher), which sets up the TPU "
                                   "runtime and forwards SIGTERM", "remove command; put the "
                                   "job's arguments in args")]
    args = container.get("args")
    args = [str(arg) for arg in args] if isinstance(args, list) else []
    findings += _job_dir(args, path + ".args")
    if _trainer(container, args) == IMAGENET and shape is not None:
        findings += _shared_memory(args, container, path, pod, pod_path, shape)
    return findings


def _job_dir(args: Sequence[str], path: str) -> List[Finding]:
    job_dir = _flag(args, ("job-dir", "job_dir"))
    if job_dir is None:
        return [Finding(ERROR, path, "has no --job-dir: checkpoints stay in the pod and every "
                        "restart starts from scratch", "add --job-dir=gs://BUCKET/jobs/NAME")]
    if not job_dir.startswith("gs://"):
        return [Finding(ERROR, path, "--job-dir={} is not gs://: the pods of a slice and their "
                        "restarts share no disk".format(job_dir),
                        "use --job-dir=gs://BUCKET/jobs/NAME")]
    if "$(" in job_dir or "${" in job_dir:
        return [Finding(ERROR, path, "--job-dir={} differs between pods or restarts, so a "
                        "restart finds no checkpoint".format(job_dir),
                        "use one fixed gs:// path for the whole job")]
    return []


def _shared_memory(args: Sequence[str], container: Dict[str, Any], path: str,
                   pod: Dict[str, Any], pod_path: str, shape: gke_tpus.SliceShape
                   ) -> List[Finding]:
    values = {}
    for name, default in _IMAGENET_DEFAULTS.items():
        text = _flag(args, (name,))
        try:
            values[name] = default if text is None else int(text)
        except ValueError:
            return [Finding(ERROR, path + ".args", "--{}={!r} is not a whole number".format(
                name, text), "e.g. --{}={}".format(name, default))]
    workers = values["num_workers"]
    workers = auto_workers(_host_cores(pod)) if workers < 0 else workers
    try:
        sizes = plan.shape_from_flags(shape.hosts, shape.chips_per_host, values["batch_size"],
                                      values["eval_batch_size"], workers, values["image_size"])
    except TrainerError as error:  # names the flag
        return [Finding(ERROR, path + ".args", error.message, error.hint or "")]
    needed = plan.shared_memory(sizes)
    if not needed:
        return []
    what = "the plan needs {:.1f} GB of /dev/shm per host ({} data workers; python -m " \
           "trainer.data.plan --hosts={} --devices_per_host={})".format(
               needed / 1e9, workers, shape.hosts, shape.chips_per_host)
    fix = "mount an emptyDir {{medium: Memory, sizeLimit: {}}} at /dev/shm, or pass " \
          "--num_workers=0 (needs none)".format(gke_tpus.gib(needed * 1.1))
    volume_name = next((m.get("name") for m in _list(container.get("volumeMounts"))
                        if isinstance(m, dict) and m.get("mountPath") in (SHM_PATH,
                                                                          SHM_PATH + "/")), None)
    volumes = [(i, v) for i, v in enumerate(_list(pod.get("volumes")))
               if isinstance(v, dict) and v.get("name") == volume_name]
    if volume_name is None or not volumes:
        return [Finding(ERROR, path + ".volumeMounts", "nothing at /dev/shm: Kubernetes gives "
                        "64 MB and the trainer stops with exit 78; " + what, fix)]
    index, volume = volumes[0]
    empty_dir = _mapping(volume.get("emptyDir"))
    volume_path = "{}.volumes[{}].emptyDir".format(pod_path, index)
    if empty_dir.get("medium") != "Memory":
        return [Finding(ERROR, volume_path + ".medium", "is not Memory: /dev/shm must be "
                        "memory; " + what, fix)]
    findings = []
    size = gke_tpus.quantity(empty_dir.get("sizeLimit"))
    if "sizeLimit" not in empty_dir:
        findings.append(Finding(WARNING, volume_path + ".sizeLimit", "is not set: /dev/shm may "
                                "grow to the pod's memory limit; " + what, fix))
    elif size is not None and size < needed:
        findings.append(Finding(ERROR, volume_path + ".sizeLimit", "{} is too small: ".format(
            empty_dir.get("sizeLimit")) + what, fix))
    memory = gke_tpus.quantity(_mapping(_mapping(container.get("resources")).get(
        "limits")).get("memory"))
    if memory is not None and memory < needed:
        findings.append(Finding(ERROR, path + ".resources.limits.memory", "is below the "
                                "/dev/shm the trainer fills (a memory emptyDir counts against "
                                "it): " + what, "raise the limit, or remove it"))
    return findings


def _host_cores(pod: Dict[str, Any]) -> int:
    """vCPUs of one host of the pod's slice (what ``--num_workers=-1`` counts)."""
    accelerator = _mapping(pod.get("nodeSelector")).get(gke_tpus.ACCELERATOR_LABEL)
    return gke_tpus.ACCELERATORS[accelerator].host_cores if accelerator in \
        gke_tpus.ACCELERATORS else 112


def _trainer(container: Dict[str, Any], args: Sequence[str]) -> str:
    """The trainer module the launcher will run: ``--trainer`` in front of the arguments,
    else ``LAUNCHER_TRAINER`` in the container's env, else the image's (MNIST)."""
    command = None
    if args[:1] == ["--trainer"] and len(args) > 1:
        command = args[1]
    elif args and args[0].startswith("--trainer="):
        command = args[0].split("=", 1)[1]
    for variable in _list(container.get("env")):
        if (command is None and isinstance(variable, dict)
                and variable.get("name") == "LAUNCHER_TRAINER"):
            command = str(variable.get("value", ""))
    try:
        words = shlex.split(command or "")
    except ValueError:
        return ""
    return words[2] if words[1:2] == ["-m"] and len(words) > 2 else "trainer.mnist"


def _flag(args: Sequence[str], names: Sequence[str]) -> Optional[str]:
    """The last value of ``--NAME=V`` or ``--NAME V`` for any of ``names`` (absl takes the
    last)."""
    value = None
    for index, arg in enumerate(args):
        for name in names:
            if arg.startswith("--{}=".format(name)):
                value = arg.split("=", 1)[1]
            elif arg == "--" + name and index + 1 < len(args):
                value = args[index + 1]
    return value


def _tpu_limit(container: Dict[str, Any]) -> Optional[float]:
    limits = _mapping(_mapping(container.get("resources")).get("limits"))
    if gke_tpus.TPU_RESOURCE not in limits:
        return None
    value = gke_tpus.quantity(limits[gke_tpus.TPU_RESOURCE])
    return -1.0 if value is None else value


def _pod(replicated: Dict[str, Any]) -> Dict[str, Any]:
    job = _mapping(_mapping(replicated.get("template")).get("spec"))
    return _mapping(_mapping(job.get("template")).get("spec"))


def _mapping(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []

