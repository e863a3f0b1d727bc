"""What brings a stopped run back, for the hint of its stop (Ctrl-C, SIGTERM).

On a training platform the platform restarts the job, which resumes from the job dir's
checkpoint: legacy AI Platform and Vertex AI set ``TF_CONFIG`` or ``CLUSTER_SPEC``, every
Kubernetes pod (GKE) has ``KUBERNETES_SERVICE_HOST``. Anywhere else nothing restarts the run:
the hint is the command that resumes it. ``make run`` and ``make run-imagenet`` say how they
were called (``RESUME_WITH``: ``make run RUN_ARGS``, ``RESUME_ARGS``: the value given), so the
hint is that command with this run's job dir last (the trainer's flags take the last value
given); otherwise it is "the same command" with the job dir. The make command carries the
variables the run depended on (``RESUME_ENVIRONMENT``: where ``--model`` or a module came from,
the CPU device count) in front, quoted for the shell, so that it works when pasted in a new
shell too (without ``PYTHONPATH`` a ``--model`` of the user's own did not import: exit 64).
"""

import shlex
from typing import List, Mapping, Optional

PLATFORM_VARIABLES = ("TF_CONFIG", "CLUSTER_SPEC", "KUBERNETES_SERVICE_HOST")
# What a local run depends on beyond its command line, carried into its resume command.
RESUME_ENVIRONMENT = ("PYTHONPATH", "CPU_NUM_DEVICES")


def resume_command(job_dir: Optional[str], environ: Mapping[str, str]) -> Optional[str]:
    """The command that resumes a run with ``--job_dir`` ``job_dir`` in ``environ``; None on a
    training platform (it restarts the job itself)."""
    if any(environ.get(name) for name in PLATFORM_VARIABLES):
        return None
    if not job_dir:  # checkpoints where AIP_CHECKPOINT_DIR says, if anywhere
        return "the same command"
    flag = "--job-dir=" + job_dir
    make = environ.get("RESUME_WITH")
    if make:
        carried = ["{}={}".format(name, shlex.quote(environ[name]))
                   for name in RESUME_ENVIRONMENT if environ.get(name)]
        return " ".join(carried + ["{}={}".format(make, shlex.quote(" ".join(
            _without_job_dir(environ.get("RESUME_ARGS", "")) + [flag])))])
    return "the same command with {} last".format(flag)


def _without_job_dir(args: str) -> List[str]:
    """The words of ``args`` (written as for a shell) without a job dir of their own, each
    quoted again; unbalanced quotes (the run would not have started) are kept as written."""
    try:
        words = shlex.split(args)
    except ValueError:
        return [args] if args.strip() else []
    return [shlex.quote(word) for word in words
            if not word.startswith(("--job-dir=", "--job_dir="))]


def stop_hint(resume: Optional[str], checkpointed: bool = True) -> str:
    """The hint of a run stopped by a signal: who restarts it (``resume`` from
    ``resume_command``; "": nothing, no checkpoint was written), and from where: its
    checkpoint, or (``checkpointed`` False: stopped before training resumed) the same point
    again."""
    if resume is None:
        return "the platform restarts the job, which {}".format(
            "resumes from the checkpoint" if checkpointed else "starts again here")
    if not resume:
        return ("nothing restarts a local run, and without --job-dir it wrote no checkpoint: "
                "give --job-dir=DIR to resume from one next time")
    return "nothing restarts a local run: {} {}".format(
        resume, "resumes it from the checkpoint" if checkpointed else "starts it again here")
