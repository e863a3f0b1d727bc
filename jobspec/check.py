"""Validate a job file offline: the rules, apart from the command line (``jobspec.cli``).

A legacy AI Platform job (``trainingInput``, for ``gcloud ai-platform jobs submit training
--config``) is walked against ``ml.v1``'s ``Job`` and a Vertex AI ``CustomJobSpec``
(``workerPoolSpecs``, for ``gcloud ai custom-jobs create --config``) against
``aiplatform.v1`` (``jobspec.shape``); the TPU rules come on top (``jobspec.rules``), then
image URIs, a Vertex job's output directory and unfilled template placeholders. A GKE
JobSet (``kind: JobSet``, for ``kubectl apply``) is checked against its CRD and core/v1
(``jobspec.k8s_schema``), then the TPU rules of ``jobspec.jobset``. ``check_pairing``
compares the image's base with the platform and ``tpuTfVersion`` (the pairing table in
``jobspec.images``).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from jobspec.api import ML, VERTEX
from jobspec.container_args import mesh_rule, trainer_module
from jobspec.findings import ERROR, Finding, join
from jobspec.gke_tpus import slice_shape
from jobspec.images import PJRT, XRT, runtime_of_base, xrt_runtime_of
from jobspec.jobset import jobset_rules, tpu_containers
from jobspec.k8s_schema import JOBSET_API, check_jobset_schema
from jobspec.rules import legacy_rules, region_advice, vertex_rules
from jobspec.shape import check_shape

# Required by ml.v1 but not in a --config file: gcloud's command line gives jobId and region;
# packageUris and pythonModule are for Python packages, not containers.
_GCLOUD_SUPPLIED = frozenset(("jobId", "region", "packageUris", "pythonModule"))
_PLACEHOLDERS = ("YOUR_", "YOUR-", "PROJECT_ID", "<", ">", "${", "PLACEHOLDER", "CHANGE_ME")
# Where a Vertex AI job's outputs go: a Cloud Storage bucket (3-63 characters of lower-case
# letters, digits, dots, hyphens and underscores) and an optional folder.
_OUTPUT_DIR = "baseOutputDirectory.outputUriPrefix"
_GCS_URI = re.compile(r"gs://[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](/.*)?")
_OUTPUT_DIR_FIX = ("give the job's output directory: make submit-vertex "
                   "BASE_OUTPUT_DIR=gs://BUCKET/DIR (jobspec check --base-output-dir)")


def check_job(job: Any, region: Optional[str] = None) -> List[Finding]:
    """All findings for a parsed job file (AI Platform Job or Vertex CustomJobSpec)."""
    if not isinstance(job, dict):
        return [Finding(ERROR, "(top)", "the file is not a YAML mapping",
                        "start from a template in config/")]
    if "trainingInput" in job:
        return _check_ai_platform(job, region) + _placeholders(job, "")
    if "workerPoolSpecs" in job:
        return _check_vertex(job, region) + _placeholders(job, "")
    if is_jobset(job):
        return _check_jobset(job) + _placeholders(job, "")
    return [Finding(ERROR, "(top)", "neither trainingInput (AI Platform), workerPoolSpecs "
                    "(Vertex AI) nor kind: JobSet (GKE) found", "start from a template in "
                    "config/")]


def is_jobset(job: Any) -> bool:
    """Whether a parsed file is a JobSet manifest (GKE)."""
    return isinstance(job, dict) and (job.get("kind") == "JobSet" or str(
        job.get("apiVersion", "")).startswith(JOBSET_API.split("/")[0] + "/"))


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
            return [Finding(ERROR, "trainingInput", "a TPU node needs the xrt image, but the "
                            "image is built on {}".format(base_image),
                            "make build RUNTIME=xrt (or submit to Vertex AI)")]
        version = (spec.get("workerConfig") or {}).get("tpuTfVersion")
        wanted = xrt_runtime_of(base_image)
        if version is not None and str(version) != wanted:
            return [Finding(ERROR, path, "is {!r}, but the image's torch_xla ({}) only talks to "
                            "a {} TPU runtime".format(version, base_image, wanted),
                            'set tpuTfVersion: "{}"'.format(wanted))]
    elif is_jobset(job) and runtime == XRT:
        return [Finding(ERROR, "spec.replicatedJobs", "a GKE TPU slice runs TPU VMs, which "
                        "need the pjrt image, but the image is built on {}".format(base_image),
                        "make build push RUNTIME=pjrt")]
    elif "workerPoolSpecs" in job and runtime == XRT:
        return [Finding(ERROR, "workerPoolSpecs", "Vertex AI runs TPU VMs, which need the pjrt "
                        "image, but the image is built on {}".format(base_image),
                        "make build push RUNTIME=pjrt")]
    return []


def _check_ai_platform(job: Dict[str, Any], region: Optional[str]) -> List[Finding]:
    findings = check_shape(job, ML, "GoogleCloudMlV1__Job", _GCLOUD_SUPPLIED)
    spec = job["trainingInput"]
    if not isinstance(spec, dict):
        return findings
    findings += legacy_rules(spec, region)
    master, worker = spec.get("masterConfig"), spec.get("workerConfig")
    findings += _image(master.get("imageUri") if isinstance(master, dict) else None,
                       "trainingInput.masterConfig.imageUri")
    if isinstance(worker, dict) and "imageUri" in worker:  # optional: the master's by default
        findings += _image(worker["imageUri"], "trainingInput.workerConfig.imageUri")
    return findings


def worker_pools(job: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    """(path, pool) of each mapping in a Vertex job's ``workerPoolSpecs``: a list, or one
    mapping written without ``-``, which gcloud reads as a list of one (``jobspec.shape``)."""
    pools = job.get("workerPoolSpecs")
    if isinstance(pools, dict):
        return [("workerPoolSpecs", pools)]
    return [("workerPoolSpecs[{}]".format(index), pool)
            for index, pool in enumerate(pools if isinstance(pools, list) else [])
            if isinstance(pool, dict)]


def _check_vertex(spec: Dict[str, Any], region: Optional[str]) -> List[Finding]:
    findings = check_shape(spec, VERTEX, "GoogleCloudAiplatformV1CustomJobSpec")
    if spec.get("workerPoolSpecs") == []:
        findings.append(Finding(ERROR, "workerPoolSpecs", "needs at least one pool",
                                "see config/vertex-tpu-v5e.yaml"))
    for path, pool in worker_pools(spec):
        findings += vertex_rules(pool, path)
        container = pool.get("containerSpec")
        findings += _image(container.get("imageUri") if isinstance(container, dict)
                           else None, path + ".containerSpec.imageUri")
        findings += _vertex_mesh(pool, path)
    return findings + _output_directory(spec) + region_advice(region, "--region")


def _vertex_mesh(pool: Dict[str, Any], path: str) -> List[Finding]:
    """``mesh_rule`` on a pool's container ``args``, against its ``tpuTopology``'s chips."""
    container = pool.get("containerSpec")
    args = container.get("args") if isinstance(container, dict) else None
    if not isinstance(args, list) or not trainer_module(container, [str(a) for a in args]):
        return []  # no arguments, or a command of the user's own: its flags are its own
    machine = pool.get("machineSpec")
    topology = machine.get("tpuTopology") if isinstance(machine, dict) else None
    shape = (slice_shape(topology) if isinstance(topology, str)
             and re.fullmatch(r"[0-9]+(x[0-9]+)+", topology) else None)
    return mesh_rule([str(arg) for arg in args], path + ".containerSpec.args", shape)


def _check_jobset(job: Dict[str, Any]) -> List[Finding]:
    findings = check_jobset_schema(job)
    if job.get("apiVersion") != JOBSET_API or job.get("kind") != "JobSet":
        findings.insert(0, Finding(ERROR, "apiVersion", "is {!r} with kind {!r}; the checked "
                                   "API is {} JobSet".format(job.get("apiVersion"),
                                                             job.get("kind"), JOBSET_API),
                                   "set apiVersion: {} and kind: JobSet".format(JOBSET_API)))
    findings += jobset_rules(job)
    for path, container in tpu_containers(job):
        findings += _image(container.get("image"), path + ".image")
    return findings


def _image(uri: Any, path: str) -> List[Finding]:
    if not uri:
        return [Finding(ERROR, path, "is missing", "set it to your pushed image "
                        "(make check-job IMAGE_URI=... fills it in)")]
    if any(marker in str(uri) for marker in _PLACEHOLDERS):
        return [Finding(ERROR, path, "{!r} is a placeholder".format(uri),
                        "pass --image gcr.io/PROJECT/IMAGE:TAG (make check-job and submit-gke do)")]
    return []


def _output_directory(spec: Dict[str, Any]) -> List[Finding]:
    """A Vertex job's ``baseOutputDirectory``: when the job has one, a ``gs://`` URI, since
    Vertex AI derives ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and
    ``AIP_TENSORBOARD_LOG_DIR`` from it. The templates carry a placeholder there, so a job
    made from them cannot be submitted without one (its checkpoints would stay in the
    container, lost on the restart they are for); a job file without the field is the user's
    choice (e.g. ``--job_dir`` in the arguments)."""
    directory = spec.get("baseOutputDirectory")
    if not isinstance(directory, dict):  # absent, or the wrong type (jobspec.shape says so)
        return []
    uri = directory.get("outputUriPrefix")
    if not uri:
        return [Finding(ERROR, _OUTPUT_DIR, "is missing", _OUTPUT_DIR_FIX)]
    if isinstance(uri, str) and "YOUR_" in uri:
        return [Finding(ERROR, _OUTPUT_DIR, "{!r} is a template placeholder".format(uri),
                        _OUTPUT_DIR_FIX)]
    if not isinstance(uri, str) or not _GCS_URI.fullmatch(uri):
        return [Finding(ERROR, _OUTPUT_DIR, "{!r} is not a Cloud Storage URI (gs://BUCKET/DIR)"
                        .format(uri), _OUTPUT_DIR_FIX)]
    return []


def _placeholders(value: Any, path: str) -> List[Finding]:
    """Template values left unfilled anywhere else in the file (buckets, arguments)."""
    if isinstance(value, dict):
        return [f for key, item in value.items() for f in _placeholders(item, join(path, key))]
    if isinstance(value, list):
        return [f for index, item in enumerate(value)
                for f in _placeholders(item, "{}[{}]".format(path, index))]
    # Image URIs and the output directory are checked (and reported) by _image and
    # _output_directory.
    if isinstance(value, str) and "YOUR_" in value \
            and not path.endswith(("imageUri", ".image")) and path != _OUTPUT_DIR:
        return [Finding(ERROR, path, "{!r} is a template placeholder".format(value),
                        "replace it with your value")]
    return []


def set_container_args(job: Dict[str, Any], args: List[str]) -> None:
    """Vertex AI: the job's arguments (they reach the launcher, then the trainer)."""
    for _, pool in worker_pools(job):
        pool.setdefault("containerSpec", {})["args"] = list(args)
    for _, container in tpu_containers(job) if is_jobset(job) else ():
        container["args"] = list(args)


def set_base_output_dir(job: Dict[str, Any], uri: str) -> None:
    """Vertex AI: where the job's outputs go (``baseOutputDirectory.outputUriPrefix``)."""
    directory = job.get("baseOutputDirectory")
    if not isinstance(directory, dict):
        directory = job["baseOutputDirectory"] = {}
    directory["outputUriPrefix"] = uri


def set_image(job: Dict[str, Any], image: str) -> None:
    """Put ``image`` wherever the job names its container image."""
    spec = job.get("trainingInput")
    if isinstance(spec, dict):
        for replica in ("masterConfig", "workerConfig"):
            config = spec.get(replica)
            if isinstance(config, dict) and (replica == "masterConfig" or "imageUri" in config):
                config["imageUri"] = image
    for _, pool in worker_pools(job):
        pool.setdefault("containerSpec", {})["imageUri"] = image
    for _, container in tpu_containers(job) if is_jobset(job) else ():
        container["image"] = image


def set_name(job: Dict[str, Any], name: str) -> None:
    """GKE: the JobSet's name (its pods, Jobs and headless service are named after it)."""
    if is_jobset(job):
        if not isinstance(job.get("metadata"), dict):
            job["metadata"] = {}
        job["metadata"]["name"] = name
