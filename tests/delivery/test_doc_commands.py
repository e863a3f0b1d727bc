"""Every shell block of README.md and docs/*.md works as written, or ``NOT_HERE`` says why it
cannot run here and which test checks it instead: the next drift between a page and the
Makefile, the launcher or the job templates fails ``make test``.

Each block runs in one ``bash`` from the checkout, as a reader pastes it, command by command:
any command that fails (``a && b`` included, which ``set -e`` would let pass) or an unset
variable fails the block. The environment is clean, with these on ``PATH``:

- ``docker``, ``gcloud``, ``gsutil``, ``kubectl``, ``xpk``: recorders that log their argv and
  succeed.
  What they would do needs an engine, a Google account or a cluster; the container tier runs
  the real engine (``tests/images``), and ``test_makefile`` checks the argv make gives them.
- ``make``: the real make, never remaking ``.venv``, given only variables the Makefile names
  (``[RUNTIME=pjrt]`` or a misspelt ``PROJEC=p`` fails). Targets that only drive those tools
  (``SHIMMED_TARGETS``) run for real, so required variables are enforced and job files are
  rendered and validated by ``python -m jobspec``; every other target (``run``, ``test``,
  ``standin-base``: minutes of work) runs as ``make -n``, which still fails on an unknown
  target or a missing required variable.
- ``python``: a stub that fails and is recorded, because a page must name the interpreter
  (``.venv/bin/python`` here; the image's ``python`` only inside a container). A block that
  called it fails even where its status was lost (``eval "$(python ...)"`` succeeds).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, WRITES_THE_CHECKOUT, clean_environ
from doc_blocks import block_containing, checked, commands, shell_blocks

pytestmark = WRITES_THE_CHECKOUT

OWN_CODE_LOOP = "launcher -- python docs/examples/own-code/train.py"
# Blocks that cannot run here, or not only for their status, each found by a text only it
# holds: why, and what checks it.
NOT_HERE = {
    # Builds an image on the project's pjrt image and stops a container mid-training.
    "docker logs -f rehearsal": "needs a Docker engine and the pjrt image: "
                                "tests/images/test_own_code.py runs this block as it stands",
    # Reads and writes a bucket.
    "python -m trainer.data.make_shards --source=gs://": "needs Cloud Storage: "
                                                         "test_make_shards_takes_its_flags",
    # The launcher's usage line, with [placeholders].
    "python -m launcher [launcher options]": "a synopsis: test_the_launcher_synopsis",
    # Runs here, once, where its output is checked too.
    OWN_CODE_LOOP: "trains: test_the_own_code_loop_resumes_from_its_checkpoint",
}
# Make targets that only call docker/gcloud (and jobspec): run for real with the recorders.
# rehearse-env and rehearse-stop manage the rehearsal's engine in TPU_XLA_ENGINE_DIR, a folder
# of the test's own (never this machine's engine).
SHIMMED_TARGETS = ("build", "push", "cloudbuild", "repository", "check-job", "submit",
                   "submit-vertex", "vertex-status", "vertex-logs", "vertex-cancel",
                   "local-run", "sbom", "help", "gke-status", "gke-delete",
                   "rehearse-env", "rehearse-stop")
# (gke-logs follows a cluster's pods until its JobSet ends: make -n here, and
# tests/delivery/test_gke_logs.py plays it against a kubectl that plays a cluster.)
RECORDER = '#!/bin/sh\nprintf "%s\\n" "$(basename "$0") $*" >> "{log}"\n'
# gcloud prints the name of the job it created, which make submit-vertex keeps for the
# vertex-* targets.
GCLOUD = RECORDER + """case "$*" in "ai custom-jobs create "*)
  echo projects/123/locations/us-central1/customJobs/456 ;; esac
"""
MAKE_WRAPPER = """#!/bin/sh
# The real make, with variables the Makefile names; targets other than {shimmed} only as a
# dry run (make -n).
dry=
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    *=*)
      name="${{arg%%=*}}"
      case "$name" in ""|*[!A-Za-z0-9_]*) echo "make: $arg is no variable" >&2; exit 2 ;; esac
      grep -qw -- "$name" Makefile || {{ echo "make: the Makefile has no $name" >&2; exit 2; }}
      ;;
    {pattern}) ;;
    *) dry=-n ;;
  esac
