"""Makefile targets that need docker or gcloud, run with recording stand-ins on PATH: the exact
argv each tool would get, and clear errors for missing or wrong variables."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import NO_ACCOUNT, REPO, WRITES_THE_CHECKOUT, clean_environ

pytestmark = WRITES_THE_CHECKOUT

# Appends its argv as JSON and prints $RECORDER_STDOUT; exits 1 with a message
# ($RECORDER_STDERR, else a NOT_FOUND) when its argv contains $RECORDER_FAIL_ON (e.g.
# "describe").
RECORDER = """#!/bin/sh
python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$(basename "$0")" "$@" >> "{log}"
case " $* " in *" ${{RECORDER_FAIL_ON:-@none@}} "*)
  if [ -n "${{RECORDER_STDERR:-}}" ]; then printf '%s\\n' "$RECORDER_STDERR" >&2
  else printf '%s\\n' "$(basename "$0"): warming up" "ERROR: $(basename "$0") $1: NOT_FOUND" >&2
  fi
  exit 1 ;;
esac
[ -z "${{RECORDER_STDOUT:-}}" ] || printf '%s\\n' "$RECORDER_STDOUT"
"""
AR = "us-central1-docker.pkg.dev/my-proj/pytorch-xla/pytorch-xla-trainer"
DESCRIBE = ["gcloud", "artifacts", "repositories", "describe", "pytorch-xla", "--project",
            "my-proj", "--location", "us-central1"]


def image_lookup(uri):
    """The registry lookup a submit target makes before it submits ``uri``."""
    return ["gcloud", "artifacts", "docker", "images", "describe", uri]


@pytest.fixture
def tools(tmp_path):
    """PATH with stand-in ``docker`` and ``gcloud`` that append their argv to calls.jsonl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    for name in ("docker", "gcloud"):
        script = bin_dir / name
        script.write_text(RECORDER.format(log=log))
        script.chmod(0o755)

    def make(*args, **environ):
        env = clean_environ(PATH=str(bin_dir) + os.pathsep + os.environ["PATH"])
        env.pop("PIP_CERT", None)  # this machine's pip setting; tests pass it explicitly
        env.update(environ)
        result = subprocess.run(["make", "--no-print-directory", "-C", str(REPO)] + list(args),
                                env=env, capture_output=True, text=True, timeout=300)
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() \
            else []
        log.unlink() if log.exists() else None
        return result, calls

    return make


PJRT_BASE = "us-central1-docker.pkg.dev/tpu-pytorch-releases/docker/xla:r2.9.0_3.10_tpuvm"


def test_build_and_push_to_artifact_registry_by_default(tools):
    result, calls = tools("build", "PROJECT=my-proj", "TAG=v1")
    assert result.returncode == 0, result.stderr
    assert calls == [["docker", "build", "--build-arg", "BASE_IMAGE=" + PJRT_BASE,
                      "--build-arg", "RUNTIME=pjrt", "-t", AR + ":v1", "."]]
    _, calls = tools("push", "PROJECT=my-proj")
    assert calls == [DESCRIBE, ["docker", "push", AR + ":pjrt"]]


def test_the_default_image_is_the_one_vertex_ai_submits(tools):
    """RUNTIME=pjrt by default: `make build push` then `make submit-vertex` submit the image
    that was pushed (with xrt the default, a never-pushed :pjrt)."""
    _, pushed = tools("push", "PROJECT=my-proj")
    result, submitted = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=vdef",
                              "BASE_OUTPUT_DIR=gs://my-bucket/jobs/d")
    assert result.returncode == 0, result.stderr
    assert pushed[-1][-1] == submitted[0][-1] == AR + ":pjrt"
    # Legacy jobs still get the xrt image, and a check of that profile's template.
    result, submitted = tools("submit", "PROJECT=my-proj", "JOB_NAME=ldef")
    assert result.returncode == 0, result.stderr
    assert submitted[0] == image_lookup(AR + ":xrt")


def test_a_missing_repository_is_created_once(tools):
    result, calls = tools("repository", "PROJECT=my-proj", RECORDER_FAIL_ON="describe")
    assert result.returncode == 0, result.stderr
    assert calls == [DESCRIBE, ["gcloud", "artifacts", "repositories", "create", "pytorch-xla",
                                "--project", "my-proj", "--location", "us-central1",
                                "--repository-format", "docker", "--description",
                                "PyTorch/XLA training images"]]


