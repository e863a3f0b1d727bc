"""The rules on how a GKE JobSet's pods fail, restart and are named, which Kubernetes and
JobSet would refuse only at ``kubectl apply`` or that leave a slice that never forms (used by
``jobspec.jobset``; the reasons are in docs/gke.md):

- ``restartPolicy``: ``Always`` is refused for a Job; JobSet's default ``OnFailure`` restarts
  one host's container alone, which cannot rejoin the slice's running SPMD program, and is
  refused next to a ``podFailurePolicy``. The templates say ``Never``.
- no ``podFailurePolicy``: every failure, a bad flag included, is retried ``maxRestarts``
  times, and a preemption uses up a restart like a crash (advice).
- ``hostNetwork: true`` without ``dnsPolicy: ClusterFirstWithHostNet``: the pods resolve names
  with the node's DNS, which does not know the JobSet's headless service, so the hosts
  ``TPU_WORKER_HOSTNAMES`` lists cannot find each other.
- one container asking for ``google.com/tpu``: a second one asks for chips a host does not
  have, and the pod is never scheduled.
- the JobSet's name: JobSet names its Jobs ``NAME-REPLICATEDJOB-J`` and their pods
  ``NAME-REPLICATEDJOB-J-P-xxxxx``, each of which must be a DNS-1035 label (lower-case
  letters, digits and '-', starting with a letter, at most 63 characters): its webhook refuses
  the JobSet otherwise.
- ``failurePolicy.rules`` as JobSet's webhook validates them (a unique name matching its
  pattern, known Job failure reasons, existing replicated jobs, message patterns that are
  regular expressions), and each ``podFailurePolicy`` exit-code rule's ``containerName`` a
  container of the pod (Kubernetes refuses the Job otherwise).
- a JobSet rule's message pattern ``... rule at index N`` names the ``podFailurePolicy`` rule of
  the kind its action expects: JobSet matches the Job's failure message ("... matching FailJob
  rule at index N"), so with the rules swapped a usage error (exit 64) would be restarted
  forever by ``RestartJobSetAndIgnoreMaxRestarts``. A restart that ignores ``maxRestarts``
  must name a ``FailJob`` rule on the ``DisruptionTarget`` condition, ``FailJobSet`` a
  ``FailJob`` rule on exit codes.
- exit-code lists as Kubernetes validates a Job (``validatePodFailurePolicyRuleOnExitCodes``):
  values sorted, none repeated, and no 0 with ``In``. JobSet's webhook does not look inside the
  Job template, so the JobSet is created and its Job never is (only a ``JobCreationFailed``
  event says why).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Sequence, Tuple

from jobspec.findings import ERROR, WARNING, Finding
from jobspec.gke_tpus import as_list as _list
from jobspec.gke_tpus import as_mapping as _mapping

MAX_LABEL = 63
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_POD_SUFFIX = "-xxxxx"  # the 5 random characters Kubernetes appends to a Job's pod names
# JobSet v0.12.0's webhook (pkg/webhooks/jobset_webhook.go).
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy")
_POLICY_FIX = ("copy podFailurePolicy, restartPolicy: Never and failurePolicy.rules from "
               "config/gke-jobset-v5e-16.yaml")


def name_rules(job: Dict[str, Any]) -> List[Finding]:
    """Findings at ``metadata.name`` for the Job and pod names JobSet will generate."""
    name = _mapping(job.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        return []  # the schema's (or make submit-gke fills it in)
    if not _DNS_1035.fullmatch(name):
        return [Finding(ERROR, "metadata.name", "{!r} is not a DNS-1035 label: JobSet names "
                        "the slice's Jobs and pods after it".format(name), "use lower-case "
                        "letters, digits and '-', starting with a letter (GKE_JOB_NAME=...)")]
    longest = ""
    jobs = _mapping(job.get("spec")).get("replicatedJobs")
    for replicated in (r for r in _list(jobs) if isinstance(r, dict)):
        spec = _mapping(_mapping(replicated.get("template")).get("spec"))
        replicas, completions = replicated.get("replicas", 1), spec.get("completions")
        if not _is_int(replicas) or not isinstance(replicated.get("name"), str):
            continue
        pod_index = "-{}".format(completions - 1) if _is_int(completions) else ""
        generated = "{}-{}-{}{}{}".format(name, replicated["name"], max(replicas - 1, 0),
                                          pod_index, _POD_SUFFIX if pod_index else "")
        longest = max(longest, generated, key=len)
    if len(longest) > MAX_LABEL:
        return [Finding(ERROR, "metadata.name", "{!r} makes names of {} characters ({}); "
                        "Kubernetes allows {}".format(name, len(longest), longest, MAX_LABEL),
                        "use a name of at most {} characters".format(
                            len(name) - (len(longest) - MAX_LABEL)))]
    return []


def failure_policy_rules(job: Dict[str, Any]) -> List[Finding]:
    """Findings in ``spec.failurePolicy.rules`` that JobSet's webhook would refuse."""
    spec = _mapping(job.get("spec"))
    rules = _mapping(spec.get("failurePolicy")).get("rules")
    # Lists, not sets: a manifest may hold a list or a mapping where a name belongs, and
    # membership in a list compares without hashing.
    jobs = [r.get("name") for r in _list(spec.get("replicatedJobs")) if isinstance(r, dict)]
    findings, seen = [], []
    for index, rule in enumerate(_list(rules)):
        if not isinstance(rule, dict):
            continue
        path = "spec.failurePolicy.rules[{}]".format(index)
        name = rule.get("name")
        if isinstance(name, str) and not (_RULE_NAME.fullmatch(name) and len(name) <= 128):
            findings.append(Finding(ERROR, path + ".name", "{!r} is not a rule name JobSet "
                                    "takes".format(name), "use letters, digits, '_', ',' and "
                                    "':', starting with a letter (e.g. RestartOnDisruption)"))
        elif name in seen:
            findings.append(Finding(ERROR, path + ".name", "{!r} names an earlier rule "
                                    "too".format(name), "give each rule its own name"))
        seen.append(name)
        for i, reason in enumerate(_list(rule.get("onJobFailureReasons"))):
            if reason not in JOB_FAILURE_REASONS:
                findings.append(Finding(ERROR, "{}.onJobFailureReasons[{}]".format(path, i),
                                        "{!r} is not a Job failure reason".format(reason),
                                        "use one of " + ", ".join(JOB_FAILURE_REASONS)))
        for i, target in enumerate(_list(rule.get("targetReplicatedJobs"))):
            if target not in jobs:
                findings.append(Finding(ERROR, "{}.targetReplicatedJobs[{}]".format(path, i),
                                        "{!r} is not a replicated job of this JobSet".format(
                                            target), "use one of " + ", ".join(
                                                sorted(str(j) for j in jobs))))
        for i, pattern in enumerate(_list(rule.get("onJobFailureMessagePatterns"))):
            try:
                re.compile(str(pattern))
            except re.error as error:
                findings.append(Finding(ERROR, "{}.onJobFailureMessagePatterns[{}]".format(
                    path, i), "{!r} is not a regular expression ({})".format(pattern, error),
                    "escape the special characters"))
                continue
            findings += _pattern_target(rule, str(pattern), "{}.onJobFailureMessagePatterns"
                                        "[{}]".format(path, i), spec)
    return findings