done
exec {make} -o .venv/.installed $dry "$@"
"""
PYTHON_STUB = """#!/bin/sh
printf "%s\\n" "python $*" >> "{log}"
echo "python: no such interpreter for a reader: name .venv/bin/python" >&2
exit 127
"""


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """Runs a block as a reader would: ``shell(text)`` -> (CompletedProcess, recorded calls)."""
    return reader_shell(tmp_path_factory.mktemp("doc-commands"))


def reader_shell(root: Path, docker: str = RECORDER):
    """``shell``'s runner in ``root``, with ``docker`` (a script's text; ``{log}``: the calls
    log) as the docker client."""
    bin_dir, log = root / "bin", root / "calls.log"
    bin_dir.mkdir(parents=True)
    scripts = {name: RECORDER.format(log=log) for name in ("gsutil", "kubectl", "xpk")}
    scripts["docker"] = docker.format(log=log)
    scripts["gcloud"] = GCLOUD.format(log=log)
    scripts["make"] = MAKE_WRAPPER.format(shimmed=", ".join(SHIMMED_TARGETS),
                                          pattern="|".join(SHIMMED_TARGETS),
                                          make=shutil.which("make"))
    scripts["python"] = PYTHON_STUB.format(log=log)
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def run(text: str, cwd: Path = REPO, **environ: str):
        log.write_text("")
        environ.setdefault("TPU_XLA_ENGINE_DIR", str(root / "engine"))
        env = clean_environ(PATH=str(bin_dir) + os.pathsep + os.environ["PATH"], **environ)
        for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PIP_CERT"):
            env.pop(name, None)  # an outer make's settings (make test) are not a reader's
        before = set((REPO / "runs").glob("*"))
        try:
            result = subprocess.run(["bash", "-c", checked(text)], cwd=str(cwd), env=env,
                                    capture_output=True, text=True, timeout=120)
        finally:  # what a block trained into runs/ (the own-code loop) is a reader's, not ours
            for made in set((REPO / "runs").glob("*")) - before:
                shutil.rmtree(str(made), ignore_errors=True)
        return result, log.read_text().splitlines()

    return run


RUNNABLE = [block for block in shell_blocks()
            if not any(marker in block.text for marker in NOT_HERE)]


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.name)
def test_the_block_runs_as_written(shell, block):
    result, calls = shell(block.text)
    assert result.returncode == 0, "{} failed ({}):\n{}\n{}".format(
        block.name, result.returncode, block.text, result.stderr[-3000:])
    assert not [call for call in calls if call.startswith("python ")], \
        "{} runs a bare python: {}".format(block.name, calls)


@pytest.mark.parametrize("marker", sorted(NOT_HERE))
def test_each_block_that_cannot_run_here_is_still_on_its_page(marker):
    assert block_containing(marker)


def test_every_shell_block_is_run_or_listed():
    listed = [block for block in shell_blocks()
              if any(marker in block.text for marker in NOT_HERE)]
    assert len(listed) == len(NOT_HERE) and len(RUNNABLE) + len(listed) == len(shell_blocks())
    assert len(RUNNABLE) >= 10  # the extraction finds the pages' blocks


def test_the_blocks_reach_the_tools_they_name(shell):
    """The recorders and the make wrapper are in the way: what the README's submit block asks
    for reaches gcloud, rendered and validated."""
    result, calls = shell(block_containing("make submit-vertex", page="README").text)
    assert result.returncode == 0, result.stderr
    assert [call.split()[:5] for call in calls] == [
        ["gcloud", "artifacts", "docker", "images", "describe"],
        ["gcloud", "ai", "custom-jobs", "create", "--project"],
        ["gcloud", "artifacts", "docker", "images", "describe"],
        ["gcloud", "ai-platform", "jobs", "submit", "training"]]
    assert calls[0].endswith(":pjrt") and calls[2].endswith(":xrt")
    assert "build/pytorch_xla_" in calls[1] and calls[3].endswith(
        "-- --data_dir=gs://my-bucket/mnist --num_epochs=5")


def test_a_block_that_drifted_fails(shell):
    """What this test exists for: a target, a variable or an interpreter the pages no longer
    match fails the block."""
    for text, message in [
        ("make submit-vertex PROJECT=p\n", "baseOutputDirectory.outputUriPrefix"),
        ("make no-such-target\n", "No rule to make target 'no-such-target'"),
        ("make test-images-please\n", "No rule to make target"),
        ("make build RUNTIME=pjrt\n", "PROJECT is not set"),
        ("make push PROJECT=p [RUNTIME=pjrt]\n", "[RUNTIME=pjrt] is no variable"),
        ("make build PROJEC=p\n", "the Makefile has no PROJEC"),
        ('exports="$(python -m launcher --dry-run)" && eval "$exports"\nmake -n run\n',
         "python: no such interpreter"),
        ("docker push $IMAGE\n", "IMAGE: unbound variable"),
    ]:
        result, _ = shell(text)
        assert result.returncode != 0 and message in result.stderr, (text, result.stderr)


DRY_RUN = "launcher --dry-run)\" && eval"


@pytest.mark.parametrize("page", ["README.md", "docs/launcher.md"])
def test_the_documented_dry_run_exports_and_fails_visibly(shell, tmp_path, page):
    line = next(line for line in block_containing(DRY_RUN, page=page).text.splitlines()
                if DRY_RUN in line)
    result, _ = shell(line + '\necho "PJRT_DEVICE=$PJRT_DEVICE"\n')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "PJRT_DEVICE=CPU"
    # The launcher refuses the environment: the line fails, with the launcher's own error.
    refused, _ = shell(line + "\necho exported\n", TPU_CONFIG="{not json")
    assert refused.returncode == 78 and "exported" not in refused.stdout
    assert "launcher: ConfigError: TPU_CONFIG" in refused.stderr
    # No interpreter where the page says (outside the checkout): fails too.
    missing, _ = shell(line + "\necho exported\n", cwd=tmp_path)
    assert missing.returncode == 127 and "exported" not in missing.stdout
    # The form the pages had: eval of nothing succeeds, and the refusal goes unnoticed.
    old, _ = shell('eval "$(.venv/bin/python -m launcher --dry-run)"\necho exported\n',
                   TPU_CONFIG="{not json")
    assert old.returncode == 0 and "exported" in old.stdout


# The docker client of a machine whose only engine is the one the rehearsal started: only that
# engine's socket answers (buildx is the client's own). It records DOCKER_HOST with its argv.
ENGINE_DOCKER = """#!/bin/sh
printf "%s\\n" "DOCKER_HOST=${{DOCKER_HOST:-}} docker $*" >> "{log}"
[ "$1" = buildx ] && exit 0
[ "${{DOCKER_HOST:-}}" = "unix://${{TPU_XLA_ENGINE_DIR}}/docker.sock" ] || {{
  echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1; }}
