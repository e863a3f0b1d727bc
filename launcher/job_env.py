"""Read the platform's environment variables once into validated, frozen dataclasses.

Inputs (all optional; an empty value counts as unset):

``TPU_CONFIG``   legacy AI Platform: JSON ``{"project", "zone", "tpu_node_name"}``, all non-empty
                 strings.
``TF_CONFIG``    legacy AI Platform / TF convention: JSON ``{"cluster", "task", "environment",
                 "job"}``; ``job`` may be an object or a JSON-encoded string, with snake_case or
                 camelCase keys. Only read for the log and for sanity checks.
``CLUSTER_SPEC`` Vertex AI: the same shape as ``TF_CONFIG``; its ``job`` says which machine
                 and accelerator each worker pool has.
``TPU_NAME``     a TPU node name, preferred over the name in ``TPU_CONFIG``.
``XRT_TPU_CONFIG``, ``TPU_IP_ADDRESS``, ``PJRT_DEVICE``, ``XRT_WORKERS``, ``XRT_DEVICE_MAP``
                 explicit user choices, honoured before anything is detected.
``TPU_ACCELERATOR_TYPE``, ``TPU_WORKER_ID``, ``TPU_WORKER_HOSTNAMES``
                 set on TPU VMs (GKE, Vertex): hints that local TPU chips are expected.
                 ``TPU_WORKER_ID`` (0-based) and ``TPU_WORKER_HOSTNAMES`` (comma-separated,
                 in worker order), which GKE injects into each pod of a multi-host slice,
                 also say which host of the slice this is (``SliceHost``); torch_xla reads
                 them itself, as set.
``TPU_SKIP_MDS_QUERY``, ``TPU_HOST_BOUNDS``, ``TPU_CHIPS_PER_HOST_BOUNDS``,
``TPU_PROCESS_ADDRESSES``
                 what GKE's TPU device plugin says about the slice (``GkeTopology``), checked
                 for agreement on a TPU VM.

Nothing below this module reads ``os.environ``: ``JobEnvironment.from_environ`` takes a
mapping, so tests pass plain dicts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from launcher.errors import ConfigError
from launcher.gke_topology import GkeTopology, first_repeat

# Variables that configure torch_xla's runtime directly; a user who sets one has chosen.
RUNTIME_VARIABLES = ("XRT_TPU_CONFIG", "TPU_IP_ADDRESS", "PJRT_DEVICE", "XRT_WORKERS",
                     "XRT_DEVICE_MAP")
PJRT_DEVICES = ("TPU", "CPU", "CUDA", "GPU", "NEURON")
TPU_VM_HINT_VARIABLES = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES")


@dataclass(frozen=True)
class TpuConfig:
    """``TPU_CONFIG``: where the legacy platform created the job's TPU node."""

    project: str
    zone: str
    tpu_node_name: str

    @classmethod
    def parse(cls, text: str) -> "TpuConfig":
        obj = _json_object("TPU_CONFIG", text)
        fields = {key: _resource_name("TPU_CONFIG." + key, key,
                                      _non_empty_string(obj, "TPU_CONFIG", key))
                  for key in ("project", "zone", "tpu_node_name")}
        return cls(**fields)


