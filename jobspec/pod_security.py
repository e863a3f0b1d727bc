"""The rules on who the trainer's container runs as (``securityContext``), which Kubernetes
accepts at ``kubectl apply`` and which then fail on the node (used by ``jobspec.jobset``; the
reasons are in docs/gke.md, "Running as non-root"):

- ``runAsNonRoot: true`` without a ``runAsUser``: the image names no user, so it runs as root,
  and the kubelet refuses to start the container ("container has runAsNonRoot and image will
  run as root", ``CreateContainerConfigError``): the pods never start and nothing is logged.
  The image runs as any uid, with or without an ``/etc/passwd`` entry, so any number works.
- ``runAsNonRoot: true`` with ``runAsUser: 0``: refused the same way.
- ``readOnlyRootFilesystem: true`` without a volume at ``/tmp``: Python's temporary files,
  the checkpoints' staging and libtpu's logs (``/tmp/tpu_logs``) are written there.

The container's own ``securityContext`` overrides the pod's, field by field, as Kubernetes
applies them.
"""

from __future__ import annotations

from typing import Any, Dict, List

from jobspec.findings import ERROR, Finding
from jobspec.gke_tpus import as_list as _list
from jobspec.gke_tpus import as_mapping as _mapping

TEMPLATE = "config/gke-jobset-v5e-16.yaml"


def security_rules(container: Dict[str, Any], path: str, pod: Dict[str, Any], pod_path: str
                   ) -> List[Finding]:
    """Findings for the TPU container ``container`` (at ``path``) of pod spec ``pod``."""
    own = _mapping(container.get("securityContext"))
    inherited = _mapping(pod.get("securityContext"))

    def effective(field: str) -> Any:
        return own[field] if field in own else inherited.get(field)

    def where(field: str) -> str:
        if field in own:
            return "{}.securityContext.{}".format(path, field)
        return "{}.securityContext.{}".format(pod_path, field)

    findings = []
    if effective("runAsNonRoot") is True:
        user = effective("runAsUser")
        if user is None:
            findings.append(Finding(ERROR, where("runAsNonRoot"), "is true without a "
                                    "runAsUser: the image runs as root, so the kubelet refuses "
                                    "to start the container (CreateContainerConfigError)",
                                    "add runAsUser: 1000 (any uid works; the image needs no "
                                    "/etc/passwd entry), as " + TEMPLATE + " does"))
        elif user == 0:
            findings.append(Finding(ERROR, where("runAsUser"), "is 0 (root) next to "
                                    "runAsNonRoot: true: the kubelet refuses to start the "
                                    "container", "set runAsUser: 1000"))
    if own.get("readOnlyRootFilesystem") is True and not _mounts(container, "/tmp"):
        findings.append(Finding(ERROR, path + ".securityContext.readOnlyRootFilesystem",
                                "is true but nothing is mounted at /tmp: temporary files, "
                                "checkpoint staging and libtpu's logs are written there",
                                "mount an emptyDir at /tmp, as " + TEMPLATE + " does"))
    return findings


def _mounts(container: Dict[str, Any], mount_path: str) -> bool:
    paths = [_mapping(mount).get("mountPath") for mount in _list(container.get("volumeMounts"))]
    # A path of the wrong type is the schema's finding (make fuzz found None here).
    return any(isinstance(path, str) and path.rstrip("/") == mount_path for path in paths)