"""


def test_the_rehearsals_follow_ups_reach_its_engine_in_the_order_the_docs_give(tmp_path):
    """After make rehearse-container (a dry run here), the README's next commands and
    docs/own-code.md's build on the rehearsal image, pasted in that order into one shell on a
    machine where only the rehearsal's engine answers: each docker call reaches that engine,
    and make rehearse-stop stops it (a real process standing in for its dockerd)."""
    engine = tmp_path / "engine"
    (engine / "data").mkdir(parents=True)
    (engine / "data" / "layer").write_bytes(b"\0" * 2 ** 20)
    socket = "DOCKER_HOST=unix://{}/docker.sock".format(engine)
    readme = list(commands(block_containing("make rehearse-container", page="README").text))
    stop = readme.pop()
    assert readme[0].startswith("make rehearse-container") and stop.startswith(
        "make rehearse-stop")
    # The page's own words: "then set `BASE=tpu-xla-rehearsal:pjrt` below".
    assert "then set `BASE=tpu-xla-rehearsal:pjrt` below" in (
        REPO / "docs" / "own-code.md").read_text()
    build = list(commands(block_containing("docker logs -f rehearsal").text))[:3]
    assert build[0].startswith("BASE=") and build[2].startswith("docker build ")
    build[0] = "BASE=tpu-xla-rehearsal:pjrt"
    dockerd = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                "dockerd", "--pidfile", str(engine / "dockerd.pid")])
    try:
        (engine / "dockerd.pid").write_text(str(dockerd.pid))
        run = reader_shell(tmp_path / "reader", docker=ENGINE_DOCKER)
        result, calls = run("\n".join(readme + build + [stop]) + "\n",
                            TPU_XLA_ENGINE_DIR=str(engine))
        assert result.returncode == 0, result.stderr
        assert dockerd.wait(timeout=30) == -signal.SIGTERM
    finally:
        dockerd.kill()
    # The engine reached after make rehearse-env: the own-code build on the rehearsal image,
    # and make local-run's container, both through the client rehearse-env put on PATH.
    reached = [call.split(" ", 2)[2] for call in calls if call.startswith(socket + " docker ")]
    assert [call.split()[:3] for call in reached if call.split()[0] in ("build", "run")] == [
        ["run", "--rm", "--shm-size"],
        ["build", "--build-arg", "BASE_IMAGE=tpu-xla-rehearsal:pjrt"]]
    assert [call for call in reached if call.startswith("run ")][0].endswith(
        "tpu-xla-rehearsal:pjrt -m launcher --dry-run")
    assert (engine / "bin" / "docker").resolve() == (tmp_path / "reader" / "bin" / "docker")
    assert "engine.sh: stopped the rehearsal's engine (dockerd, PID {})".format(
        dockerd.pid) in result.stdout
    assert re.search(r"its data root {}/data holds 1(\.\d)?M .*: rm -rf {}$".format(
        engine, engine), result.stdout, re.M), result.stdout


def test_the_launcher_synopsis(shell):
    block = block_containing("python -m launcher [launcher options]")
    result, _ = shell(".venv/bin/python -m launcher --help\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m launcher")
    assert "-- COMMAND" in block.text and "[trainer args ...]" in block.text


def test_the_own_code_loop_resumes_from_its_checkpoint(shell):
    """docs/own-code.md's first block, pasted twice: each paste trains in a fresh job dir
    (no resume from the paste before), and its second run resumes from its first."""
    for _ in range(2):
        result, _ = shell(block_containing(OWN_CODE_LOOP).text)
        assert result.returncode == 0, result.stderr[-3000:]
        lines = result.stdout.splitlines()
        assert lines[-1] == "done at step 40" and "done at step 20" in lines
        assert [line for line in lines if line.startswith("resumed")] == [
            "resumed from step 20"]
    assert ("launcher: devices: 4 on this host (CPU_NUM_DEVICES=4 CPU devices); the command "
            "decides how many it uses") in result.stderr


def test_make_shards_takes_its_flags(shell):
    block = block_containing("python -m trainer.data.make_shards --source=gs://")
    result, _ = shell(".venv/bin/python -m trainer.data.make_shards --help\n")
    assert result.returncode == 0, result.stderr
    flags = [word.split("=")[0] for word in block.text.split() if word.startswith("--")]
    assert flags == ["--source", "--dest", "--data_dir"]
    assert all(flag in result.stdout for flag in flags[:2]), result.stdout


def test_a_block_splits_into_the_commands_a_shell_runs():
    text = ("# a comment\nA=1\nmake x \\\n  Y=2\n\nkubectl apply -f - <<'EOF'\nkind: Job\n"
            "EOF\necho done  # says done\n")
    assert list(commands(text)) == ["A=1", "make x \\\n  Y=2",
                                    "kubectl apply -f - <<'EOF'\nkind: Job\nEOF",
                                    "echo done  # says done"]
    result = subprocess.run(["bash", "-c", checked("true\nfalse && true\necho never\n")],
                            capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (1, "")
    assert "command 2 of the block failed (1)" in result.stderr


GKE_BLOCKS = [block for block in shell_blocks() if block.page == "docs/gke.md"
              and "make " in block.text and "CLUSTER=" in block.text]


@pytest.mark.parametrize("block", GKE_BLOCKS, ids=lambda block: block.name)
def test_a_cluster_in_another_region_is_the_one_make_talks_to(shell, block):
    """A reader whose cluster is in europe-west4 changes the block's REGION: every kubectl
    call make gives (run, or printed by make -n) names that cluster's context."""
    assert "REGION=us-central1" in block.text, "{} sets no REGION".format(block.name)
    result, calls = shell(block.text.replace("REGION=us-central1", "REGION=europe-west4"))
    assert result.returncode == 0, result.stderr[-3000:]
    contexts = [line for line in calls + result.stdout.splitlines()
                if "kubectl" in line and "--context" in line]
    assert contexts, "{} calls no kubectl".format(block.name)
    assert all("--context gke_my-project_europe-west4_tpu-cluster" in line
               for line in contexts), contexts