def test_run_args_add_to_the_runs_defaults(tools):
    """The trainer's flags take the last value given: RUN_ARGS after the defaults override
    one flag each, and the rest (the sample data, the job dir under runs/) stay."""
    result, _ = tools("-n", "-o", ".venv/.installed", "run",
                      "RUN_ARGS=--num_epochs=1 --fake_data")
    assert result.returncode == 0, result.stderr
    [line] = [line for line in result.stdout.splitlines() if "-m launcher" in line]
    args = line.split(" -- ", 1)[1].split()
    assert args[:2] == ["--data_dir=data/mnist-sample", "--log_steps=10"]
    assert args[2] == "--job-dir=runs/mnist-$(date"  # +%Y%m%d-%H%M%S): a fresh one each run
    assert args[-2:] == ["--num_epochs=1", "--fake_data"]


def test_a_failed_build_on_googles_base_points_at_the_stand_in_rehearsal(tools):
    result, _ = tools("build", "PROJECT=my-proj", RECORDER_FAIL_ON="build")
    assert result.returncode != 0
    hint = [line for line in result.stderr.splitlines() if line.startswith("make build:")]
    assert hint == ["make build: docker build failed; if it could not pull BASE_IMAGE (offline, "
                    "no such host, denied), rehearse on a local stand-in instead: make "
                    "rehearse-container (docs/submitting.md#rehearse)"]
    # On a base of one's own (a stand-in already), the failure is docker's alone.
    result, _ = tools("build", "PROJECT=my-proj", "BASE_IMAGE=tpu-standin:pjrt",
                      RECORDER_FAIL_ON="build")
    assert result.returncode != 0 and "make build:" not in result.stderr


def test_the_container_rehearsal_builds_on_the_stand_in_and_runs_the_image(tools):
    """make rehearse-container with an engine that answers and a stand-in it holds: the build
    a bridgeless engine needs, then a short run whose outputs land in a fresh runs/ folder."""
    result, calls = tools("rehearse-container")
    assert result.returncode == 0, result.stderr
    image = "tpu-xla-rehearsal:pjrt"
    assert calls[:3] == [["docker", "info"], ["docker", "image", "inspect", "tpu-standin:pjrt"],
                         ["docker", "build", "--network=host", "--build-arg",
                          "BASE_IMAGE=tpu-standin:pjrt", "--build-arg", "RUNTIME=pjrt", "-t",
                          image, "."]]
    [run] = calls[3:]
    assert run[:4] == ["docker", "run", "--rm", "--network"] and run[4] == "none"
    host, mount = run[6].split(":")
    assert mount == "/job" and re.fullmatch(str(REPO / "runs" / r"rehearsal-\d{8}-\d{6}"), host)
    assert run[7:] == [image, "--fake_data", "--num_epochs=1", "--num_steps=20", "--job-dir=/job"]
    os.rmdir(host)
    # It ends with what comes next; the docker client reaches this engine by itself, so
    # nothing about reaching or stopping one of the rehearsal's own.
    assert "    make local-run PROJECT=rehearsal IMAGE_URI=tpu-xla-rehearsal:pjrt" in \
        result.stderr.splitlines()
    assert "docs/own-code.md#build-rehearse-submit with BASE=tpu-xla-rehearsal:pjrt" in \
        result.stderr
    assert "rehearse-env" not in result.stderr and "rehearse-stop" not in result.stderr
    result, calls = tools("rehearse-container", "RUNTIME=xrt")
    assert result.returncode != 0 and calls == []
    assert "rehearse.sh: RUNTIME=xrt cannot be rehearsed" in result.stderr


