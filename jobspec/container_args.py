"""The rules on what a GKE TPU container's ``args`` give the launcher and the trainer (used by
``jobspec.jobset``): a ``gs://`` job dir, the same for every pod and restart (checkpoints must
outlive the pods), and, for the ImageNet trainer with data workers, a memory ``emptyDir`` at
``/dev/shm`` of at least what ``trainer.data.plan`` computes for the arguments and the slice
(its functions, imported: they load no torch). Kubernetes gives a container 64 MB of
``/dev/shm``; a trainer whose plan does not fit stops at start with exit 78. A memory
``emptyDir`` counts against the container's memory limit, so a limit, if any, must hold it.

Two more, on what the arguments are for: flags only the ImageNet trainer has, given to the
MNIST trainer (the image's default when neither ``LAUNCHER_TRAINER`` nor ``--trainer`` names
one), stop it with exit 64 once the slice is paid for (an error); an ImageNet-looking
``--data_dir`` for MNIST on a multi-host slice is a warning (a folder name is a guess). On
Spot or preemptible nodes, which give a pod about 15 s at preemption (whatever its grace
period), a run without ``--checkpoint_minutes`` can lose an epoch (advice).
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Sequence

from jobspec import gke_tpus
from jobspec.findings import ERROR, WARNING, Finding
from jobspec.gke_tpus import as_list as _list
from jobspec.gke_tpus import as_mapping as _mapping
from trainer.data import plan
from trainer.data.workers import auto_workers
from trainer.errors import TrainerError

SHM_PATH = "/dev/shm"
# The ImageNet trainer's defaults (trainer/imagenet.py, trainer/config.py) for what sizes
# /dev/shm: per-device batches, data workers (-1: one per host core but one), image size.
_IMAGENET_DEFAULTS = {"batch_size": 128, "eval_batch_size": 0, "num_workers": -1,
                      "image_size": 224}
MNIST = "trainer.mnist"
DEFAULT_TRAINER = "python -m " + MNIST  # the image's LAUNCHER_TRAINER (Dockerfile)
# The ImageNet trainer's flags that the MNIST trainer does not define (trainer/mnist.py,
# define_flags: tests/delivery/test_jobset.py compares them with the trainers' own).
IMAGENET_ONLY_FLAGS = ("image_size", "label_smoothing", "max_bad_images", "model", "model_kwargs",
                       "num_workers")
_IMAGENET_DATA = ("imagenet", "shard")
# Node labels of preemptible capacity: a pod gets about 15 s after the 30 s notice.
SPOT_LABELS = ("cloud.google.com/gke-spot", "cloud.google.com/gke-preemptible")
_IMAGENET_TRAINER_FIX = ("add env LAUNCHER_TRAINER: python -m trainer.imagenet to the container "
                         "(or --trainer='python -m trainer.imagenet' first in args)")


def job_dir_rule(args: Sequence[str], path: str) -> List[Finding]:
    """Findings (at ``path``, the container's ``args``) for the job dir the args give."""
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


def shared_memory_rule(args: Sequence[str], container: Dict[str, Any], path: str,
                   pod: Dict[str, Any], pod_path: str, shape: gke_tpus.SliceShape
                   ) -> List[Finding]:
    """Findings for the ImageNet trainer's ``/dev/shm`` on one host of ``shape``: the memory
    volume at ``/dev/shm`` in ``container`` (at ``path``) of ``pod`` (at ``pod_path``)."""
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


def trainer_rule(trainer: str, args: Sequence[str], path: str,
                 shape: Optional[gke_tpus.SliceShape]) -> List[Finding]:
    """Findings (at ``path``, the container's ``args``) for arguments meant for the ImageNet
    trainer while ``trainer`` (``trainer_module``) is MNIST."""
    if trainer != MNIST:
        return []
    given = [name for name in IMAGENET_ONLY_FLAGS if _flag(args, (name,)) is not None
             or any(arg in ("--no" + name, "--" + name) for arg in args)]
    if given:
        return [Finding(ERROR, path, "--{} is a flag of the ImageNet trainer, but the "
                        "container runs MNIST (no LAUNCHER_TRAINER or --trainer), which stops "
                        "with exit 64".format(given[0]), _IMAGENET_TRAINER_FIX)]
    data_dir = _flag(args, ("data_dir", "data-dir")) or ""
    if shape is not None and shape.hosts > 1 and any(
            word in data_dir.lower() for word in _IMAGENET_DATA):
        return [Finding(WARNING, path, "--data_dir={} looks like ImageNet shards, but the "
                        "container runs the MNIST trainer (no LAUNCHER_TRAINER or --trainer), "
                        "which stops with exit 65 on them".format(data_dir),
                        _IMAGENET_TRAINER_FIX)]
    return []


def mesh_rule(args: Sequence[str], path: str, shape: Optional[gke_tpus.SliceShape]
              ) -> List[Finding]:
    """Findings (at ``path``, the container's ``args``) for ``--sharding`` and ``--mesh``: the
    values the trainers refuse (exit 64 at start on every host), and a mesh that is not the
    slice's chip count."""
    from trainer.parallel.mesh import check_flags, mesh_shape

    sharding = _flag(args, ("sharding",)) or "dp"
    mesh = _flag(args, ("mesh",)) or ""
    try:
        check_flags(sharding, mesh)
        if shape is not None and mesh:
            mesh_shape(sharding, mesh, shape.chips)
    except TrainerError as error:
        return [Finding(ERROR, path, error.message + (" (the slice's chips)" if "the job has"
                                                      in error.message else ""),
                        error.hint or "")]
    return []


def spot_checkpoint_rule(args: Sequence[str], path: str, pod: Dict[str, Any], pod_path: str
                         ) -> List[Finding]:
    """Advice (at ``path``, the container's ``args``) for a pod on Spot or preemptible nodes
    without ``--checkpoint_minutes``."""
    selector = _mapping(pod.get("nodeSelector"))
    spot = next((label for label in SPOT_LABELS if str(selector.get(label)).lower() == "true"),
                None)
    minutes = _flag(args, ("checkpoint_minutes", "checkpoint-minutes"))
    if spot is None or (minutes is not None and minutes.strip() not in ("0", "")):
        return []
    return [Finding(WARNING, path, "no --checkpoint_minutes on {} nodes ({}.nodeSelector): a "
                    "preemption gives the pods about 15 s, often too little for the checkpoint "
                    "at SIGTERM, so a restart can lose the epoch".format(
                        "Spot" if spot == SPOT_LABELS[0] else "preemptible", pod_path),
                    "add --checkpoint_minutes=30 (a preemption then loses at most 30 minutes)")]


def _host_cores(pod: Dict[str, Any]) -> int:
    """vCPUs of one host of the pod's slice (what ``--num_workers=-1`` counts)."""
    accelerator = _mapping(pod.get("nodeSelector")).get(gke_tpus.ACCELERATOR_LABEL)
    return gke_tpus.ACCELERATORS[accelerator].host_cores if accelerator in \
        gke_tpus.ACCELERATORS else 112


def trainer_module(container: Dict[str, Any], args: Sequence[str]) -> str:
    """The trainer module the launcher will run (``python -m MODULE``): ``--trainer`` in front
    of the arguments, else ``LAUNCHER_TRAINER`` in the container's env, else the image's
    (MNIST); "" for a command of the user's own (after ``--``, or not ``python -m``) or one
    this cannot read (a ``valueFrom``, an unclosed quote)."""
    command = None
    if args[:1] == ["--trainer"] and len(args) > 1:
        command = args[1]
    elif args and args[0].startswith("--trainer="):
        command = args[0].split("=", 1)[1]
    after = list(args)[list(args).index("--") + 1:] if "--" in args else []
    if after and not after[0].startswith("-"):
        return ""  # -- COMMAND: the user's command replaces the trainer
    for variable in _list(container.get("env")):
        if (command is None and isinstance(variable, dict)
                and variable.get("name") == "LAUNCHER_TRAINER"):
            if "value" not in variable:
                return ""
            command = str(variable["value"])
    try:
        words = shlex.split(DEFAULT_TRAINER if command is None else command)
    except ValueError:
        return ""
    return words[2] if words[1:2] == ["-m"] and len(words) > 2 else ""


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
