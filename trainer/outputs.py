"""What a run writes to its job dir: ``metrics.jsonl`` (one line per log step and per epoch),
TensorBoard event files (tensorboardX: it never imports TensorFlow), checkpoints (see
``checkpoints``), the final ``model.pt``, ``summary.json``, and the hypertune metric.

Layout with ``--job_dir DIR`` (local or gs://): ``DIR/metrics.jsonl``, ``DIR/summary.json``,
``DIR/model.pt``, ``DIR/checkpoints/``, ``DIR/tensorboard/``, ``DIR/compile-cache/`` (see
``compile_cache``). Without it, Vertex AI's ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` (with
``compile-cache/`` inside) and ``AIP_TENSORBOARD_LOG_DIR`` are used.

A hyperparameter-tuning trial (``task.trial`` in ``TF_CONFIG`` or ``CLUSTER_SPEC``) writes
under ``DIR/TRIAL/``: the platform passes every trial the same ``--job-dir`` and its
documentation tells trainers to append the trial id, so that trials neither overwrite nor
resume from each other (Vertex's ``AIP_*`` dirs are per trial already). On a training platform
(``TF_CONFIG`` or ``CLUSTER_SPEC`` set) a run with neither is refused: it would leave no model
and restart at step 0 after every preemption.

For gs:// the metrics file and event files are kept in a local working folder and uploaded
whole (atomically) at every ``flush()``: per epoch, at checkpoints and at the end. Those of an
epoch's end and of a checkpoint run in the background (``flush(background=True)``,
``staged_upload``): the loop waits only for a local copy of the files that changed, and the
upload (a request per file, each worth a step or more of a slice's time) runs in the checkpoint
writer's thread, before the checkpoint it goes with; the last flush, and the one before a
SIGTERM exit, wait for it.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, Mapping, Optional

import torch

from trainer import scratch
from trainer.checkpoint_writer import BackgroundWriter
from trainer.checkpoints import save_state, size_of
from trainer.errors import EX_USAGE, StorageError, TrainerError
from trainer.restart import resume_command
from trainer.storage import Directory, open_dir

log = logging.getLogger("trainer")

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
MODEL = "model.pt"
STOP = "stop"  # the kind of the metrics line a stop leaves (``RunOutputs.record``)


@dataclass(frozen=True)
class OutputPaths:
    """Where each kind of output goes; None means "not written"."""

    model_dir: Optional[str] = None
    checkpoint_dir: Optional[str] = None
    tensorboard_dir: Optional[str] = None
    compile_cache_dir: Optional[str] = None  # the default of --compile_cache
    # What resumes the run once a signal stopped it (restart.resume_command): None where a
    # training platform restarts it. Not a place: left out of comparisons.
    resume: Optional[str] = field(default=None, compare=False)

    @classmethod
    def resolve(cls, job_dir: Optional[str], environ: Mapping[str, str]) -> "OutputPaths":
        """The outputs of a run with ``--job_dir`` ``job_dir`` in ``environ`` (module
        docstring); a ``TrainerError`` (exit 64) on a platform with nowhere to write."""
        resume = resume_command(job_dir, environ)
        if job_dir:
            base = job_dir.rstrip("/")
            trial = trial_id(environ)
            if trial:
                base += "/" + trial
            return cls(base, base + "/checkpoints", base + "/tensorboard",
                       base + "/compile-cache", resume)
        checkpoints = environ.get("AIP_CHECKPOINT_DIR") or None
        paths = cls(environ.get("AIP_MODEL_DIR") or None, checkpoints,
                    environ.get("AIP_TENSORBOARD_LOG_DIR") or None,
                    checkpoints.rstrip("/") + "/compile-cache" if checkpoints else None)
        platform = [name for name in _PLATFORM_VARIABLES if environ.get(name)]
        if platform and paths.model_dir is None and paths.checkpoint_dir is None:
            raise TrainerError(
                "{} is set (a training platform) but there is no --job_dir and no "
                "AIP_MODEL_DIR/AIP_CHECKPOINT_DIR: no model would be kept, and every restart "
                "would begin at step 0".format(platform[0]),
                "pass --job_dir=gs://BUCKET/DIR (AI Platform: --job-dir), or set the Vertex AI "
                "job's baseOutputDirectory.outputUriPrefix", EX_USAGE)
        return replace(paths, resume=resume)


# Set by the training platforms: legacy AI Platform and Vertex AI.
_PLATFORM_VARIABLES = ("TF_CONFIG", "CLUSTER_SPEC")
_TRIAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def trial_id(environ: Mapping[str, str]) -> Optional[str]:
    """The hyperparameter-tuning trial this replica runs (``task.trial`` of ``TF_CONFIG`` or
    ``CLUSTER_SPEC``), or None outside tuning. A trial id that is not a plain name is a
    ``TrainerError``: it becomes a folder name."""
    for name in _PLATFORM_VARIABLES:
        try:
            task = json.loads(environ.get(name) or "{}").get("task") or {}
            trial = task.get("trial")
        except (ValueError, AttributeError):  # malformed: the launcher reports it
            continue
        if trial in (None, ""):
            continue
        text = str(trial)
        if isinstance(trial, bool) or not _TRIAL.fullmatch(text):
            raise TrainerError("{}'s task.trial {!r} is not a trial id".format(name, trial),
                               "a tuning trial's id is a number such as \"3\"", EX_USAGE)
        return text
    return None


class RunOutputs:
    """Writes metrics, event files, the model and the summary; ``resume_step`` drops metric
    lines logged after the checkpoint a resumed run restarts from. ``writes``: False for
    every process of a slice but one, which then writes and reports nothing. ``uploads``:
    the background writer that runs its uploads to gs://, shared with the run's checkpoints
    so that one thing is written at a time, in order (default: one of its own)."""

    def __init__(self, paths: OutputPaths, resume_step: int = 0,
                 hypertune_tag: str = "accuracy", writes: bool = True,
                 uploads: Optional[BackgroundWriter] = None) -> None:
        self.writes = writes
        self.steps_past_resume = 0  # set from the metrics (``_start_metrics``)
        self.stops = 0
        paths = paths if writes else OutputPaths()
        self.paths = paths
        self.hypertune_tag = hypertune_tag
        self._work = scratch.folder("outputs")
        self._writer = None
        self._tensorboard_local: Optional[str] = None
        self._uploads = uploads or BackgroundWriter()
        self._uploads_made = itertools.count()
        self._copied: Dict[str, int] = {}  # what staged_upload copied: path -> size
        try:
            self._start(paths, resume_step)
        except BaseException:
            self.release()
            raise
        self._hypertune = None

    def _start(self, paths: OutputPaths, resume_step: int) -> None:
        self.model_dir = open_dir(paths.model_dir) if paths.model_dir else None
        self._metrics_path = self._start_metrics(resume_step)
        self._tensorboard_dir = open_dir(paths.tensorboard_dir) if paths.tensorboard_dir else None
        if self._tensorboard_dir is not None:
            from tensorboardX import SummaryWriter

            local = self._tensorboard_dir.staging_path("", os.path.join(self._work,
                                                                         "tensorboard"))
            try:
                # Events after the resume point, in earlier files, are hidden as stale.
                self._writer = SummaryWriter(local, purge_step=resume_step + 1)
            except OSError as error:
                raise StorageError("cannot write TensorBoard files to {}: {}".format(
                    local, error.strerror), "check the job dir: tensorboard/ must be a folder")
            self._tensorboard_local = local

    def _start_metrics(self, resume_step: int) -> Optional[str]:
        if self.model_dir is None:
            return None
        path = self.model_dir.staging_path(METRICS, self._work)
        in_place = path == self.model_dir.join(METRICS)  # a local job dir: append in place
        try:
            previous = self.model_dir.read_bytes(METRICS).decode().splitlines()
        except FileNotFoundError:  # unreadable is a StorageError: never silently replaced
            previous = []
        # Lines after the step this run resumes from were logged by a replica that died
        # after them; a run with no checkpoint (resume_step 0) drops all of them too.
        kept = [line for line in previous if _step_of(line) is not None
                and _step_of(line) <= resume_step]
        # The steps a process trained past this checkpoint before it ended, as far as its
        # lines say (every --log_steps): this run trains them again (``job_totals``).
        self.steps_past_resume = max([0] + [_step_of(line) - resume_step for line in previous
                                            if (_step_of(line) or 0) > resume_step])
        self.stops = sum(_kind_of(line) == STOP for line in kept)
        if in_place and kept == previous:
            _append(path, "")  # appending continues the file as it is; fail now, not later
            return path
        content = "".join(line + "\n" for line in kept).encode()
        if in_place:
            self.model_dir.write_bytes(METRICS, content)
        else:
            with open(path, "wb") as handle:
                handle.write(content)
        return path

    @property
    def tensorboard_folder(self) -> Optional[str]:
        """The local folder TensorBoard files are written to before ``flush`` makes them
        durable (the job dir's own folder when it is local); None when none are written."""
        return self._tensorboard_local if self._writer is not None else None

    def record(self, kind: str, values: Dict[str, Any], step: int) -> None:
        """One metrics line ({"kind", "step", ...values}) and TensorBoard scalars. Kind
        ``STOP``: the job was stopped at ``step`` (counted in ``stops``)."""
        self.stops += kind == STOP
        if self._metrics_path is not None:
            line = json.dumps(dict({"kind": kind, "step": step}, **values), sort_keys=True)
            _append(self._metrics_path, line + "\n")
        if self._writer is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar("{}/{}".format(kind, name), value, step)

    def report_hypertune(self, value: float, step: int, tag: str = "") -> None:
        """Report the tuning metric (under ``tag``, default ``hypertune_tag``) the way AI
        Platform / Vertex hyperparameter tuning reads it (cloudml-hypertune appends to
        ``$CLOUD_ML_HP_METRIC_FILE``)."""
        if not self.writes:
            return
        if self._hypertune is None:
            import hypertune

            self._hypertune = hypertune.HyperTune()
        self._hypertune.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=tag or self.hypertune_tag, metric_value=value,
            global_step=step)

    def flush(self, background: bool = False) -> None:
        """Make everything written so far durable in the job dir (for gs://, the files that
        changed since the last flush are uploaded): when this returns, or, ``background``,
        soon: the upload of local copies runs in the uploader's thread, and while an upload
        is going already this does nothing (the next flush takes these changes too). An
        upload's error is raised by the next flush or checkpoint."""
        if background:
            if self._uploads.busy():
                return
            upload = self.staged_upload()
            if upload is not None:
                self._uploads.submit(upload, "metrics and TensorBoard files")
            return
        self._uploads.wait()
        upload = self.staged_upload()
        if upload is not None:
            upload()

    def staged_upload(self) -> Optional[Callable[[], None]]:
        """Flush the event writer and copy the files that changed since the last call (sizes
        differ: the files are append-only or written once) into a folder of their own; returns
        the upload of those copies, which deletes them after (for the uploader's thread: a
        checkpoint's write runs it first, so the metrics up to a checkpoint land before it);
        None when there is nothing to upload (a local job dir: the files are in place)."""
        if self._writer is not None:
            self._writer.flush()
        staged = [(local, directory, name) for local, directory, name in (
            (self._tensorboard_local, self._tensorboard_dir, ""),
            (self._metrics_path, self.model_dir, METRICS))
            if local is not None and local.startswith(os.path.join(self._work, ""))]
        if not staged:
            return None
        folder = os.path.join(self._work, "upload-{}".format(next(self._uploads_made)))
        copies = [(_copy_changed(local, os.path.join(folder, str(number)), self._copied),
                   directory, name) for number, (local, directory, name) in enumerate(staged)]

        def upload() -> None:
            try:
                for copy, directory, name in copies:
                    directory.sync_up(copy, name)
            finally:
                shutil.rmtree(folder, ignore_errors=True)

        return upload

    def save_model(self, state_dict: Dict[str, torch.Tensor], name: str = MODEL) -> None:
        """``state_dict`` written as ``name`` (``model.pt``) in the model dir (through a
        temporary file and a rename)."""
        if self.model_dir is not None:
            self.model_dir.write_file(name, lambda stream: save_state(state_dict, stream),
                                      needs=size_of(state_dict))

    def write_summary(self, summary: Dict[str, Any]) -> None:
        if self.model_dir is not None:
            self.model_dir.write_bytes(SUMMARY, (json.dumps(summary, indent=2, sort_keys=True)
                                                 + "\n").encode())

    def release(self) -> None:
        """Close the event writer and delete the local working folder, without flushing
        (what a failed run does after its last flush); an upload in flight is let finish,
        its error only logged. Safe to call twice."""
        problem = self._uploads.drain()
        if problem:
            log.warning("%s", problem)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        scratch.release(self._work)

    def __enter__(self) -> "RunOutputs":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def _append(path: str, text: str) -> None:
    try:
        with open(path, "a") as handle:
            handle.write(text)
    except OSError as error:
        raise StorageError("cannot write {}: {}".format(path, error.strerror),
                           "the job dir's {} must be a writable file".format(METRICS))


def _copy_changed(source: str, target: str, copied: Dict[str, int]) -> str:
    """Copy ``source`` (a file, or a folder's files, to the same relative paths under
    ``target``) where its size differs from what ``copied`` (path -> size, updated) says was
    copied before; returns ``target``, which then holds the changed files only."""
    if os.path.isfile(source):
        size = os.path.getsize(source)
        if copied.get(source) != size:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(source, target)
            copied[source] = size
        return target
    os.makedirs(target, exist_ok=True)
    for folder, _, names in os.walk(source):
        for name in names:
            path = os.path.join(folder, name)
            _copy_changed(path, os.path.join(target, os.path.relpath(path, source)), copied)
    return target


def _kind_of(line: str) -> Optional[str]:
    try:
        return json.loads(line).get("kind")
    except (ValueError, AttributeError):
        return None


def _step_of(line: str) -> Optional[int]:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def checkpoint_directory(paths: OutputPaths) -> Optional[Directory]:
    return open_dir(paths.checkpoint_dir) if paths.checkpoint_dir else None
