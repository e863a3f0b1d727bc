"""jobspec.k8s_schema: a JobSet against the vendored JobSet CRD (jobset v0.12.0) and its pod
template against core/v1 (Kubernetes 1.34): unknown fields refused with "did you mean", wrong
types and values named by path, CEL rules listed as not checked; the jobset project's own TPU
example passes this layer; no mutation of a valid manifest makes the checker raise."""

import copy

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO, examples
from jobspec.check import check_job, set_container_args, set_image
from jobspec.findings import ERROR, WARNING
from jobspec.k8s_schema import JOBSET_RELEASE, check_jobset_schema

TEMPLATES = sorted((REPO / "config").glob("gke-jobset-*.yaml"))
EXAMPLE = yaml.safe_load((REPO / "tests" / "delivery" / "data" /
                          "jobset-v6e-jax-workload.yaml").read_text())
POD = "spec.replicatedJobs[0].template.spec.template.spec"


def template(index=0):
    job = yaml.safe_load(TEMPLATES[index].read_text())
    set_image(job, "gcr.io/p/trainer:pjrt")
    set_container_args(job, ["--data_dir=gs://b/d", "--job-dir=gs://b/j"])
    return job


def schema_errors(job):
    return [finding for finding in check_jobset_schema(job) if finding.level == ERROR]


def test_the_vendored_crd_is_the_recorded_release():
    crd = (REPO / "jobspec" / "schemas" / "jobset.x-k8s.io_jobsets.yaml").read_text()
    readme = (REPO / "jobspec" / "schemas" / "README.md").read_text()
    assert "name: jobsets.jobset.x-k8s.io" in crd and JOBSET_RELEASE in readme
    assert (REPO / "jobspec" / "schemas" / "LICENSE.jobset").is_file()
    assert (REPO / "jobspec" / "schemas" / "LICENSE.kubernetes-validate").is_file()


@pytest.mark.parametrize("index", range(len(TEMPLATES)))
def test_templates_and_the_jobset_example_pass_the_schema(index):
    assert schema_errors(template(index)) == []
    assert schema_errors(EXAMPLE) == []


@pytest.mark.parametrize("where,key,close", [
    ("spec", "failurePolicies", "failurePolicy"),  # the CRD's own fields
    ("pod", "nodeSelecter", "nodeSelector"),  # core/v1 PodSpec
    ("container", "imagePullPolcy", "imagePullPolicy"),  # core/v1 Container
    ("metadata", "labelz", "labels"),  # core/v1 ObjectMeta
])
def test_an_unknown_field_is_refused_with_the_close_name(where, key, close):
    job = template()
    pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    target = {"spec": job["spec"], "pod": pod, "container": pod["containers"][0],
              "metadata": job["metadata"]}[where]
    target[key] = {}
    found = schema_errors(job)
    assert len(found) == 1, [str(f) for f in found]
    assert found[0].path.endswith("." + key) and found[0].fix == "did you mean {}?".format(close)


def test_wrong_types_and_values_are_named_by_path():
    job = template()
    job["spec"]["failurePolicy"]["maxRestarts"] = "ten"
    pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = "2m"
    pod["containers"][0]["env"] = {"LAUNCHER_TRAINER": "python -m trainer.imagenet"}
    del pod["containers"][0]["name"]
    assert sorted((f.path, f.problem) for f in schema_errors(job)) == [
        ("spec.failurePolicy.maxRestarts", "is a string, the schema wants a whole number"),
        (POD + ".containers[0].env", "is a mapping, the schema wants a list"),
        (POD + ".containers[0].name", "is required"),
        (POD + ".terminationGracePeriodSeconds", "is a string, the schema wants a whole number")]


def test_a_null_is_a_field_left_out_as_kubectl_reads_it():
    job = template()
    job["spec"]["network"] = None
    assert schema_errors(job) == []


def test_cel_rules_on_present_fields_are_listed_as_not_checked():
    job = template()
    job["spec"]["network"] = {"publishNotReadyAddresses": True}
    notes = [f for f in check_jobset_schema(job) if "not checked" in f.problem]
    assert {f.path for f in notes} == {"spec", "spec.failurePolicy", "spec.network"}
    assert all(f.level == WARNING and "CEL" in f.problem for f in notes)


# Values a mutation may put anywhere: other types, odd numbers, text that breaks lines.
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                   st.floats(allow_nan=True), st.text(max_size=12),
                   st.sampled_from(["4x4", "Memory", "8Gi", "--job-dir=gs://b", "1e999",
                                    "tpu-v6e-slice", "NonIndexed", "\u2028"]),
                   st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=4),
                                                                        st.integers(),
                                                                        max_size=2))


def paths(value, prefix=()):
    """Every (path to a container, key) in ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield prefix, key
            yield from paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield prefix, index
            yield from paths(item, prefix + (index,))


JOBS = [template(0), template(1), EXAMPLE]


@settings(max_examples=examples(120), deadline=None)
@given(st.sampled_from(range(len(JOBS))), st.data(),
       st.lists(st.tuples(st.sampled_from(["set", "delete"]), VALUES), min_size=1,
                max_size=4))
def test_no_mutation_of_a_valid_manifest_raises_or_breaks_a_line(which, data, changes):
    job = copy.deepcopy(JOBS[which])
    for action, value in changes:
        places = list(paths(job))
        if not places:
            break
        prefix, key = data.draw(st.sampled_from(places))
        target = job
        for step in prefix:
            target = target[step]
        if action == "delete":
            del target[key]
        else:
            target[key] = value
    for finding in check_job(job):
        assert "\n" not in str(finding) and len(str(finding).splitlines()) == 1


@pytest.mark.parametrize("which, path", [
    # make fuzz: a list where a replicated job's or a container's name belongs.
    (0, ("spec", "replicatedJobs", 0, "name")),
    (2, ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0,
         "name")),
    # make fuzz: a list where a failure rule's action belongs (the rule-index check used it as
    # a dict key).
    (0, ("spec", "failurePolicy", "rules", 1, "action")),
])
def test_a_list_where_a_name_belongs_is_findings_not_a_traceback(which, path):
    job = copy.deepcopy(JOBS[which])
    target = job
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = []
    for finding in check_job(job):
        assert len(str(finding).splitlines()) == 1
