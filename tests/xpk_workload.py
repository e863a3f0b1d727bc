"""What ``xpk workload create`` makes of a TPU workload, transcribed from xpk's source
(github.com/AI-Hypercomputer/xpk at 367c838, 2026-06-25): the script its container runs
(``src/xpk/core/docker_container.py``: ``bash -c`` with the user's ``--command`` inside), the
exit codes it restarts (``get_restart_exit_codes`` in ``src/xpk/commands/workload.py``) and
the JobSet it applies (``WORKLOAD_CREATE_YAML`` there, for one TPU slice, no storage, no
debug options), for the tests of docs/gke.md's xpk recipe.

The script is PID 1 of the container: Kubernetes' SIGTERM reaches it, and its trap passes it
to the command's process (``$!``) only once the ``sleep 5`` it is waiting on ends, as bash
runs a trap after the foreground command it waits for.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

# The container's command, with the parts that are empty for a TPU workload without
# --debug-dump-gcs, --deploy-stacktrace-sidecar or a GPU left empty (their lines stay, blank).
_SCRIPT = """echo XPK Start: $(date);
_sigterm() (kill -SIGTERM $! 2>/dev/null;);
trap _sigterm SIGTERM;

({command}) & PID=$!;
while kill -0 $PID 2>/dev/null;
    do sleep 5;
done;
wait $PID;
EXIT_CODE=$?;

echo XPK End: $(date);
echo EXIT_CODE=$EXIT_CODE;


exit $EXIT_CODE
"""
# The wrapper's poll: how long after the container's SIGTERM the command may get it.
POLL_SECONDS = 5


def container_script(command: str) -> str:
    """The text xpk's container runs with ``bash -c`` for ``--command COMMAND``."""
    return _SCRIPT.format(command=command)


def restart_exit_codes(flag: Optional[str]) -> List[int]:
    """The exit codes xpk's JobSet restarts: 42 and 127-255, and those of
    ``--restart-on-exit-codes`` (``"1-63,66"``), each once, in order."""
    codes = [42] + list(range(127, 256))
    for item in (flag.split(",") if flag else []):
        item = item.strip()
        if "-" in item:
            start, end = (int(part) for part in item.split("-"))
            codes.extend(range(start, end + 1))
        else:
            codes.append(int(item))
    return sorted(set(codes))


def flags(argv: Sequence[str]) -> Dict[str, str]:
    """``xpk workload create``'s ``--name value`` / ``--name=value`` options as a mapping."""
    found, words = {}, list(argv)
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        if "=" in word:
            name, value = word[2:].split("=", 1)
        else:
            name, value = word[2:], words[index + 1] if index + 1 < len(words) else ""
        found[name] = value
    return found


def jobset(argv: Sequence[str], topology: str = "4x4", hosts: int = 4, chips: int = 4,
           accelerator: str = "tpu-v5-lite-podslice") -> Dict[str, Any]:
    """The JobSet ``xpk workload create ARGV`` applies for a one-slice TPU workload (defaults:
    v5litepod-16), as a manifest."""
    given = flags(argv)
    name = given.get("docker-name", "jax-tpu")
    codes = restart_exit_codes(given.get("restart-on-exit-codes"))
    container = {
        "name": name, "image": given["docker-image"], "env": [],
        "securityContext": {"privileged": True},
        "command": ["bash", "-c", container_script(given["command"])],
        "resources": {"limits": {"google.com/tpu": chips}},
        "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm-2"}],
    }
    pod = {
        "schedulerName": given.get("scheduler", "default-scheduler"),
        "imagePullSecrets": [{"name": given.get("docker-image-pull-secret", "")}],
        "restartPolicy": "Never",
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": accelerator,
                         "cloud.google.com/gke-tpu-topology": topology},
        "priorityClassName": given.get("priority", "medium"),
        "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
        "terminationGracePeriodSeconds": int(given.get("termination-grace-period-seconds",
                                                       "30")),
        "containers": [container],
        "serviceAccountName": "",
        "tolerations": [{"operator": "Exists", "key": "google.com/tpu"}],
        "volumes": [{"emptyDir": {"medium": "Memory"}, "name": "dshm-2"}],
    }
    workload = given["workload"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": workload,
                     "labels": {"kueue.x-k8s.io/queue-name": "multislice-queue",
                                "xpk.google.com/workload": workload}},
        "spec": {
            "ttlSecondsAfterFinished": 12 * 60 * 60,
            "failurePolicy": {"rules": [{"action": "FailJobSet",
                                         "onJobFailureReasons": ["PodFailurePolicy"]}],
                              "maxRestarts": int(given.get("max-restarts", "0"))},
            "replicatedJobs": [{
                "name": "slice-job", "replicas": int(given.get("num-slices", "1")),
                "template": {"spec": {
                    "parallelism": hosts, "completions": hosts, "backoffLimit": 0,
                    "podFailurePolicy": {"rules": [{
                        "action": "FailJob", "onPodConditions": [],
                        "onExitCodes": {"containerName": name, "operator": "NotIn",
                                        "values": codes}}]},
                    "template": {"metadata": {"labels": {"xpk.google.com/workload": workload}},
                                 "spec": pod}}},
            }],
        },
    }