def test_without_an_engine_rehearse_env_and_stop_say_so(tools, tmp_path):
    """No engine answers (neither the docker client's nor one of the rehearsal's): make
    rehearse-env fails with one line naming what starts one; make rehearse-stop has nothing
    to stop and says so."""
    engine = str(tmp_path / "engine")
    result, _ = tools("-s", "rehearse-env", RECORDER_FAIL_ON="info", TPU_XLA_ENGINE_DIR=engine)
    assert result.returncode != 0 and "rehearse-env] Error 69" in result.stderr
    assert result.stdout == ""
    assert ("engine.sh: no Docker engine runs (neither the docker client's nor the rehearsal's "
            "at unix://{}/docker.sock); HINT: make rehearse-container starts one".format(engine)
            in result.stderr)
    result, calls = tools("-s", "rehearse-stop", TPU_XLA_ENGINE_DIR=engine)
    assert result.returncode == 0 and calls == []
    assert result.stdout == ("engine.sh: the rehearsal's engine is not running (nothing to stop "
                             "at unix://{}/docker.sock)\n".format(engine))


def test_gcr_io_stays_possible(tools):
    result, calls = tools("push", "PROJECT=my-proj", "IMAGE_URI=gcr.io/my-proj/t:xrt")
    assert result.returncode == 0, result.stderr
    assert calls == [["docker", "push", "gcr.io/my-proj/t:xrt"]]
    assert "gcr.io is not Artifact Registry: nothing to create" in result.stdout


def test_build_passes_pip_cert_as_a_secret_not_an_argument(tools, tmp_path):
    result, [call] = tools("build", "PROJECT=my-proj", PIP_CERT=str(tmp_path / "ca.pem"))
    assert result.returncode == 0, result.stderr
    assert call[call.index("--secret") + 1] == "id=pip_cert,src={}".format(tmp_path / "ca.pem")
    assert not any("ca.pem" in arg for arg in call if arg.startswith("BASE_IMAGE="))


def test_push_refuses_an_unknown_runtime(tools):
    result, calls = tools("push", "PROJECT=my-proj", "RUNTIME=bogus")
    assert result.returncode != 0 and calls == []
    assert "RUNTIME must be xrt or pjrt, got 'bogus'" in result.stderr


def test_cloudbuild_substitutions(tools):
    result, calls = tools("cloudbuild", "PROJECT=my-proj", "RUNTIME=pjrt")
    assert result.returncode == 0, result.stderr
    assert calls == [DESCRIBE, ["gcloud", "builds", "submit", "--project", "my-proj",
                                "--region", "us-central1", "--config", "cloudbuild.yaml",
                                "--substitutions", "_RUNTIME=pjrt,_BASE_IMAGE=" + PJRT_BASE +
                                ",_IMAGE_URI=" + AR + ":pjrt", "."]]


def test_submit_validates_then_submits_with_user_args_after_double_dash(tools):
    result, calls = tools("submit", "PROJECT=my-proj", "JOB_NAME=job_1", "REGION=europe-west4",
                          "JOB_DIR=gs://b/jobs/1", "JOB_ARGS=--lr=0.1 --fake_data")
    assert result.returncode == 0, result.stderr
    assert calls == [image_lookup(AR + ":xrt"),
                     ["gcloud", "ai-platform", "jobs", "submit", "training", "job_1",
                      "--project", "my-proj", "--region", "europe-west4", "--config",
                      "build/job_1.yaml", "--job-dir", "gs://b/jobs/1", "--", "--lr=0.1",
                      "--fake_data"]]
    rendered = yaml.safe_load((REPO / "build" / "job_1.yaml").read_text())
    # The image `make push` pushed (its own IMAGE_REGION), not one in the job's region.
    assert rendered["trainingInput"]["masterConfig"]["imageUri"] == \
        "us-central1-docker.pkg.dev/my-proj/pytorch-xla/pytorch-xla-trainer:xrt"


def test_submit_vertex_puts_args_into_the_container_spec(tools):
    result, calls = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=vjob",
                          "JOB_ARGS=--fake_data", "BASE_OUTPUT_DIR=gs://my-bucket/jobs/v")
    assert result.returncode == 0, result.stderr
    assert calls == [image_lookup(AR + ":pjrt"),
                     ["gcloud", "ai", "custom-jobs", "create", "--project", "my-proj",
                      "--region", "us-central1", "--display-name", "vjob", "--config",
                      "build/vjob.yaml", "--format=value(name)"]]
    job = yaml.safe_load((REPO / "build" / "vjob.yaml").read_text())
    assert job["workerPoolSpecs"][0]["containerSpec"] == {"imageUri": AR + ":pjrt",
                                                          "args": ["--fake_data"]}
    # Vertex AI derives AIP_CHECKPOINT_DIR from it: a restarted replica finds its checkpoints.
    assert job["baseOutputDirectory"] == {"outputUriPrefix": "gs://my-bucket/jobs/v"}