@dataclass(frozen=True)
class ClusterConfig:
    """The shared shape of ``TF_CONFIG`` and ``CLUSTER_SPEC``, reduced to what we use.

    ``accelerator_type``/``accelerator_count``/``tpu_tf_version`` come from the legacy job's
    ``worker_config`` (AI Platform). ``machine_types``/``accelerator_types`` list every Vertex
    worker pool's ``machineSpec`` (empty for legacy jobs).
    """

    variable: str
    task_type: Optional[str] = None
    task_index: Optional[int] = None
    cluster: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    worker_type: Optional[str] = None
    accelerator_type: Optional[str] = None
    accelerator_count: Optional[int] = None
    tpu_tf_version: Optional[str] = None
    machine_types: Tuple[str, ...] = ()
    accelerator_types: Tuple[str, ...] = ()

    @classmethod
    def parse(cls, variable: str, text: str) -> "ClusterConfig":
        obj = _json_object(variable, text)
        task = _optional(obj, variable, "task", dict) or {}
        job = _job_object(variable, obj.get("job"))
        worker = _optional_alias(job, variable + ".job", ("worker_config", "workerConfig"), dict)
        worker = worker or {}
        worker_path = variable + ".job.worker_config"
        accel = _optional_alias(worker, worker_path, ("accelerator_config", "acceleratorConfig"),
                                dict) or {}
        accel_path = worker_path + ".accelerator_config"
        machine_types, accelerator_types = _worker_pool_machines(variable, job)
        return cls(
            variable=variable,
            task_type=_optional(task, variable + ".task", "type", str),
            task_index=_optional_int(task.get("index"), variable + ".task.index"),
            cluster=_cluster(variable, obj.get("cluster")),
            worker_type=_optional_alias(job, variable + ".job", ("worker_type", "workerType"), str),
            accelerator_type=_optional(accel, accel_path, "type", str),
            accelerator_count=_optional_int(accel.get("count"), accel_path + ".count"),
            tpu_tf_version=_optional_alias(worker, worker_path,
                                           ("tpu_tf_version", "tpuTfVersion"), str),
            machine_types=machine_types,
            accelerator_types=accelerator_types,
        )

    @property
    def requests_tpu(self) -> bool:
        """True when the job description asks for TPUs (legacy accelerator or Vertex pool)."""
        kinds = (self.accelerator_type or "",) + self.accelerator_types
        return (any(kind.upper().startswith("TPU") for kind in kinds)
                or any(machine.startswith("ct") for machine in self.machine_types)
                or self.worker_type == "cloud_tpu")


@dataclass(frozen=True)
class SliceHost:
    """This host's place in a multi-host TPU slice: worker ``worker_id`` (0-based) of the
    hosts ``hostnames`` lists in worker order."""

    worker_id: int
    hostnames: Tuple[str, ...]

    @classmethod
    def parse(cls, worker_id: Optional[str], hostnames: Optional[str]
              ) -> Optional["SliceHost"]:
        """None without ``TPU_WORKER_HOSTNAMES`` (a single host: torch_xla asks the metadata
        server); a ``ConfigError`` naming the variable when the two disagree."""
        if hostnames is None:
            return None
        names = tuple(name.strip() for name in hostnames.split(","))
        example = "e.g. TPU_WORKER_HOSTNAMES=host-0,host-1,host-2,host-3 TPU_WORKER_ID=2"
        if not all(names):
            raise ConfigError("TPU_WORKER_HOSTNAMES={!r} has an empty host name".format(
                hostnames), "list every host of the slice once, " + example)
        repeated = first_repeat(names)
        if repeated is not None:
            raise ConfigError("TPU_WORKER_HOSTNAMES lists {!r} twice: each host of the slice "
                              "is one worker".format(repeated),
                              "list every host of the slice once, " + example)
        if worker_id is None:
            if len(names) == 1:
                return cls(0, names)
            raise ConfigError("TPU_WORKER_HOSTNAMES lists {} hosts but TPU_WORKER_ID is not "
                              "set: torch_xla cannot tell which host this is".format(
                                  len(names)), "GKE sets both in an Indexed Job; " + example)
        text = worker_id.strip()
        if not (text.isdigit() and text.isascii()) or int(text) >= len(names):
            raise ConfigError("TPU_WORKER_ID={!r} is not a worker of the {} host{} "
                              "TPU_WORKER_HOSTNAMES lists (0 to {})".format(
                                  worker_id, len(names), "" if len(names) == 1 else "s",
                                  len(names) - 1), example)
        return cls(int(text), names)

    def describe(self) -> str:
        return "host {} of {} (TPU_WORKER_ID={}; TPU_WORKER_HOSTNAMES: {})".format(
            self.worker_id + 1, len(self.hostnames), self.worker_id, ", ".join(self.hostnames))