# The podFailurePolicy rule a JobSet rule's action expects its message pattern to name:
# (what the rule matches, a test on the rule, how the templates write it).
_EXPECTED_RULE = {
    "RestartJobSetAndIgnoreMaxRestarts": (
        "the DisruptionTarget condition", lambda rule: any(
            _mapping(c).get("type") == "DisruptionTarget"
            for c in _list(rule.get("onPodConditions"))),
        "a FailJob rule with onPodConditions: [{type: DisruptionTarget, status: 'True'}]"),
    "FailJobSet": (
        "exit codes", lambda rule: isinstance(rule.get("onExitCodes"), dict),
        "a FailJob rule with onExitCodes (operator: In, the permanent exit codes)"),
}
_RULE_INDEX = re.compile(r"rule at index (\d+)")


def _pattern_target(rule: Dict[str, Any], pattern: str, path: str, spec: Dict[str, Any]
                    ) -> List[Finding]:
    """A finding when ``pattern`` (of JobSet rule ``rule``) names a podFailurePolicy rule,
    in a replicated job the rule targets, that is missing, not FailJob, or not of the kind
    ``rule``'s action expects (``_EXPECTED_RULE``)."""
    index_match = _RULE_INDEX.search(pattern)
    action = rule.get("action")
    if index_match is None or "PodFailurePolicy" not in _list(rule.get("onJobFailureReasons")) \
            or not isinstance(action, str) or action not in _EXPECTED_RULE:
        return []
    index = int(index_match.group(1))
    kind, is_kind, example = _EXPECTED_RULE[action]
    targets = _list(rule.get("targetReplicatedJobs"))
    for replicated in (r for r in _list(spec.get("replicatedJobs")) if isinstance(r, dict)):
        if targets and replicated.get("name") not in targets:
            continue
        job = _mapping(_mapping(replicated.get("template")).get("spec"))
        if "podFailurePolicy" not in job:
            continue  # no Job fails with reason PodFailurePolicy: advice, in pod_rules
        policy_rules = _list(_mapping(job.get("podFailurePolicy")).get("rules"))
        where = "podFailurePolicy of replicated job {!r}".format(replicated.get("name"))
        named = _mapping(policy_rules[index]) if index < len(policy_rules) else None
        if named is not None and named.get("action") == "FailJob" and is_kind(named):
            continue
        if named is None:
            problem = "names rule {} of the {}, which has {} rule{}".format(
                index, where, len(policy_rules), "" if len(policy_rules) == 1 else "s")
        else:
            problem = "names rule {} of the {}, a {} rule on {}, not a FailJob rule on {}" \
                .format(index, where, named.get("action"), _matches(named), kind)
        return [Finding(ERROR, path, problem + ": {} would act on failures it is not "
                        "for".format(action), "make the pattern name the index of {} (the "
                        "rules' order matters)".format(example))]
    return []