@pytest.mark.parametrize("value, problem", [
    (None, "'gs://YOUR_BUCKET/pytorch-xla' is a template placeholder"),
    ("/tmp/out", "'/tmp/out' is not a Cloud Storage URI"),
])
def test_submit_vertex_needs_a_cloud_storage_output_directory(tools, value, problem):
    extra = [] if value is None else ["BASE_OUTPUT_DIR=" + value]
    result, calls = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=vnone", *extra)
    assert result.returncode != 0 and calls == []
    assert "baseOutputDirectory.outputUriPrefix: " + problem in result.stderr
    assert "make submit-vertex BASE_OUTPUT_DIR=gs://BUCKET/DIR" in result.stderr


SUBMITS = [("submit", []), ("submit-vertex", ["BASE_OUTPUT_DIR=gs://my-bucket/jobs/u"])]


def failed_lookup(tools, target, extra, **recorder):
    """``make target`` whose registry lookup fails as ``recorder`` says: its one line, with
    IMAGE_URI's runtime."""
    result, calls = tools(target, "PROJECT=my-proj", "JOB_NAME=lookup", *extra,
                          RECORDER_FAIL_ON="describe", **recorder)
    runtime = "xrt" if target == "submit" else "pjrt"
    assert result.returncode != 0 and calls == [image_lookup(AR + ":" + runtime)]
    [line] = [line for line in result.stderr.splitlines() if line.startswith("make " + target)]
    return line, runtime


@pytest.mark.parametrize("target, extra", SUBMITS)
def test_a_submit_refuses_an_image_its_registry_does_not_have(tools, target, extra):
    line, runtime = failed_lookup(tools, target, extra)
    assert line == (
        "make {}: IMAGE_URI {}:{} is not in its registry (ERROR: gcloud artifacts: NOT_FOUND); "
        "HINT: push it first (make build push PROJECT=my-proj RUNTIME={}), or set IMAGE_URI to "
        "a pushed image".format(target, AR, runtime, runtime))


@pytest.mark.parametrize("target, extra", SUBMITS)
def test_a_submit_without_a_gcloud_login_says_to_log_in(tools, target, extra):
    """Not "not in its registry (to select an already authenticated account to use.)": the
    image may well be there; gcloud's own sentence says what is missing."""
    line, runtime = failed_lookup(tools, target, extra, RECORDER_STDERR=NO_ACCOUNT)
    assert line == (
        "make {}: gcloud could not ask the registry for IMAGE_URI {}:{}: no account is logged "
        "in (ERROR: (gcloud.artifacts.docker.images.describe) You do not currently have an "
        "active account selected.); HINT: run gcloud auth login (or gcloud config set account "
        "ACCOUNT), then make {} again".format(target, AR, runtime, target))


@pytest.mark.parametrize("target", ["submit", "submit-vertex"])
def test_a_missing_project_names_the_target_typed(tools, target):
    result, calls = tools(target, "BASE_OUTPUT_DIR=gs://my-bucket/jobs/p")
    assert result.returncode != 0 and calls == []
    assert "PROJECT is not set: make {} PROJECT=...".format(target) in result.stderr
    assert "make check-job" not in result.stderr


def test_another_registry_is_asked_through_docker(tools):
    image = "gcr.io/my-proj/t:pjrt"
    result, calls = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=gcr", "IMAGE_URI=" + image,
                          "BASE_OUTPUT_DIR=gs://my-bucket/jobs/g")
    assert result.returncode == 0, result.stderr
    assert calls[0] == ["docker", "manifest", "inspect", image]
    result, calls = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=gcr", "IMAGE_URI=" + image,
                          "BASE_OUTPUT_DIR=gs://my-bucket/jobs/g", RECORDER_FAIL_ON="inspect")
    assert result.returncode != 0 and len(calls) == 1
    assert "(ERROR: docker manifest: NOT_FOUND); HINT: push it first" in result.stderr


