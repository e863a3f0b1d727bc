"""jobspec.jobset: the GKE templates pass; each point of issues 33's and 41's "Why" written as
a broken manifest is refused with one error naming its field; the templates' failure policies
end the JobSet at a usage or configuration error and restart it, uncounted, at a preemption;
the /dev/shm rule follows ``trainer.data.plan`` to the byte; the jobset project's own TPU
example is flagged only where it differs on purpose."""

import copy
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest
import yaml
from shard_sets import split_shards

from conftest import REPO
from jobspec.check import check_job, check_pairing, set_container_args, set_image
from jobspec.container_args import IMAGENET_ONLY_FLAGS, SPOT_LABELS
from jobspec.findings import ERROR, WARNING
from jobspec.images import PJRT_BASE, XRT_BASE
from trainer.data import plan
from trainer.data.shard_index import INDEX_NAME, ShardIndex
from trainer.data.workers import auto_workers

TEMPLATES = sorted((REPO / "config").glob("gke-jobset-*.yaml"))
ARGS = ["--data_dir=gs://my-bucket/imagenet", "--job-dir=gs://my-bucket/jobs/run-1"]
POD = "spec.replicatedJobs[0].template.spec.template.spec"
JOB = "spec.replicatedJobs[0].template.spec"
CONTAINER = POD + ".containers[0]"
EXAMPLE = REPO / "tests" / "delivery" / "data" / "jobset-v6e-jax-workload.yaml"


def ready(template=TEMPLATES[0], args=ARGS):
    """A template as make submit-gke fills it in."""
    job = yaml.safe_load(template.read_text())
    set_image(job, "us-central1-docker.pkg.dev/my-proj/pytorch-xla/pytorch-xla-trainer:pjrt")
    set_container_args(job, list(args))
    return job


def errors(job):
    return [finding for finding in check_job(job) if finding.level == ERROR]


def pod(job):
    return job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_each_template_passes_once_image_and_arguments_are_filled_in(template):
    assert errors(ready(template)) == []
    assert check_pairing(ready(template), PJRT_BASE) == []


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_a_template_as_shipped_names_its_placeholders(template):
    job = yaml.safe_load(template.read_text())
    assert sorted(finding.path for finding in errors(job)) == [
        CONTAINER + ".args[0]", CONTAINER + ".args[1]", CONTAINER + ".image"]


def test_the_templates_are_v5e_and_v6e_slices_of_16_chips():
    selectors = {tuple(sorted(pod(yaml.safe_load(t.read_text()))["nodeSelector"].values()))
                 for t in TEMPLATES}
    assert selectors == {("4x4", "tpu-v5-lite-podslice"), ("4x4", "tpu-v6e-slice")}


def broken(change):
    job = ready()
    change(job)
    return job


def set_path(path, value):
    """A change that sets ``path`` (keys and list indices) to ``value``."""
    def change(job):
        target = job
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def remove(path):
    def change(job):
        target = job
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return change


