"""``python -m jobspec check FILE [--image URI] [--base-image B] [--region R]
[--container-args TEXT] [--base-output-dir gs://...] [--name NAME] [--write OUT]``,
``python -m jobspec cloudbuild FILE`` and ``python -m jobspec exec COMMAND...`` (runs COMMAND
with the words of ``$JOB_ARGS`` appended).

``check`` fills ``--image`` into the job's image fields and, for Vertex AI and GKE,
``--container-args`` (split like a POSIX shell splits the same text after ``--`` on gcloud's
command line) into ``containerSpec.args`` or the TPU container's ``args``; for Vertex AI
``--base-output-dir`` into ``baseOutputDirectory``, and for GKE ``--name`` into a JobSet's
``metadata.name``; then prints each finding as one line and, when there is no error, writes
the job to ``--write`` (what ``make submit``/``submit-vertex``/``submit-gke`` send).
Exit code: 0 valid (warnings allowed), 1 errors found, 2 unreadable file or arguments.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any, List, Optional

import yaml

from jobspec.check import (
    check_job,
    check_pairing,
    set_base_output_dir,
    set_container_args,
    set_image,
    set_name,
)
from jobspec.cloudbuild import check_cloudbuild
from jobspec.findings import ERROR, Finding


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "exec":
        return _exec_with_job_args(args.argv)
    try:
        with open(args.file) as handle:
            job = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        print("error: {}: cannot read ({})".format(args.file, " ".join(str(error).split())),
              file=sys.stderr)
        return 2
    if args.command == "cloudbuild":
        return _report(args.file, check_cloudbuild(job), None)
    if isinstance(job, dict):
        if args.image:
            set_image(job, args.image)
        if args.name:
            set_name(job, args.name)
        if args.container_args is not None:
            try:
                set_container_args(job, job_args(args.container_args))
            except ValueError as error:
                print("error: --container-args: {} ({!r})".format(error, args.container_args),
                      file=sys.stderr)
                return 2
        if args.base_output_dir is not None:
            if "workerPoolSpecs" not in job:
                print("error: --base-output-dir: {} is not a Vertex AI job (a legacy job's "
                      "output directory is its --job-dir: make submit JOB_DIR=gs://...)"
                      .format(args.file), file=sys.stderr)
                return 2
            set_base_output_dir(job, args.base_output_dir)
    findings = check_job(job, args.region)
    if args.base_image:
        findings += check_pairing(job, args.base_image)
    return _report(args.file, findings, job, args.write)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jobspec",
                                     description=__doc__.split("\n\n")[1])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate a job file")
    check.add_argument("file")
    check.add_argument("--image", help="image URI to put into the job before checking")
    check.add_argument("--region", help="region the job is submitted to (for the warning)")
    check.add_argument("--base-image", help="the image's base (make passes BASE_IMAGE): checks "
                       "it against the platform and tpuTfVersion")
    check.add_argument("--write", help="write the (image-filled) job here when it is valid")
    check.add_argument("--container-args", help="Vertex AI and GKE: the container's arguments "
                       "as one shell-quoted text (make passes JOB_ARGS)")
    check.add_argument("--base-output-dir", help="Vertex AI: the job's output directory "
                       "(gs://BUCKET/DIR; make passes BASE_OUTPUT_DIR), under which the "
                       "container gets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and "
                       "AIP_TENSORBOARD_LOG_DIR")
    check.add_argument("--name", help="GKE: the JobSet's metadata.name")
    build = sub.add_parser("cloudbuild", help="check what the cloudbuild JSON schema misses")
    build.add_argument("file")
    run = sub.add_parser("exec", help="run COMMAND with the words of $JOB_ARGS appended")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND")
    return parser


def job_args(text: str) -> List[str]:
    """The words of ``JOB_ARGS``: split like a POSIX shell splits words, with quotes and
    backslashes and without expansions (``$HOME`` stays as written). The one definition both
    submit paths use."""
    return shlex.split(text)


def _exec_with_job_args(argv: List[str]) -> int:
    """Legacy submit: gcloud's argv ends with ``--`` and the job's arguments, passed without
    a shell in between, so they reach the trainer exactly as ``job_args`` splits them."""
    command = argv[1:] if argv[:1] == ["--"] else argv
    try:
        words = job_args(os.environ.get("JOB_ARGS", ""))
    except ValueError as error:
        print("error: JOB_ARGS: {} ({!r})".format(error, os.environ.get("JOB_ARGS")),
              file=sys.stderr)
        return 2
    if not command:
        print("error: exec needs a command", file=sys.stderr)
        return 2
    try:
        os.execvp(command[0], command + words)
    except OSError as error:
        print("error: cannot run {}: {}".format(command[0], error.strerror), file=sys.stderr)
        return 127


def _report(path: str, findings: List[Finding], job: Any, write: Optional[str] = None) -> int:
    """Print findings one per line; on no errors, optionally write ``job`` to ``write``."""
    for finding in findings:
        print("{}: {}".format(path, finding), file=sys.stderr)
    if any(finding.level == ERROR for finding in findings):
        return 1
    if write:
        with open(write, "w") as handle:
            yaml.safe_dump(job, handle, sort_keys=False, allow_unicode=True)
    print("{}: ok{}".format(path, " (wrote {})".format(write) if write else ""))
    return 0