JOB = "projects/123/locations/europe-west4/customJobs/456"


@pytest.mark.parametrize("target, verb", [("vertex-status", "describe"),
                                          ("vertex-logs", "stream-logs"),
                                          ("vertex-cancel", "cancel")])
def test_the_job_submitted_last_has_status_logs_and_cancel(tools, target, verb):
    result, _ = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=vlast",
                      "BASE_OUTPUT_DIR=gs://my-bucket/jobs/l", RECORDER_STDOUT=JOB)
    assert result.returncode == 0, result.stderr
    assert "submitted {}: make vertex-status, vertex-logs or vertex-cancel".format(JOB) \
        in result.stdout
    result, calls = tools(target)  # the full name holds project and region
    assert result.returncode == 0, result.stderr
    assert calls == [["gcloud", "ai", "custom-jobs", verb, JOB]]
    result, calls = tools(target, "VERTEX_JOB=789", "PROJECT=p", "REGION=europe-west4")
    assert calls == [["gcloud", "ai", "custom-jobs", verb, "789", "--project", "p",
                      "--region", "europe-west4"]]


def test_no_job_to_follow_says_how_to_get_one(tools):
    (REPO / "build" / "vertex-job").unlink()
    result, calls = tools("vertex-logs")
    assert result.returncode != 0 and calls == []
    assert "VERTEX_JOB is not set and build/vertex-job holds no job: make submit-vertex " \
        "first" in result.stderr
    result, calls = tools("vertex-status", "VERTEX_JOB=789")
    assert result.returncode != 0 and "PROJECT is not set" in result.stderr


def test_make_help_lists_every_target_with_its_comment(tools):
    result, calls = tools()  # make alone
    assert result.returncode == 0 and calls == [], result.stderr
    listed = {line.split(":")[0].strip() for line in result.stdout.splitlines()
              if line.startswith("  ") and not line.startswith("   ")}
    phony = subprocess.run(["make", "-C", str(REPO), "-pn", "help"], capture_output=True,
                           text=True).stdout
    [targets] = [line.split(":", 1)[1].split() for line in phony.splitlines()
                 if line.startswith(".PHONY:")]
    named = {name for entry in listed for name in entry.split(" / ")}
    assert set(targets) <= named, set(targets) - named
    assert "  vertex-status / vertex-logs / vertex-cancel: describe, follow the logs of" \
        in result.stdout
    # --fake_data trains every step of every epoch; --smoke is the run of seconds.
    assert "RUN_ARGS=--smoke is a smoke run" in result.stdout
    assert "fake_data is a smoke run" not in result.stdout


def test_a_legacy_job_refuses_a_vertex_output_directory(tools):
    result, calls = tools("submit", "PROJECT=my-proj", "JOB_NAME=lbase",
                          "BASE_OUTPUT_DIR=gs://my-bucket/out")
    assert result.returncode != 0 and calls == []
    assert "is not a Vertex AI job" in result.stderr and "JOB_DIR=gs://" in result.stderr


def test_invalid_job_file_stops_before_gcloud(tools, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "config" / "ai-platform-tpu-v3.yaml").read_text().replace(
        "count: 8", "count: 4"))
    result, calls = tools("submit", "PROJECT=p", "CONFIG=" + str(bad), "JOB_NAME=bad")
    assert result.returncode != 0 and calls == []
    assert "acceleratorConfig.count" in result.stderr


def run_env(call):
    """The ``-e NAME=VALUE`` variables of a recorded ``docker run``."""
    return dict(call[i + 1].split("=", 1) for i, arg in enumerate(call) if arg == "-e")


def test_local_run_xrt_resolves_the_named_tpu_node_of_the_project(tools):
    result, calls = tools("local-run", "PROJECT=p", "RUNTIME=xrt", "TPU_NODE=my-tpu",
                          "JOB_ARGS=--lr=0.1")
    assert result.returncode == 0, result.stderr
    [call] = calls
    assert call[:6] == ["docker", "run", "--rm", "--shm-size", "16G", "--entrypoint"]
    assert call[6] == "python" and call[-4:] == ["-m", "launcher", "--dry-run", "--lr=0.1"]
    env = run_env(call)
    assert json.loads(env["TPU_CONFIG"]) == {"project": "p", "zone": "us-central1-b",
                                             "tpu_node_name": "my-tpu"}
    assert json.loads(env["TF_CONFIG"])["task"]["type"] == "master"
    assert call[-5] == "us-central1-docker.pkg.dev/p/pytorch-xla/pytorch-xla-trainer:xrt"