RJ = ["spec", "replicatedJobs", 0]
JOB_KEYS = RJ + ["template", "spec"]
POD_KEYS = JOB_KEYS + ["template", "spec"]
CONTAINER_KEYS = POD_KEYS + ["containers", 0]
# (what, the change, the field path the one error names)
WHY = [
    ("unknown accelerator", set_path(POD_KEYS + ["nodeSelector",
                                                 "cloud.google.com/gke-tpu-accelerator"],
                                     "tpu-v5-lite-device"),
     POD + ".nodeSelector[cloud.google.com/gke-tpu-accelerator]"),
    ("no accelerator selector", remove(POD_KEYS + ["nodeSelector",
                                                   "cloud.google.com/gke-tpu-accelerator"]),
     POD + ".nodeSelector[cloud.google.com/gke-tpu-accelerator]"),
    ("unknown topology", set_path(POD_KEYS + ["nodeSelector",
                                              "cloud.google.com/gke-tpu-topology"], "4x5"),
     POD + ".nodeSelector[cloud.google.com/gke-tpu-topology]"),
    ("chips per host", set_path(CONTAINER_KEYS + ["resources", "limits", "google.com/tpu"], 8),
     CONTAINER + ".resources.limits[google.com/tpu]"),
    ("a request unlike the limit", set_path(CONTAINER_KEYS + ["resources", "requests"],
                                            {"google.com/tpu": 2}),
     CONTAINER + ".resources.requests[google.com/tpu]"),
    ("no TPU request", remove(CONTAINER_KEYS + ["resources"]), POD + ".containers"),
    ("parallelism", set_path(JOB_KEYS + ["parallelism"], 2), JOB + ".parallelism"),
    ("completions", set_path(JOB_KEYS + ["completions"], 8), JOB + ".completions"),
    ("non-indexed", set_path(JOB_KEYS + ["completionMode"], "NonIndexed"),
     JOB + ".completionMode"),
    ("no DNS hostnames", set_path(["spec", "network"], {"enableDNSHostnames": False}),
     "spec.network.enableDNSHostnames"),
    ("no /dev/shm volume", lambda job: pod(job)["containers"][0]["volumeMounts"].pop(0),
     CONTAINER + ".volumeMounts"),
    ("/dev/shm on disk", set_path(POD_KEYS + ["volumes", 0, "emptyDir"], {}),
     POD + ".volumes[0].emptyDir.medium"),
    ("/dev/shm too small", set_path(POD_KEYS + ["volumes", 0, "emptyDir", "sizeLimit"], "1Gi"),
     POD + ".volumes[0].emptyDir.sizeLimit"),
    ("a memory limit below /dev/shm", set_path(CONTAINER_KEYS + ["resources", "limits",
                                                                  "memory"], "1Gi"),
     CONTAINER + ".resources.limits.memory"),
    ("bigger batches", set_path(CONTAINER_KEYS + ["args"], ARGS + ["--batch_size=1024"]),
     POD + ".volumes[0].emptyDir.sizeLimit"),
    ("grace period", set_path(POD_KEYS + ["terminationGracePeriodSeconds"], 10),
     POD + ".terminationGracePeriodSeconds"),
    ("no restarts", remove(["spec", "failurePolicy"]), "spec.failurePolicy.maxRestarts"),
    ("zero restarts", set_path(["spec", "failurePolicy", "maxRestarts"], 0),
     "spec.failurePolicy.maxRestarts"),
    ("no job dir", set_path(CONTAINER_KEYS + ["args"], ARGS[:1]), CONTAINER + ".args"),
    ("a local job dir", set_path(CONTAINER_KEYS + ["args"], ARGS[:1] + ["--job-dir=/out"]),
     CONTAINER + ".args"),
    ("a job dir per pod", set_path(CONTAINER_KEYS + ["args"],
                                   ARGS[:1] + ["--job-dir", "gs://b/$(POD_NAME)"]),
     CONTAINER + ".args"),
    ("a command", set_path(CONTAINER_KEYS + ["command"], ["python", "train.py"]),
     CONTAINER + ".command"),
    ("the xrt image", set_path(CONTAINER_KEYS + ["image"], "gcr.io/p/trainer:xrt"),
     CONTAINER + ".image"),
    ("two slices", set_path(RJ + ["replicas"], 2), "spec.replicatedJobs[0].replicas"),
    # Issue 41: what the API server or JobSet's webhook refuses, or a slice that never forms.
    ("restartPolicy Always", set_path(POD_KEYS + ["restartPolicy"], "Always"),
     POD + ".restartPolicy"),
    ("restartPolicy OnFailure", set_path(POD_KEYS + ["restartPolicy"], "OnFailure"),
     POD + ".restartPolicy"),
    ("restartPolicy left to JobSet", remove(POD_KEYS + ["restartPolicy"]),
     POD + ".restartPolicy"),
    ("hostNetwork without its DNS policy", set_path(POD_KEYS + ["hostNetwork"], True),
     POD + ".dnsPolicy"),
    ("a second container asking for chips", lambda job: pod(job)["containers"].append(
        {"name": "sidecar", "image": "busybox", "resources": {"limits": {"google.com/tpu": 4}}}),
     POD + ".containers[1].resources.limits[google.com/tpu]"),
    ("a name that is no DNS label", set_path(["metadata", "name"], "ImageNet_run"),
     "metadata.name"),
    ("a name that starts with a digit", set_path(["metadata", "name"], "1st-run"),
     "metadata.name"),
    ("pod names over 63 characters", set_path(["metadata", "name"], "a" * 48),
     "metadata.name"),
    ("a failure rule name JobSet refuses", set_path(["spec", "failurePolicy", "rules", 0,
                                                     "name"], "restart-on-disruption"),
     "spec.failurePolicy.rules[0].name"),
    ("two failure rules of one name", set_path(["spec", "failurePolicy", "rules", 1, "name"],
                                               "RestartOnDisruption"),
     "spec.failurePolicy.rules[1].name"),
    ("an unknown Job failure reason", set_path(["spec", "failurePolicy", "rules", 0,
                                                "onJobFailureReasons"], ["Preempted"]),
     "spec.failurePolicy.rules[0].onJobFailureReasons[0]"),
    ("a failure rule for another replicated job", set_path(
        ["spec", "failurePolicy", "rules", 0, "targetReplicatedJobs"], ["workers"]),
     "spec.failurePolicy.rules[0].targetReplicatedJobs[0]"),
    ("a message pattern that is no regex", set_path(
        ["spec", "failurePolicy", "rules", 0, "onJobFailureMessagePatterns"], ["index (0$"]),
     "spec.failurePolicy.rules[0].onJobFailureMessagePatterns[0]"),
    ("exit codes of a container the pod lacks", set_path(
        JOB_KEYS + ["podFailurePolicy", "rules", 1, "onExitCodes", "containerName"], "main"),
     JOB + ".podFailurePolicy.rules[1].onExitCodes.containerName"),
    # Issue 47: a JobSet rule's pattern must name the pod failure policy rule of its kind,
    # and exit-code lists must be as Kubernetes validates them.
    ("a restart pattern naming the exit-code rule", set_path(
        ["spec", "failurePolicy", "rules", 0, "onJobFailureMessagePatterns"],
        ["matching FailJob rule at index 1$"]),
     "spec.failurePolicy.rules[0].onJobFailureMessagePatterns[0]"),
    ("a fail pattern naming the disruption rule", set_path(
        ["spec", "failurePolicy", "rules", 1, "onJobFailureMessagePatterns"],
        ["matching FailJob rule at index 0$"]),
     "spec.failurePolicy.rules[1].onJobFailureMessagePatterns[0]"),
    ("a pattern naming a rule that is not there", set_path(
        ["spec", "failurePolicy", "rules", 1, "onJobFailureMessagePatterns"],
        ["matching FailJob rule at index 2$"]),
     "spec.failurePolicy.rules[1].onJobFailureMessagePatterns[0]"),
    ("a pattern naming an Ignore rule", set_path(
        JOB_KEYS + ["podFailurePolicy", "rules", 0, "action"], "Ignore"),
     "spec.failurePolicy.rules[0].onJobFailureMessagePatterns[0]"),
    ("exit codes out of order", set_path(
        JOB_KEYS + ["podFailurePolicy", "rules", 1, "onExitCodes", "values"],
        [64, 65, 78, 77, 126, 127]),
     JOB + ".podFailurePolicy.rules[1].onExitCodes.values[3]"),
    ("an exit code twice", set_path(
        JOB_KEYS + ["podFailurePolicy", "rules", 1, "onExitCodes", "values"],
        [64, 65, 65, 77, 78, 126, 127]),
     JOB + ".podFailurePolicy.rules[1].onExitCodes.values[2]"),
    ("exit code 0 with In", set_path(
        JOB_KEYS + ["podFailurePolicy", "rules", 1, "onExitCodes", "values"],
        [0, 64, 65, 77, 78, 126, 127]),
     JOB + ".podFailurePolicy.rules[1].onExitCodes.values[0]"),
    ("runAsNonRoot with the image's root user", remove(POD_KEYS + ["securityContext",
                                                                   "runAsUser"]),
     POD + ".securityContext.runAsNonRoot"),
    ("runAsNonRoot as uid 0", set_path(CONTAINER_KEYS + ["securityContext", "runAsUser"], 0),
     CONTAINER + ".securityContext.runAsUser"),
    ("a read-only root without /tmp", lambda job: (
        pod(job)["containers"][0]["volumeMounts"].pop(1)),
     CONTAINER + ".securityContext.readOnlyRootFilesystem"),
    ("ImageNet flags for MNIST", lambda job: (
        pod(job)["containers"][0].pop("env"),
        pod(job)["containers"][0]["args"].append("--image_size=160")),
     CONTAINER + ".args"),
]


