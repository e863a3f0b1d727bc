"""Legacy AI Platform Training: the TPU is a separate *TPU node* reached over gRPC.

Detected by ``TPU_CONFIG`` (``{"project", "zone", "tpu_node_name"}``) or ``TPU_NAME``, which
wins over the name in ``TPU_CONFIG`` as it does in TensorFlow's resolver. A ``TF_CONFIG`` that
asks for a TPU worker without either is an error, never a silent CPU run. The node's address
is resolved later, by ``launcher.tpu_wait``; ``TF_CONFIG`` is only cross-checked here.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from launcher.errors import ConfigError
from launcher.job_env import ClusterConfig, JobEnvironment
from launcher.platforms.base import TPU_NODE, Platform, TpuNodeRef

# Accelerator count the legacy platform requires for a single TPU v2/v3 device (seed 000).
_SINGLE_DEVICE_CORES = 8


def detect(job_env: JobEnvironment, root: str) -> Optional[Platform]:
    """A TPU_NODE platform when the environment names a TPU node, else None."""
    del root  # the TPU node is remote: nothing local to look at
    config = job_env.tpu_config
    if config is None and job_env.tpu_name is None:
        tf_config = job_env.tf_config
        if tf_config is not None and tf_config.requests_tpu:
            # Legacy AI Platform's TPU is a node that only TPU_CONFIG names; there are no
            # local chips to fall back on, so carrying on would silently train on the CPU.
            raise ConfigError(
                "TF_CONFIG describes a TPU worker ({}), but neither TPU_CONFIG nor TPU_NAME "
                "names the TPU node".format(_tpu_request(tf_config)),
                "the platform sets TPU_CONFIG for TPU jobs; set it (or TPU_NAME), or set "
                "PJRT_DEVICE=CPU to train on the CPU on purpose")
        return None
    if job_env.tpu_name is not None:
        node = TpuNodeRef(job_env.tpu_name, config.zone if config else None,
                          config.project if config else None)
        source = "TPU_NAME"
    else:
        node = TpuNodeRef(config.tpu_node_name, config.zone, config.project)
        source = "TPU_CONFIG"
    facts, warnings = _tf_config_facts(job_env)
    return Platform(
        kind=TPU_NODE,
        description="legacy AI Platform TPU node (from {})".format(source),
        tpu_node=node,
        facts=(("TPU node", node.name), ("zone", node.zone or "from metadata"),
               ("project", node.project or "from metadata")) + facts,
        warnings=warnings,
    )


def _tpu_request(tf_config: ClusterConfig) -> str:
    parts = []
    if tf_config.worker_type:
        parts.append("worker_type {}".format(tf_config.worker_type))
    if tf_config.accelerator_type:
        parts.append("accelerator {}".format(tf_config.accelerator_type))
    return ", ".join(parts)


def _tf_config_facts(job_env: JobEnvironment) -> Tuple[Tuple[Tuple[str, str], ...],
                                                       Tuple[str, ...]]:
    """Accelerator facts from TF_CONFIG for the log, and warnings when they look wrong."""
    tf_config = job_env.tf_config
    if tf_config is None:
        return (), ()
    facts: List[Tuple[str, str]] = []
    warnings: List[str] = []
    if tf_config.accelerator_type:
        count = tf_config.accelerator_count
        facts.append(("accelerator", "{} x {}".format(count if count is not None else "?",
                                                      tf_config.accelerator_type)))
        if not tf_config.accelerator_type.upper().startswith("TPU"):
            warnings.append("TF_CONFIG asks for accelerator {} but TPU_CONFIG names a TPU node"
                            .format(tf_config.accelerator_type))
        elif (tf_config.accelerator_type.upper() in ("TPU_V2", "TPU_V3")
              and count not in (None, _SINGLE_DEVICE_CORES)):
            warnings.append("TF_CONFIG accelerator count is {}; {} takes {}".format(
                count, tf_config.accelerator_type, _SINGLE_DEVICE_CORES))
    if tf_config.tpu_tf_version:
        facts.append(("tpu_tf_version", tf_config.tpu_tf_version))
    if tf_config.worker_type and tf_config.worker_type != "cloud_tpu":
        warnings.append("TF_CONFIG worker_type is {!r}, not 'cloud_tpu'".format(
            tf_config.worker_type))
    return tuple(facts), tuple(warnings)
