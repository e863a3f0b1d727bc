"""make submit-gke: asks the registry (a recording stand-in for gcloud) for the digest of the
pushed tag, checks the JobSet with that image, the name and JOB_ARGS filled in, writes it to
build/, and pipes it to ``kubectl create -f -`` on the cluster's context (a recording stand-in
for kubectl), and says what make gke-status etc. need to reach it; a tag the registry does not
know is refused with a hint, a lookup without a gcloud login says to log in, a digest given is
used as it is; without kubectl it prints the manifest and the command; a broken template stops
before kubectl. make gke-status and gke-delete reach kubectl for the JobSet
submitted last, or the one GKE_JOB_NAME names (gke-logs: tests/delivery/test_gke_logs.py)."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import NO_ACCOUNT, REPO, WRITES_THE_CHECKOUT, clean_environ

pytestmark = WRITES_THE_CHECKOUT

# Records its argv and the manifest it was given on stdin; exits 1 (as kubectl create does
# for a name that exists) when $KUBECTL_FAIL is set.
KUBECTL = """#!/bin/sh
python3 -c 'import json, sys
stdin = sys.stdin.read() if "-f" in sys.argv else ""
print(json.dumps({{"argv": sys.argv[1:], "stdin": stdin}}))' "$@" >> "{log}"
[ -z "$KUBECTL_FAIL" ] || {{ echo 'Error from server (AlreadyExists)' >&2; exit 1; }}
"""
# Records its argv; answers Artifact Registry's digest of a tag it knows (REGISTRY_TAGS), or
# fails with $GCLOUD_STDERR where that is set.
GCLOUD = """#!/bin/sh
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "{log}"
[ -z "$GCLOUD_STDERR" ] || {{ printf '%s\\n' "$GCLOUD_STDERR" >&2; exit 1; }}
case " $REGISTRY_TAGS " in
  *" $5 "*) echo "{digest}" ;;
  *) echo "ERROR: not found" >&2; exit 1 ;;
esac
"""
REPOSITORY = "us-central1-docker.pkg.dev/my-proj/pytorch-xla/pytorch-xla-trainer"
IMAGE = REPOSITORY + ":pjrt"
DIGEST = "sha256:" + "0123456789abcdef" * 4
CONTEXT = "gke_my-proj_us-central1_tpu-cluster"
CONTAINER = ["spec", "replicatedJobs", 0, "template", "spec", "template", "spec",
             "containers", 0]
SELECTOR = "jobset.sigs.k8s.io/jobset-name="


@pytest.fixture
def tools(tmp_path):
    """Recording kubectl and gcloud in a folder put first on PATH; ``make(target, *args)`` runs
    make there and returns (result, kubectl calls, gcloud calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl_log, gcloud_log = tmp_path / "kubectl.jsonl", tmp_path / "gcloud.jsonl"
    for name, text in (("kubectl", KUBECTL.format(log=kubectl_log)),
                       ("gcloud", GCLOUD.format(log=gcloud_log, digest=DIGEST))):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def make(target, *args, path=None, **environ):
        env = clean_environ(PATH=path or str(bin_dir) + os.pathsep + os.environ["PATH"],
                            REGISTRY_TAGS=IMAGE, **environ)
        result = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), target,
                                 "PROJECT=my-proj", "CLUSTER=tpu-cluster",
                                 "GKE_LAST_JOB=" + str(tmp_path / "last-job")] + list(args),
                                env=env, capture_output=True, text=True, timeout=300)
        calls = []
        for log in (kubectl_log, gcloud_log):
            calls.append([json.loads(line) for line in log.read_text().splitlines()]
                         if log.exists() else [])
            log.unlink() if log.exists() else None
        return result, calls[0], calls[1]

    return make


def at(value, keys):
    for key in keys:
        value = value[key]
    return value