@pytest.mark.parametrize("what,change,path", WHY, ids=[case[0] for case in WHY])
def test_each_reason_is_refused_with_one_line_naming_the_field(what, change, path):
    found = errors(broken(change))
    assert [finding.path for finding in found] == [path], [str(f) for f in found]
    assert "\n" not in str(found[0]) and found[0].fix


@pytest.mark.parametrize("label", ["cloud.google.com/gke-tpu-accelerator",
                                   "cloud.google.com/gke-tpu-topology"])
@pytest.mark.parametrize("value", [[], {}, 4])
def test_a_selector_that_is_not_a_string_is_refused_not_a_crash(label, value):
    # make fuzz found a list there: "TypeError: unhashable type: 'list'" out of the check.
    found = errors(broken(set_path(POD_KEYS + ["nodeSelector", label], value)))
    assert POD + ".nodeSelector[{}]".format(label) in [finding.path for finding in found]


def test_no_shared_memory_is_needed_without_data_workers():
    job = broken(set_path(CONTAINER_KEYS + ["args"], ARGS + ["--num_workers=0"]))
    del pod(job)["volumes"][0], pod(job)["containers"][0]["volumeMounts"][0]  # /dev/shm
    assert errors(job) == []


def test_the_shm_rule_is_trainer_data_plan_to_the_byte():
    """16 chips on 4 hosts, the ImageNet defaults (batch 128 per chip, one worker per core of
    a 112-core v5e host but the trainer's, 111): what ``trainer.data.plan`` says /dev/shm needs."""
    needed = plan.shared_memory(plan.shape_from_flags(4, 4, 128, 0, auto_workers(112), 224))
    assert round(needed / 1e9, 1) == 1.8  # the figure the templates' comment gives
    too_small = errors(broken(set_path(POD_KEYS + ["volumes", 0, "emptyDir", "sizeLimit"],
                                       str(needed - 1))))
    assert [finding.path for finding in too_small] == [POD + ".volumes[0].emptyDir.sizeLimit"]
    assert "1.8 GB" in too_small[0].problem and "--hosts=4" in too_small[0].problem
    assert errors(broken(set_path(POD_KEYS + ["volumes", 0, "emptyDir", "sizeLimit"],
                                  str(needed)))) == []