def test_local_run_pjrt_rehearses_vertex_ai_without_a_tpu(tools):
    result, [call] = tools("local-run", "PROJECT=p")
    assert result.returncode == 0, result.stderr
    env = run_env(call)
    assert set(env) == {"CLUSTER_SPEC"}  # no TPU_CONFIG: nothing to resolve
    spec = json.loads(env["CLUSTER_SPEC"])
    assert spec["task"]["type"] == "workerpool0" and "workerpool0" in spec["cluster"]
    assert call[-4] == "us-central1-docker.pkg.dev/p/pytorch-xla/pytorch-xla-trainer:pjrt"


def test_local_run_xrt_without_a_tpu_node_says_what_it_needs(tools):
    result, calls = tools("local-run", "PROJECT=p", "RUNTIME=xrt")
    assert result.returncode != 0 and calls == []
    assert "TPU_NODE is not set" in result.stderr and "RUNTIME=pjrt" in result.stderr
    # A TPU_CONFIG of one's own needs no TPU_NODE.
    result, [call] = tools("local-run", "PROJECT=p", "RUNTIME=xrt",
                           'LOCAL_TPU_CONFIG={"tpu_node_name": "t"}')
    assert result.returncode == 0 and run_env(call)["TPU_CONFIG"] == '{"tpu_node_name": "t"}'


@pytest.mark.parametrize("args, message", [
    (["build"], "PROJECT is not set"),
    (["build", "PROJECT=p", "RUNTIME=tpu"], "RUNTIME must be xrt or pjrt"),
    (["submit"], "PROJECT is not set"),
])
def test_missing_or_wrong_variables_are_errors(tools, args, message):
    result, calls = tools(*args)
    assert result.returncode != 0 and message in result.stderr and calls == []


# What users write in JOB_ARGS (shell quoting, no expansions) -> the trainer's argv.
EXACT_ARGS = [
    ("--data_dir=gs://b/m --note='a b'", ["--data_dir=gs://b/m", "--note=a b"]),
    ('--msg="say \\"hi\\"" --x=1=2', ['--msg=say "hi"', "--x=1=2"]),
    ("--city=Zürich --mark=✓ --empty=''", ["--city=Zürich", "--mark=✓", "--empty="]),
    ("--home='$HOME' --tick='`id`' a\\ b", ["--home=$HOME", "--tick=`id`", "a b"]),
    ("  --spaced   --tab\t", ["--spaced", "--tab"]),
]


@pytest.mark.parametrize("text, argv", EXACT_ARGS)
def test_job_args_reach_the_legacy_trainer_word_for_word(tools, text, argv):
    result, calls = tools("submit", "PROJECT=my-proj", "JOB_NAME=exact", "JOB_ARGS=" + text)
    assert result.returncode == 0, result.stderr
    [_, call] = calls
    assert call[call.index("--") + 1:] == argv


@pytest.mark.parametrize("text, argv", EXACT_ARGS)
def test_job_args_reach_the_vertex_trainer_word_for_word(tools, text, argv):
    # A job name (and so a build/NAME.yaml) of each case's own: the cases run in parallel
    # under make test, and read one another's file when they shared one.
    name = "exactv{}".format(EXACT_ARGS.index((text, argv)))
    result, _ = tools("submit-vertex", "PROJECT=my-proj", "JOB_NAME=" + name, "JOB_ARGS=" + text,
                      "BASE_OUTPUT_DIR=gs://my-bucket/exact")
    assert result.returncode == 0, result.stderr
    pool = yaml.safe_load((REPO / "build" / (name + ".yaml")).read_text(encoding="utf-8"))[
        "workerPoolSpecs"][0]
    assert pool["containerSpec"]["args"] == argv


