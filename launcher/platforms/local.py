"""Local: a laptop, CI, or a cloud job without accelerators. Always matches; it is the last
platform tried, so the job runs on the XLA CPU device only when nothing asked for a TPU."""

from __future__ import annotations

from launcher.job_env import JobEnvironment
from launcher.platforms.base import LOCAL, Platform
from launcher.platforms.tpu_vm import other_google_devices


def detect(job_env: JobEnvironment, root: str) -> Platform:
    """Always the local CPU platform; notes a Vertex CLUSTER_SPEC when there is one, and
    Google PCI devices that are not TPU chips (a gVNIC, an unknown id), so that a TPU the
    launcher does not know is named in the log instead of silently missing."""
    facts = tuple(("not a TPU", device) for device in other_google_devices(root))
    if job_env.cluster_spec is not None:
        return Platform(kind=LOCAL, description="Vertex AI job without TPU (XLA CPU device)",
                        facts=(("task", "{} {}".format(job_env.cluster_spec.task_type,
                                                        job_env.cluster_spec.task_index)),)
                        + facts)
    return Platform(kind=LOCAL, description="no training platform found (XLA CPU device)",
                    facts=facts)