def test_the_plan_command_prints_the_same_figure(tmp_path):
    """``python -m trainer.data.plan --hosts=4`` with its defaults (those of the ImageNet
    trainer on a v5e host) prints the figure the refusal quotes; /dev/shm depends on the
    slice's shape only, so any shard set will do."""
    rng = np.random.default_rng(0)
    index = ShardIndex(["a", "b"], {"train": split_shards("train", 4096, 1024, rng, 1e4),
                                    "val": split_shards("val", 512, 512, rng, 1e4)})
    (tmp_path / INDEX_NAME).write_bytes(index.to_json())
    printed = subprocess.run([sys.executable, "-m", "trainer.data.plan", "--data_dir",
                              str(tmp_path), "--hosts=4"], cwd=str(REPO), capture_output=True,
                             text=True)
    assert printed.returncode == 0, printed.stderr
    assert "/dev/shm needs 1.8 GB" in printed.stdout, printed.stdout
    found = errors(broken(set_path(POD_KEYS + ["volumes", 0, "emptyDir", "sizeLimit"], "1Gi")))
    assert "the plan needs 1.8 GB of /dev/shm per host" in found[0].problem


def test_the_xrt_base_is_refused_for_a_slice():
    found = check_pairing(ready(), XRT_BASE)
    assert [finding.path for finding in found] == ["spec.replicatedJobs"]
    assert "pjrt" in found[0].problem


def test_the_jobset_projects_tpu_example_is_flagged_only_where_it_differs_on_purpose():
    """Its command runs JAX, not the launcher, and it asks for two slices (multislice); its
    slice (v6e 4x4, 4 pods of 4 chips) and everything else pass."""
    job = yaml.safe_load(EXAMPLE.read_text())
    assert sorted(finding.path for finding in errors(job)) == [
        "spec.replicatedJobs[0].replicas", CONTAINER + ".command"]


def test_a_manifest_of_another_kind_is_named():
    found = check_job({"apiVersion": "batch/v1", "kind": "Job", "spec": {}})
    assert [finding.path for finding in found] == ["(top)"]
    assert "JobSet" in found[0].problem