def _matches(rule: Dict[str, Any]) -> str:
    """What a podFailurePolicy rule matches, in words."""
    if isinstance(rule.get("onExitCodes"), dict):
        return "exit codes"
    conditions = [str(_mapping(c).get("type")) for c in _list(rule.get("onPodConditions"))]
    return "the {} condition".format(", ".join(conditions)) if conditions else "nothing"


def exit_code_rules(job: Dict[str, Any], job_path: str) -> List[Finding]:
    """Findings in the exit-code lists of a Job's podFailurePolicy that Kubernetes refuses
    (sorted ascending, no value twice, no 0 with operator In), one at the first bad value."""
    findings = []
    for index, rule in enumerate(_list(_mapping(job.get("podFailurePolicy")).get("rules"))):
        codes = _mapping(_mapping(rule).get("onExitCodes"))
        values = [v for v in _list(codes.get("values")) if _is_int(v)]
        if len(values) != len(_list(codes.get("values"))):
            continue  # the schema's finding
        path = "{}.podFailurePolicy.rules[{}].onExitCodes.values".format(job_path, index)
        for position, value in enumerate(values):
            problem = None
            if value == 0 and codes.get("operator") == "In":
                problem = "holds 0 with operator In, which Kubernetes refuses (a container " \
                          "that exits 0 succeeded)"
            elif position and value == values[position - 1]:
                problem = "lists {} twice, which Kubernetes refuses".format(value)
            elif position and value < values[position - 1]:
                problem = "is not sorted ({} after {}), which Kubernetes refuses".format(
                    value, values[position - 1])
            if problem:
                findings.append(Finding(ERROR, "{}[{}]".format(path, position), problem + ": "
                                        "the JobSet is created but its Job never is",
                                        "list the exit codes once each, in ascending order, "
                                        "without 0: [{}]".format(", ".join(
                                            str(v) for v in sorted(set(values)) if v))))
                break
    return findings