@dataclass(frozen=True)
class JobEnvironment:
    """Everything the launcher reads from the environment, parsed and validated once."""

    tpu_config: Optional[TpuConfig] = None
    tf_config: Optional[ClusterConfig] = None
    cluster_spec: Optional[ClusterConfig] = None
    tpu_name: Optional[str] = None
    runtime_settings: Tuple[Tuple[str, str], ...] = ()
    tpu_vm_hints: Tuple[Tuple[str, str], ...] = ()
    slice_host: Optional[SliceHost] = None
    gke_topology: Optional[GkeTopology] = None

    def setting(self, name: str) -> Optional[str]:
        """The user's value of runtime variable ``name``, or None when unset."""
        return dict(self.runtime_settings).get(name)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> "JobEnvironment":
        """Parse ``environ``; raise ``ConfigError`` naming the first bad variable or field."""

        def get(name: str) -> Optional[str]:
            value = environ.get(name, "")
            return value if value.strip() else None

        tpu_config, tf_config, cluster_spec = get("TPU_CONFIG"), get("TF_CONFIG"), get(
            "CLUSTER_SPEC")
        pjrt_device, tpu_name = get("PJRT_DEVICE"), get("TPU_NAME")
        if pjrt_device is not None and pjrt_device.strip().upper() not in PJRT_DEVICES:
            raise ConfigError(
                "PJRT_DEVICE={!r} is not a device torch_xla knows".format(pjrt_device),
                "use one of {}, or unset it to let the launcher choose".format(
                    ", ".join(PJRT_DEVICES)))
        return cls(
            tpu_config=TpuConfig.parse(tpu_config) if tpu_config else None,
            tf_config=ClusterConfig.parse("TF_CONFIG", tf_config) if tf_config else None,
            cluster_spec=(ClusterConfig.parse("CLUSTER_SPEC", cluster_spec)
                          if cluster_spec else None),
            tpu_name=(_resource_name("TPU_NAME", "tpu_node_name", tpu_name.strip()) if tpu_name
                      else None),
            runtime_settings=tuple(
                (name, environ[name].strip().upper() if name == "PJRT_DEVICE"
                 else environ[name].strip())
                for name in RUNTIME_VARIABLES if get(name)),
            tpu_vm_hints=tuple((name, environ[name].strip()) for name in TPU_VM_HINT_VARIABLES
                               if get(name)),
            slice_host=SliceHost.parse(get("TPU_WORKER_ID"), get("TPU_WORKER_HOSTNAMES")),
            gke_topology=GkeTopology.parse(environ),
        )


# What can stand in a node's resource path (``projects/P/locations/Z/nodes/N``): node names
# are lowercase RFC 1035 labels; zones and project IDs (which may carry a ``domain:`` prefix)
# are checked only for characters that no such name has. Anything else is a typo, and the API
# would answer 404, which reads as "not created yet": the launcher would wait out its whole
# deadline for a node that cannot exist.
_RESOURCE_NAMES = {
    "tpu_node_name": re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"),
    "zone": re.compile(r"[a-z][-a-z0-9]*"),
    "project": re.compile(r"[A-Za-z0-9][-A-Za-z0-9.:]*"),
}
_RESOURCE_HINTS = {
    "tpu_node_name": "a TPU node name is up to 63 lowercase letters, digits and '-', starting "
                     "with a letter (gcloud compute tpus list)",
    "zone": "a zone looks like us-central1-b",
    "project": "use the project ID (gcloud projects list), e.g. my-project-123",
}


def _resource_name(variable: str, kind: str, value: str) -> str:
    """``value`` (from ``variable``) when it can name a Cloud TPU resource of ``kind`` (a key
    of ``_RESOURCE_NAMES``), else a ``ConfigError``."""
    if not _RESOURCE_NAMES[kind].fullmatch(value):
        hint = _RESOURCE_HINTS[kind]
        if kind == "tpu_node_name" and "://" in value:
            hint = 'to use a TPU by address, set XRT_TPU_CONFIG="tpu_worker;0;HOST:PORT"'
        raise ConfigError("{}={!r} is not a valid {}".format(
            variable, value, kind.replace("tpu_node_name", "TPU node name")), hint)
    return value


def _json_object(variable: str, text: str) -> Dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigError(
            "{} is not valid JSON ({})".format(variable, error),
            "set {} to a JSON object, e.g. {}".format(variable, _EXAMPLES[variable]))
    except RecursionError:  # the parser recurses once per nesting level
        raise ConfigError(
            "{} is nested too deeply to be a job description".format(variable),
            "set {} to a JSON object, e.g. {}".format(variable, _EXAMPLES[variable]))
    if not isinstance(value, dict):
        raise ConfigError(
            "{} must be a JSON object, got {}".format(variable, _json_type(value)),
            "set {} to a JSON object, e.g. {}".format(variable, _EXAMPLES[variable]))
    return value


def _job_object(variable: str, job: Any) -> Dict[str, Any]:
    """``job`` is an object, a JSON-encoded object (legacy AI Platform), or absent."""
    if job is None:
        return {}
    if isinstance(job, str):
        try:
            job = json.loads(job)
        except ValueError as error:
            raise ConfigError(
                "{}.job is a string but not valid JSON ({})".format(variable, error),
                "{}.job must be an object or a JSON-encoded object".format(variable))
    if not isinstance(job, dict):
        raise ConfigError(
            "{}.job must be an object, got {}".format(variable, _json_type(job)),
            "{}.job must be an object or a JSON-encoded object".format(variable))
    return job


