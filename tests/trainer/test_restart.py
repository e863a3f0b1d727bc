"""trainer.restart: a stopped run's hint says what brings it back: the platform where one
restarts it, else the command that resumes it from its job dir."""

import pytest

from trainer.restart import resume_command, stop_hint

MAKE_RUN = {"RESUME_WITH": "make run RUN_ARGS"}


@pytest.mark.parametrize("platform", [{"TF_CONFIG": "{}"}, {"CLUSTER_SPEC": "{}"},
                                      {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}])
def test_on_a_platform_the_platform_restarts_the_job(platform):
    resume = resume_command("gs://b/jobs/1", dict(MAKE_RUN, **platform))
    assert resume is None
    assert stop_hint(resume) == "the platform restarts the job, which resumes from the checkpoint"
    assert stop_hint(resume, checkpointed=False) == \
        "the platform restarts the job, which starts again here"


@pytest.mark.parametrize("given, args", [
    ("", "--job-dir=runs/mnist-1"),
    ("--num_epochs=2 --job-dir=runs/old", "'--num_epochs=2 --job-dir=runs/mnist-1'"),
    ("--note='a b'", """''"'"'--note=a b'"'"' --job-dir=runs/mnist-1'"""),
])
def test_make_run_is_named_with_its_args_and_this_job_dir(given, args):
    resume = resume_command("runs/mnist-1", dict(MAKE_RUN, RESUME_ARGS=given))
    assert resume == "make run RUN_ARGS=" + args
    assert stop_hint(resume) == ("nothing restarts a local run: make run RUN_ARGS={} resumes "
                                 "it from the checkpoint".format(args))


def test_make_run_carries_the_environment_the_run_depended_on():
    """``PYTHONPATH=... make run-imagenet IMAGENET_ARGS='--model=mynets.cnn:small_cnn'``:
    its hint, pasted in a new shell, ended with ``module mynets.cnn does not import``."""
    resume = resume_command("runs/imagenet-1", {
        "RESUME_WITH": "make run-imagenet IMAGENET_ARGS", "PYTHONPATH": "/home/me/my code",
        "CPU_NUM_DEVICES": "4", "RESUME_ARGS": "--model=mynets.cnn:small_cnn"})
    assert resume == ("PYTHONPATH='/home/me/my code' CPU_NUM_DEVICES=4 make run-imagenet "
                      "IMAGENET_ARGS='--model=mynets.cnn:small_cnn --job-dir=runs/imagenet-1'")


def test_another_local_command_is_named_by_its_job_dir():
    resume = resume_command("/tmp/job", {})
    assert stop_hint(resume, checkpointed=False) == (
        "nothing restarts a local run: the same command with --job-dir=/tmp/job last starts "
        "it again here")
    assert "--job-dir=DIR to resume" in stop_hint("")