def pod_rules(job: Dict[str, Any], job_path: str, pod: Dict[str, Any], pod_path: str,
              tpu_containers: Sequence[Tuple[int, Dict[str, Any]]]) -> List[Finding]:
    """Findings for one replicated job's Job spec ``job`` and pod spec ``pod`` (at their
    paths); ``tpu_containers``: (index, container) of each that asks for ``google.com/tpu``."""
    findings = _restart_policy(job, job_path, pod, pod_path) + exit_code_rules(job, job_path)
    names = [c.get("name") for key in ("containers", "initContainers")
             for c in _list(pod.get(key)) if isinstance(c, dict)]  # a list: see above
    for index, rule in enumerate(_list(_mapping(job.get("podFailurePolicy")).get("rules"))):
        container = _mapping(_mapping(rule).get("onExitCodes")).get("containerName")
        if container is not None and container not in names:
            findings.append(Finding(ERROR, "{}.podFailurePolicy.rules[{}].onExitCodes."
                                    "containerName".format(job_path, index), "{!r} is not a "
                                    "container of the pod, which Kubernetes refuses".format(
                                        container), "name the trainer's container ({})".format(
                                            ", ".join(sorted(str(n) for n in names)))))
    if pod.get("hostNetwork") is True and pod.get("dnsPolicy") != "ClusterFirstWithHostNet":
        findings.append(Finding(ERROR, pod_path + ".dnsPolicy", "is {} with hostNetwork: the "
                                "pods use the node's DNS, which cannot resolve the hosts in "
                                "TPU_WORKER_HOSTNAMES (the JobSet's headless service)".format(
                                    repr(pod["dnsPolicy"]) if "dnsPolicy" in pod
                                    else "left out"),
                                "set dnsPolicy: ClusterFirstWithHostNet"))
    for index, _ in tpu_containers[1:]:
        findings.append(Finding(ERROR, "{}.containers[{}].resources.limits[google.com/tpu]"
                                .format(pod_path, index), "a second container asks for TPU "
                                "chips: the pod needs more chips than a host has and is never "
                                "scheduled", "give google.com/tpu to the trainer's container "
                                "only"))
    return findings


def _restart_policy(job: Dict[str, Any], job_path: str, pod: Dict[str, Any], pod_path: str
                    ) -> List[Finding]:
    policy = pod.get("restartPolicy")
    path = pod_path + ".restartPolicy"
    has_pod_policy = "podFailurePolicy" in job
    if policy == "Always":
        return [Finding(ERROR, path, "is 'Always', which Kubernetes refuses for a Job",
                        "set restartPolicy: Never")]
    if policy in (None, "OnFailure"):
        what = "is 'OnFailure'" if policy else "is left out (JobSet makes it OnFailure)"
        if has_pod_policy:
            return [Finding(ERROR, path, what + ", which Kubernetes refuses next to a "
                            "podFailurePolicy", "set restartPolicy: Never")]
        return [Finding(WARNING, path, what + ": a crashed host's container restarts alone "
                        "and cannot rejoin the slice's running program", _POLICY_FIX)]
    if not has_pod_policy:
        return [Finding(WARNING, job_path + ".podFailurePolicy", "is left out: every failure "
                        "counts against maxRestarts alike, a bad flag is retried and a "
                        "preemption uses up a restart", _POLICY_FIX)]
    return []


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
