"""Local: a laptop, CI, or a cloud job without accelerators. Always matches; it is the last
platform tried, so the job runs on the XLA CPU device only when nothing asked for a TPU."""

from __future__ import annotations

from launcher.job_env import JobEnvironment
from launcher.platforms.base import LOCAL, Platform


def detect(job_env: JobEnvironment, root: str) -> Platform:
    """Always the local CPU platform; notes a Vertex CLUSTER_SPEC when there is one."""
    del root
    if job_env.cluster_spec is not None:
        return Platform(kind=LOCAL, description="Vertex AI job without TPU (XLA CPU device)",
                        facts=(("task", "{} {}".format(job_env.cluster_spec.task_type,
                                                        job_env.cluster_spec.task_index)),))
    return Platform(kind=LOCAL, description="no training platform found (XLA CPU device)")