@pytest.mark.parametrize("text, argv", EXACT_ARGS + [
    # What a shell would have expanded or run when local-run passed JOB_ARGS to it unquoted.
    ("--home=$HOME --glob=* --a=1;echo injected", ["--home=$HOME", "--glob=*", "--a=1;echo",
                                                   "injected"]),
])
def test_job_args_reach_the_local_run_word_for_word(tools, text, argv):
    result, [call] = tools("local-run", "PROJECT=p", "RUNTIME=pjrt", "JOB_ARGS=" + text)
    assert result.returncode == 0, result.stderr
    assert call[call.index("--dry-run") + 1:] == argv


def test_unbalanced_quotes_in_job_args_stop_before_gcloud(tools):
    result, calls = tools("submit", "PROJECT=my-proj", "JOB_NAME=q", "JOB_ARGS=--note='oops")
    assert result.returncode != 0 and calls == []
    assert "--container-args: No closing quotation" in result.stderr


# A python3 whose `-m venv DIR` makes a venv of its own kind: its python answers `-m pip` with
# the line pip prints first, and records its argv.
BOOTSTRAP = """#!/bin/sh
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi
printf '%s\\n' "$*" >> "$(dirname "$0")/../pip-calls"
case " $* " in
  *" --quiet "*) ;;
  *) echo "Collecting absl-py==2.5.1 (from -r requirements/dev.lock)" ;;
esac
"""


def test_the_first_install_says_what_it_does_phase_by_phase(tmp_path):
    """Minutes of downloads (torch's 7 GB) are never silent: a line per phase, and pip's own
    lines (each package and its download's size) for the big one."""
    bootstrap = tmp_path / "python3"
    bootstrap.write_text(BOOTSTRAP)
    bootstrap.chmod(0o755)
    venv = tmp_path / "venv"
    result = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(REPO),
                             "VENV=" + str(venv), "PYTHON_BOOTSTRAP=" + str(bootstrap),
                             str(venv / ".installed")], env=clean_environ(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    prefix = "make: {}: ".format(venv)
    lock = (REPO / "requirements" / "dev.lock").read_text()
    packages = len(re.findall(r"^[A-Za-z0-9][^ ]*==\S+ \\\n    --hash=sha256:", lock, re.M))
    assert packages > 100
    assert result.stdout.splitlines() == [
        prefix + "installing the pinned environment (once, and again when a lock changes)",
        prefix + "1/3: the {} packages of requirements/dev.lock, each hash checked (torch "
                 "from PyPI brings about 7 GB of CUDA libraries: minutes on a fast "
                 "network)".format(packages),
        "Collecting absl-py==2.5.1 (from -r requirements/dev.lock)",
        prefix + "2/3: this project, editable",
        prefix + "3/3: google-cloud-storage 2.x in {}/gcs2 (the xrt image's, for the "
                 "tests)".format(venv),
        prefix + "ready"]
    calls = (venv / "pip-calls").read_text().splitlines()
    assert len(calls) == 3 and "--quiet" not in calls[0].split()


def test_a_first_venv_install_stops_before_pip_where_the_disk_is_short(tmp_path):
    """A disk that cannot hold torch's CUDA libraries gets one line naming its free space
    (the disk the venv goes on: its nearest folder that exists), what is needed and a hint,
    before pip starts, and no half-made venv (a bound 1,000 GB above the free space stands in
    for a full disk; the free space may move by a GB while the test runs)."""
    venv = tmp_path / "not" / "yet" / "venv"
    free = shutil.disk_usage(str(tmp_path)).free // 2 ** 30
    result = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "venv",
                             "VENV=" + str(venv), "VENV_DISK_GB={}".format(free + 1000)],
                            env=clean_environ(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    # make's own last line is "make: ***", or "make[2]: ***" under make test.
    [told] = [line for line in result.stderr.splitlines()
              if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    found = re.fullmatch(r"make: {}: the disk has (\d+) GB free, a first install needs about "
                         r"{} GB \(torch's CUDA libraries\); HINT: free space \(.*\)".format(
                             re.escape(str(venv)), free + 1000), told)
    assert found, told
    assert abs(int(found.group(1)) - free) <= 1
    assert not (tmp_path / "not").exists()