def test_the_rendered_jobset_is_created_by_digest_on_the_clusters_context(tools, tmp_path):
    result, kubectl, gcloud = tools("submit-gke", "GKE_JOB_NAME=test-submit-gke",
                                    "JOB_ARGS=--data_dir=gs://b/imagenet "
                                    "--job-dir='gs://b/jobs/run 1'")
    assert result.returncode == 0, result.stderr
    assert gcloud == [["artifacts", "docker", "images", "describe", IMAGE,
                       "--format=value(image_summary.digest)"]]
    [call] = kubectl
    assert call["argv"] == ["--context", CONTEXT, "create", "-f", "-"]
    applied = yaml.safe_load(call["stdin"])
    assert applied == yaml.safe_load((REPO / "build" / "test-submit-gke.yaml").read_text())
    container = at(applied, CONTAINER)
    assert container["image"] == REPOSITORY + "@" + DIGEST
    assert container["args"] == ["--data_dir=gs://b/imagenet", "--job-dir=gs://b/jobs/run 1"]
    assert applied["metadata"]["name"] == "test-submit-gke"
    assert "submitted test-submit-gke: make gke-status" in result.stdout
    assert (tmp_path / "last-job").read_text() == "test-submit-gke\n"  # what gke-* default to


def test_a_tag_the_registry_does_not_know_is_refused_with_a_hint(tools):
    result, kubectl, _ = tools("submit-gke", "TAG=never-pushed", "GKE_JOB_NAME=test-no-digest",
                               "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j")
    assert result.returncode != 0 and kubectl == []
    gcloud, error, hint = result.stderr.splitlines()[:3]
    assert gcloud == "ERROR: not found"  # the registry's answer, shown
    assert error.startswith("error: IMAGE_URI=" + REPOSITORY + ":never-pushed: the registry "
                            "gave no digest")
    assert hint.startswith("HINT: make push PROJECT=my-proj RUNTIME=pjrt first")


def test_a_lookup_without_a_gcloud_login_says_to_log_in(tools):
    """Not "the registry gave no digest ... make push first": the tag may well be there;
    gcloud's own sentence says what is missing (as make submit and submit-vertex say it)."""
    result, kubectl, gcloud = tools("submit-gke", "GKE_JOB_NAME=test-no-login",
                                    "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j",
                                    GCLOUD_STDERR=NO_ACCOUNT)
    assert result.returncode != 0 and kubectl == [] and len(gcloud) == 1
    # make's own closing line: "make: ***", or "make[1]: ***" under make test's make.
    assert [line for line in result.stderr.splitlines()
            if not re.match(r"make(\[\d+\])?: \*\*\*", line)] == [
        "make submit-gke: gcloud could not ask the registry for IMAGE_URI {}: no account is "
        "logged in (ERROR: (gcloud.artifacts.docker.images.describe) You do not currently have "
        "an active account selected.); HINT: run gcloud auth login (or gcloud config set account "
        "ACCOUNT), then make submit-gke again".format(IMAGE)]