def test_a_wrong_api_version_is_named():
    job = ready()
    job["apiVersion"] = "jobset.x-k8s.io/v1"
    assert [finding.path for finding in errors(job)][:1] == ["apiVersion"]


def test_mutating_the_template_does_not_change_it():
    before = copy.deepcopy(ready())
    check_job(before)
    assert before == ready()


# The multi-host slice sizes users rent (chips per host 4 on both): topology -> hosts.
SLICE_SIZES = {"4x4": 4, "4x8": 8, "8x8": 16, "8x16": 32, "16x16": 64}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
@pytest.mark.parametrize("topology, hosts", sorted(SLICE_SIZES.items()))
def test_every_slice_size_up_to_64_hosts_passes_and_a_host_short_is_refused(template, topology,
                                                                             hosts):
    """docs/gke.md's "another slice size": the topology selector, parallelism and completions
    changed together pass at every size; one host fewer in parallelism is refused by name."""
    def resized(job, parallelism):
        pod(job)["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = topology
        spec = job["spec"]["replicatedJobs"][0]["template"]["spec"]
        spec["parallelism"], spec["completions"] = parallelism, hosts
        return job

    assert errors(resized(ready(template), hosts)) == []
    short = errors(resized(ready(template), hosts - 1))
    assert [finding.path for finding in short] == [JOB + ".parallelism"], [str(f) for f in short]


def warnings_of(job):
    return [finding for finding in check_job(job) if finding.level == WARNING]


def test_the_longest_name_the_webhook_takes_passes():
    """NAME-slice-0-3-xxxxx: 47 characters of name make pod names of 63."""
    assert errors(broken(set_path(["metadata", "name"], "a" * 47))) == []
    found = errors(broken(set_path(["metadata", "name"], "a" * 48)))
    assert "64 characters" in found[0].problem and "at most 47" in found[0].fix


def test_host_network_with_its_dns_policy_passes():
    job = broken(set_path(POD_KEYS + ["hostNetwork"], True))
    pod(job)["dnsPolicy"] = "ClusterFirstWithHostNet"
    assert errors(job) == []


def test_without_a_pod_failure_policy_restart_policy_is_advice():
    """Without a podFailurePolicy, OnFailure is allowed (a warning); Never without one is
    advised to add it."""
    job = broken(remove(JOB_KEYS + ["podFailurePolicy"]))
    assert errors(job) == []
    assert [f.path for f in warnings_of(job) if "podFailurePolicy" in f.path] == [
        JOB + ".podFailurePolicy"]
    pod(job)["restartPolicy"] = "OnFailure"
    assert errors(job) == []
    assert POD + ".restartPolicy" in [f.path for f in warnings_of(job)]


def test_mnist_on_an_imagenet_data_dir_is_a_warning():
    """Without LAUNCHER_TRAINER the image runs MNIST: on gs://.../imagenet only a warning (a
    folder's name is a guess), with no ImageNet flag among the args."""
    job = broken(lambda job: pod(job)["containers"][0].pop("env"))
    assert errors(job) == []
    assert [f.path for f in warnings_of(job) if "MNIST" in f.problem] == [CONTAINER + ".args"]
    assert [f for f in warnings_of(ready()) if "MNIST" in f.problem] == []


@pytest.mark.parametrize("container", [
    {"env": [{"name": "LAUNCHER_TRAINER", "value": "python my_train.py"}]},
    {"env": [{"name": "LAUNCHER_TRAINER", "valueFrom": {"configMapKeyRef": {
        "name": "job", "key": "trainer"}}}]},
    {"args": ["--", "python", "my_train.py", "--model=vit"]},
], ids=["own command", "trainer from a config map", "command after --"])
def test_the_users_own_command_takes_any_flags(container):
    """The MNIST rule is about the image's default trainer only."""
    def change(job):
        trainer = pod(job)["containers"][0]
        trainer.update(container)
        trainer.setdefault("args", list(ARGS))
        trainer["args"] += ["--image_size=160"]
    assert [f for f in check_job(broken(change)) if "MNIST" in f.problem] == []


def test_the_flags_mnist_lacks_are_the_trainers_own():
    from absl import flags

    import trainer.imagenet
    import trainer.mnist

    def defined(module):
        values = flags.FlagValues()
        module.define_flags(values)
        return set(values)

    assert sorted(defined(trainer.imagenet) - defined(trainer.mnist)) == sorted(
        IMAGENET_ONLY_FLAGS)


@pytest.mark.parametrize("label", SPOT_LABELS)
def test_spot_nodes_without_checkpoint_minutes_get_advice(label):
    job = broken(set_path(POD_KEYS + ["nodeSelector", label], "true"))
    assert errors(job) == []
    advice = [f for f in warnings_of(job) if "checkpoint_minutes" in f.problem]
    assert [f.path for f in advice] == [CONTAINER + ".args"] and "15 s" in advice[0].problem
    pod(job)["containers"][0]["args"].append("--checkpoint_minutes=30")
    assert [f for f in warnings_of(job) if "checkpoint_minutes" in f.problem] == []


# What Kubernetes' Job controller writes into a Job's failure condition when a
# podFailurePolicy rule with action FailJob matches (pkg/controller/job/pod_failure_policy.go).
EXIT_MESSAGE = ("Container trainer for pod default/run-slice-0-2-x7k2m failed with exit code "
                "{} matching FailJob rule at index {}")
CONDITION_MESSAGE = ("Pod default/run-slice-0-2-x7k2m has condition DisruptionTarget matching "
                     "FailJob rule at index {}")


def jobset_action(job, reason, message):
    """JobSet's choice for a failed Job: the first rule whose reasons and message patterns
    match (an empty list matches anything), else RestartJobSet (counted in maxRestarts)."""
    for rule in job["spec"]["failurePolicy"].get("rules", []):
        reasons = rule.get("onJobFailureReasons") or [reason]
        patterns = rule.get("onJobFailureMessagePatterns") or [""]
        if reason in reasons and any(re.search(p, message) for p in patterns):
            return rule["action"]
    return "RestartJobSet"


def pod_policy_index(job, exit_code=None, condition=None):
    """Kubernetes' choice: the index of the first podFailurePolicy rule a failed pod
    matches, or None (counted against backoffLimit: the Job fails BackoffLimitExceeded)."""
    rules = job["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    for index, rule in enumerate(rules):
        codes = rule.get("onExitCodes")
        if codes and exit_code is not None and exit_code != 0 and (
                (exit_code in codes["values"]) == (codes["operator"] == "In")):
            return index
        if condition in [c["type"] for c in rule.get("onPodConditions", [])
                         if c.get("status", "True") == "True"]:
            return index
    return None


def fate(job, exit_code=None, condition=None):
    index = pod_policy_index(job, exit_code, condition)
    if index is None:
        return jobset_action(job, "BackoffLimitExceeded", "Job has reached the specified "
                             "backoff limit")
    message = (CONDITION_MESSAGE.format(index) if condition else
               EXIT_MESSAGE.format(exit_code, index))
    return jobset_action(job, "PodFailurePolicy", message)


# The exit codes that mean "the same again fails the same way" (docs/launcher.md and
# docs/trainers.md, "Exit codes"): usage, data, no permission, configuration, a trainer
# command that cannot run or is not there.
PERMANENT = [64, 65, 77, 78, 126, 127]
# Worth a restart: a lost data worker (70), storage down past its retries (74), the TPU
# unavailable (69), SIGTERM after the checkpoint (143), a kill (137), anything else (1).
TRANSIENT = [1, 69, 70, 74, 137, 143]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_usage_and_configuration_errors_end_the_jobset_at_once(template):
    job = ready(template)
    assert {code: fate(job, exit_code=code) for code in PERMANENT} == {
        code: "FailJobSet" for code in PERMANENT}
    assert {code: fate(job, exit_code=code) for code in TRANSIENT} == {
        code: "RestartJobSet" for code in TRANSIENT}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_a_preemption_restarts_without_using_a_restart(template):
    """The pod of a preempted or drained node has condition DisruptionTarget, whatever its
    trainer's exit code (143 after the checkpoint, 137 when killed, or one of the permanent
    ones while it was starting)."""
    job = ready(template)
    for code in [None, 143, 137, 78]:
        assert fate(job, exit_code=code, condition="DisruptionTarget") == \
            "RestartJobSetAndIgnoreMaxRestarts"


def test_the_permanent_exit_codes_are_the_documented_ones():
    """Each listed code is in the launcher's or the trainers' exit code table; the templates
    list exactly these, for the container they name."""
    tables = (REPO / "docs" / "launcher.md").read_text() + (REPO / "docs" /
                                                           "trainers.md").read_text()
    for code in PERMANENT:
        assert re.search(r"^\| (\d+ / )?{}\b".format(code), tables, re.M), code
    for template in TEMPLATES:
        job = ready(template)
        rule = job["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"][
            "rules"][1]["onExitCodes"]
        assert rule["values"] == PERMANENT and rule["operator"] == "In"
        assert rule["containerName"] == pod(job)["containers"][0]["name"]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_the_templates_tolerate_the_tpu_taint_and_are_deleted_a_day_after(template):
    job = ready(template)
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in \
        pod(job)["tolerations"]
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert pod(job)["restartPolicy"] == "Never"


def test_pod_failure_rules_in_the_other_order_are_refused_at_both_patterns():
    """Swapped, the rules would restart an exit 64 forever (uncounted) and end the JobSet at
    a preemption; each JobSet rule's pattern is refused, naming what it points at."""
    job = ready()
    rules = job["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    rules.reverse()
    assert fate(job, exit_code=64) == "RestartJobSetAndIgnoreMaxRestarts"
    found = errors(job)
    assert [f.path for f in found] == ["spec.failurePolicy.rules[{}].onJobFailureMessagePatterns"
                                       "[0]".format(i) for i in (0, 1)]
    assert "a FailJob rule on exit codes, not a FailJob rule on the DisruptionTarget " \
        "condition" in found[0].problem
    assert "DisruptionTarget" in found[0].fix


def test_exit_codes_with_not_in_may_hold_0():
    job = ready()
    job["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"][1][
        "onExitCodes"].update(operator="NotIn", values=[0, 1, 69, 70, 74, 137, 143])
    assert [f.path for f in errors(job) if "onExitCodes" in f.path] == []


def test_a_mount_path_of_the_wrong_type_is_the_schemas_finding_not_a_crash():
    # make test's fixed examples found it: "AttributeError: 'NoneType' object has no attribute
    # 'rstrip'" out of the read-only root's /tmp rule.
    found = errors(broken(set_path(CONTAINER_KEYS + ["volumeMounts", 1, "mountPath"], None)))
    assert CONTAINER + ".securityContext.readOnlyRootFilesystem" in [f.path for f in found]


def documented_lm_args():
    """docs/gke.md's "A language model on a slice": the JOB_ARGS its make submit-gke passes
    (words as make and the shell give them to the template), $BUCKET filled in."""
    page = (REPO / "docs" / "gke.md").read_text()
    block = page[page.index("## A language model on a slice"):]
    quoted = re.search(r'JOB_ARGS="([^"]*)"', block).group(1)
    return shlex.split(quoted.replace("$BUCKET", "my-bucket"))


LM_ARGS = documented_lm_args()


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_a_language_model_under_fsdp_passes_on_each_template(template):
    assert LM_ARGS[0] == "--trainer=python -m trainer.lm" and "--sharding=fsdp" in LM_ARGS
    assert errors(ready(template, LM_ARGS)) == []


@pytest.mark.parametrize("changed, text", [
    ("--mesh=data:2,fsdp:4", "--mesh=data:2,fsdp:4 is 8 devices; the job has 16 (the "
                             "slice's chips)"),
    ("--mesh=fsdp:16,model:1", "--mesh='fsdp:16,model:1' is not data:D,fsdp:F"),
    ("--sharding=zero3", "--sharding='zero3' is not one of dp, fsdp, auto"),
])
def test_a_mesh_the_slice_cannot_form_is_an_error_on_the_arguments(changed, text):
    name = changed.split("=")[0]
    args = [arg for arg in LM_ARGS if not arg.startswith(name + "=")] + [changed]
    if name == "--sharding":
        args = [arg for arg in args if not arg.startswith("--mesh=")]
    [finding] = errors(ready(TEMPLATES[0], args))
    assert finding.path == CONTAINER + ".args" and finding.problem == text


def test_a_command_of_the_users_own_may_mean_other_things_by_mesh():
    """After ``--`` the container runs the user's command: its --mesh is its own."""
    args = ["--job-dir=gs://my-bucket/jobs/own", "--", "python", "maxtext.py", "--mesh=2x2"]
    assert errors(ready(TEMPLATES[0], args)) == []