def _non_empty_string(obj: Mapping[str, Any], variable: str, key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if key not in obj else "{}".format(_json_type(value))
        raise ConfigError(
            "{}.{} must be a non-empty string ({})".format(variable, key, got),
            "set {} like {}".format(variable, _EXAMPLES[variable]))
    return value.strip()


def _optional(obj: Mapping[str, Any], path: str, key: str, kind: type) -> Any:
    value = obj.get(key)
    if value is not None and not isinstance(value, kind):
        raise ConfigError(
            "{}.{} must be {}, got {}".format(path, key, _KIND_NAMES[kind], _json_type(value)),
            "fix or remove {}.{}".format(path, key))
    return value


def _optional_alias(obj: Mapping[str, Any], path: str, keys: Tuple[str, str], kind: type) -> Any:
    """Read a field that may be spelled in snake_case (legacy) or camelCase (API)."""
    for key in keys:
        value = _optional(obj, path, key, kind)
        if value is not None:
            return value
    return None


def _optional_int(value: Any, path: str) -> Optional[int]:
    """An integer, or a string of digits (the legacy platform sends numbers as strings)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError("{} must be a whole number, got {}".format(path, _json_type(value)),
                          "fix or remove {}".format(path))
    if isinstance(value, str):
        if not value.strip().isdigit() or not value.strip().isascii():
            raise ConfigError("{} must be a whole number, got {!r}".format(path, value),
                              "fix or remove {}".format(path))
        value = int(value.strip())
    if value < 0:
        raise ConfigError("{} must not be negative, got {}".format(path, value),
                          "fix or remove {}".format(path))
    return value


def _cluster(variable: str, cluster: Any) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    if cluster is None:
        return ()
    path = variable + ".cluster"
    if not isinstance(cluster, dict):
        raise ConfigError("{} must be an object, got {}".format(path, _json_type(cluster)),
                          'use {{"master": ["host:port"]}} or remove it')
    result = []
    for task_type, hosts in cluster.items():
        if not isinstance(hosts, list) or not all(isinstance(host, str) for host in hosts):
            raise ConfigError(
                "{}.{} must be a list of \"host:port\" strings".format(path, task_type),
                'use {{"{}": ["host:port"]}}'.format(task_type))
        result.append((task_type, tuple(hosts)))
    return tuple(result)


def _worker_pool_machines(variable: str, job: Mapping[str, Any]) -> Tuple[Tuple[str, ...],
                                                                           Tuple[str, ...]]:
    """Machine and accelerator types of every Vertex worker pool in ``job``."""
    pools = _optional_alias(job, variable + ".job", ("worker_pool_specs", "workerPoolSpecs"),
                            list) or []
    machines, accelerators = [], []
    for index, pool in enumerate(pools):
        path = "{}.job.workerPoolSpecs[{}]".format(variable, index)
        if not isinstance(pool, dict):
            raise ConfigError("{} must be an object, got {}".format(path, _json_type(pool)),
                              "fix or remove {}".format(path))
        spec = _optional_alias(pool, path, ("machine_spec", "machineSpec"), dict) or {}
        spec_path = path + ".machineSpec"
        machine = _optional_alias(spec, spec_path, ("machine_type", "machineType"), str)
        accelerator = _optional_alias(spec, spec_path, ("accelerator_type", "acceleratorType"),
                                      str)
        machines.extend([machine] if machine else [])
        accelerators.extend([accelerator] if accelerator else [])
    return tuple(machines), tuple(accelerators)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in _KIND_NAMES.items():
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return name
    return type(value).__name__


_KIND_NAMES = {bool: "a boolean", dict: "an object", list: "a list", str: "a string",
               int: "a number", float: "a number"}

_EXAMPLES = {
    "TPU_CONFIG": '{"project": "P", "zone": "us-central1-b", "tpu_node_name": "N"}',
    "TF_CONFIG": '{"cluster": {"master": ["127.0.0.1:2222"]}, "task": {"type": "master", '
                 '"index": 0}}',
    "CLUSTER_SPEC": '{"cluster": {"workerpool0": ["host:2222"]}, "task": {"type": '
                    '"workerpool0", "index": 0}}',
}