def test_the_follow_up_command_printed_reaches_the_job_just_created(tools):
    """The "submitted" line carries what names the cluster's context (here a zonal cluster
    outside the default REGION) and the JobSet: typed as printed, gke-status reaches it."""
    result, _, _ = tools("submit-gke", "REGION=europe-west4", "CLUSTER_LOCATION=europe-west4-b",
                         "GKE_JOB_NAME=test-follow-up",
                         "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("submitted")]
    assert line == ("submitted test-follow-up: make gke-status / gke-logs / gke-delete "
                    "PROJECT=my-proj REGION=europe-west4 CLUSTER=tpu-cluster "
                    "CLUSTER_LOCATION=europe-west4-b GKE_JOB_NAME=test-follow-up")
    result, kubectl, _ = tools("gke-status", *line.split(" gke-delete ")[1].split())
    assert result.returncode == 0, result.stderr
    assert [call["argv"][:2] for call in kubectl] == [
        ["--context", "gke_my-proj_europe-west4-b_tpu-cluster"]] * 2
    assert kubectl[0]["argv"][2:] == ["get", "jobset", "test-follow-up"]


def test_a_digest_given_is_used_as_it_is(tools):
    pinned = REPOSITORY + "@" + DIGEST
    result, kubectl, gcloud = tools("submit-gke", "IMAGE_URI=" + pinned,
                                    "GKE_JOB_NAME=test-pinned",
                                    "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j")
    assert result.returncode == 0, result.stderr
    assert gcloud == []
    assert at(yaml.safe_load(kubectl[0]["stdin"]), CONTAINER)["image"] == pinned


def test_an_existing_name_is_refused_not_patched(tools, tmp_path):
    """kubectl create refuses a JobSet that exists (apply would patch a running one); the
    name of the last submitted job stays the one that was created."""
    (tmp_path / "last-job").write_text("earlier-run\n")
    result, kubectl, _ = tools("submit-gke", "GKE_JOB_NAME=test-exists",
                               "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j",
                               KUBECTL_FAIL="1")
    assert result.returncode != 0 and "AlreadyExists" in result.stderr
    assert [call["argv"][2] for call in kubectl] == ["create"]
    assert (tmp_path / "last-job").read_text() == "earlier-run\n"


def test_without_kubectl_the_manifest_and_the_command_are_printed(tools, tmp_path):
    bin_dir = tmp_path / "bare"  # make, sh, date, python3, sed..., but no kubectl or gcloud
    bin_dir.mkdir()
    for tool in ("make", "sh", "date", "python3", "mkdir", "cat", "sed", "echo"):
        os.symlink(shutil.which(tool), str(bin_dir / tool))
    result, _, _ = tools("submit-gke", "GKE_JOB_NAME=test-no-kubectl",
                         "IMAGE_URI=" + REPOSITORY + "@" + DIGEST,
                         "JOB_ARGS=--data_dir=gs://b/d --job-dir=gs://b/j", path=str(bin_dir))
    assert result.returncode == 0, result.stderr
    printed = result.stdout.split("kubectl not found")[0]
    assert "apiVersion: jobset.x-k8s.io/v1alpha2" in printed and DIGEST in printed
    assert ("kubectl --context {} create -f - < build/test-no-kubectl.yaml".format(CONTEXT)
            in result.stdout)


def test_a_broken_jobset_stops_before_kubectl(tools):
    result, kubectl, _ = tools("submit-gke", "GKE_JOB_NAME=test-broken",
                               "JOB_ARGS=--data_dir=gs://b/d --job-dir=/tmp/out")
    assert result.returncode != 0
    assert "args: --job-dir=/tmp/out is not gs://" in result.stderr
    assert kubectl == []


LIFECYCLE = {
    "gke-status": [["--context", CONTEXT, "get", "jobset", "{}"],
                   ["--context", CONTEXT, "get", "pods", "-l", SELECTOR + "{}", "-o", "wide"]],
    "gke-delete": [["--context", CONTEXT, "delete", "jobset", "{}"]],
}


def named(calls, name):
    return [[arg.format(name) for arg in argv] for argv in calls]


@pytest.mark.parametrize("target", sorted(LIFECYCLE))
def test_the_job_submitted_last_is_the_default(tools, tmp_path, target):
    (tmp_path / "last-job").write_text("test-lifecycle\n")  # as make submit-gke leaves it
    result, kubectl, _ = tools(target)
    assert result.returncode == 0, result.stderr
    assert [call["argv"] for call in kubectl] == named(LIFECYCLE[target], "test-lifecycle")
    result, kubectl, _ = tools(target, "GKE_JOB_NAME=other-run")
    assert [call["argv"] for call in kubectl] == named(LIFECYCLE[target], "other-run")


# (gke-logs's kubectl calls: tests/delivery/test_gke_logs.py)
@pytest.mark.parametrize("target", sorted(LIFECYCLE) + ["gke-logs"])
def test_without_a_job_the_target_says_what_to_do(tools, target):
    result, kubectl, _ = tools(target)
    assert result.returncode != 0 and kubectl == []
    assert "no JobSet: make submit-gke first, or name one: make {} GKE_JOB_NAME=NAME".format(
        target) in result.stderr