# xpk runs a workload's --command inside its own script, with ``bash -c`` as the container's
# command (PYTHONPATH=/app in the image; the checkout here), replacing its entrypoint; this
# python runs the launcher as a dry run. ``xpk cluster create`` only succeeds.
XPK = """#!{python}
import subprocess, sys
sys.path.insert(0, {tests!r})
from xpk_workload import container_script, flags
words = sys.argv[1:]
if words[:2] == ["workload", "create"]:
    sys.exit(subprocess.call(["bash", "-c", container_script(flags(words)["command"])]))
sys.exit(0 if words[:2] == ["cluster", "create"] else 2)
"""
PYTHON_LAUNCHER_DRY_RUN = """#!/bin/sh
if [ "$1 $2" = "-m launcher" ]; then shift 2; exec {python} -m launcher --dry-run "$@"; fi
exec {python} "$@"
"""


@pytest.mark.parametrize("workload, trainer_args", [
    ("imagenet-xpk-1", "-m trainer.imagenet --data_dir=gs://my-bucket/imagenet-shards "
                       "--job-dir=gs://my-bucket/jobs/xpk-1"),
    ("lm-xpk-1", "-m trainer.lm --data_dir=gs://my-bucket/tokens --job-dir=gs://my-bucket/jobs/"
                 "lm-xpk-1 --preset=1b --seq_len=2048 --sharding=fsdp --remat=block"),
], ids=["imagenet", "language-model"])
def test_the_xpk_commands_run_the_launcher_in_front_of_the_trainer(tmp_path, workload,
                                                                   trainer_args):
    """docs/gke.md's xpk blocks (ImageNet, a language model), with an xpk that runs --command
    the way xpk's pods do, on a GKE pod of host 1 of 4: the launcher starts (it says which
    host), and execs the trainer with the arguments after its own options."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"xpk": XPK.format(python=sys.executable, tests=str(REPO / "tests")),
               "gcloud": "#!/bin/sh\necho sha256:0123\n",
               "python": PYTHON_LAUNCHER_DRY_RUN.format(python=REPO / ".venv" / "bin" /
                                                        "python")}
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    block = block_containing("--workload " + workload, page="docs/gke.md")
    env = clean_environ(PATH=str(bin_dir) + os.pathsep + os.environ["PATH"], PYTHONPATH=str(REPO),
                        TPU_WORKER_ID="1", TPU_WORKER_HOSTNAMES="h0,h1,h2,h3")
    result = subprocess.run(["bash", "-c", checked(block.text)], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "launcher: slice: host 2 of 4" in result.stderr
    trainer = [line for line in result.stdout.splitlines() if line.startswith("# trainer:")]
    assert len(trainer) == 1 and trainer[0].endswith(trainer_args), result.stdout
    assert "\nEXIT_CODE=0\n" in result.stdout  # xpk's script ran it and passed its code on
    # $PID, the process xpk's trap sends SIGTERM to, is the launcher (tests/delivery/test_xpk.py)
    assert "exec python -m launcher" in block.text
