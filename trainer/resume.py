"""A run's checkpoints: what one holds (model, optimizer, position in the run, running loss,
RNG, global batch), writing it, and putting a new run back where the newest one left off.

A checkpoint does not depend on the device count: parameters and optimizer state are saved
whole, as on one device, whether the devices held them whole or split them (``--sharding``);
on a slice whose hosts split them, each host writes its own regions instead
(``trainer.parallel.pieces``), which a restore puts together whole. The position in the data is a
step of a *global* batch, so a run resumes on another device count when its global batch is
the same (``--batch_size`` is per device: 64 on 4 devices is 256 on 1); a different global
batch is refused, since it would change both the step and the data position. On a slice only
the process that writes outputs writes checkpoints (or, with the state split, its piece and
the run's position); every process reads them."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Collection, Dict, List, Optional

import torch

from trainer import stop_signal, xla
from trainer.checkpoint_writer import BackgroundWriter
from trainer.checkpoints import (
    GIVEN_NON_FINITE,
    CheckpointStore,
    checkpoint_name,
    mismatch,
    to_cpu,
)
from trainer.devices import ONE_DEVICE, Topology
from trainer.divergence import check_loss, check_state
from trainer.errors import EX_USAGE, DataError, TrainerError
from trainer.job_totals import JobTotals
from trainer.loop import LoopState
from trainer.optim import check_resumable
from trainer.outputs import OutputPaths, RunOutputs, checkpoint_directory
from trainer.parallel import pieces
from trainer.steps import Steps

log = logging.getLogger("trainer")


class RunCheckpoints:
    """Checkpoints of the run that ``steps`` trains on ``topology`` with ``batch_size``
    examples per device; without a store (no job dir) nothing is written and nothing
    resumed."""

    def __init__(self, store: Optional[CheckpointStore], steps: Steps,
                 topology: Topology = ONE_DEVICE, batch_size: int = 0,
                 data_layout: Optional[Dict[str, int]] = None,
                 data_identity: Optional[Dict[str, Any]] = None,
                 given_non_finite: Collection[str] = ()) -> None:
        self.store, self.steps = store, steps
        # The model's buffers that held nan or inf before training (``divergence``): not
        # judged in a checkpoint written or read.
        self.allowed_non_finite = frozenset("model." + name for name in given_non_finite)
        if store is not None:
            store.allowed_non_finite = self.allowed_non_finite
        self.topology, self.batch_size = topology, batch_size
        self.global_batch = topology.global_batch(batch_size)
        self.data_layout = data_layout
        self.data_identity = data_identity
        # The pieces this process writes, its state split over hosts (None: one file). The
        # parameters are placed before (``place.place_model``), and stay where they are.
        split = steps is not None and any(
            xla.sharded(parameter) for parameter in steps.model.parameters())
        self.pieces = pieces.layout_for(topology.process_index, topology.process_count,
                                        topology.devices, os.environ) if split else None
        if store is not None and self.pieces is not None:
            store.hosts = self.pieces.hosts
        self.writer = BackgroundWriter()
        self.saved_step = -1  # the step of the last checkpoint handed to the writer
        self.saved_at = time.monotonic()  # when it was (or when the run started)
        self.seconds = 0.0  # spent on the loop's path: copies to the host, waits for writes
        self.resumed = False  # restored from a checkpoint
        self.restored = -1  # the step it was restored at
        self.restore_seconds = 0.0
        # The job's totals up to the checkpoint restored, and this process's own, which the
        # run sets (``fit``): each checkpoint carries their sum.
        self.job_before = JobTotals()
        self.this_process: Callable[[], JobTotals] = JobTotals

    @classmethod
    def for_paths(cls, paths: OutputPaths, keep: int, steps: Steps,
                  topology: Topology = ONE_DEVICE, batch_size: int = 0,
                  data_layout: Optional[Dict[str, int]] = None,
                  data_identity: Optional[Dict[str, Any]] = None,
                  given_non_finite: Collection[str] = ()) -> "RunCheckpoints":
        """``data_layout``: what besides the seed and the global batch the data order
        depends on (``DataSource.layout``); ``data_identity``: which examples the training
        split holds (``DataSource.identity()``); both checked on resume.
        ``given_non_finite``: ``divergence.given_non_finite`` of the model."""
        directory = checkpoint_directory(paths)
        if directory is None:
            log.warning("no --job_dir (nor AIP_CHECKPOINT_DIR): checkpoints are not written")
            store = None
        else:
            store = CheckpointStore(directory, keep=keep, writes=topology.writes_outputs)
        return cls(store, steps, topology, batch_size, data_layout, data_identity,
                   given_non_finite)

    def resume(self, state: LoopState, train_steps: int = 0) -> float:
        """Put the model, optimizer and ``state`` back to the newest valid checkpoint, if
        any; returns the running loss total it had (0 for a fresh run). A checkpoint of another
        model stops the run (exit 65) before anything is overwritten. ``train_steps``: the
        steps the run trains in all, for the log line of a run already complete."""
        started = time.perf_counter()
        restored = self.store.load_latest() if self.store is not None else None
        if restored is None:
            return 0.0
        step, saved = restored
        source = self.store.source
        problem = mismatch(self.steps.model, saved)
        if problem is not None:  # starting over would rotate that run's checkpoints away
            raise DataError("checkpoint {} was written by another model: {}".format(
                source, problem),
                "use a new --job_dir for this model, or move the old checkpoints away")
        self._check_global_batch(saved.get("global_batch"), source)
        self._check_data_layout(saved.get("data_layout"), source)
        self._check_data_identity(saved.get("data_identity"), source)
        check_resumable(self.steps.optimizer, saved["optimizer"], source)
        self.steps.model.load_state_dict(saved["model"])
        # Moves the optimizer state to the parameters' device; the rate is set again below.
        self.steps.optimizer.load_state_dict(saved["optimizer"])
        if self.steps.average is not None:
            if "ema" not in saved:
                log.info("checkpoint %s holds no average of the weights (written without "
                         "--ema_decay): the average starts from its weights",
                         source)
            self.steps.average.load_state_dict(saved.get("ema", {}))
        state.epoch, state.step_in_epoch = saved["epoch"], saved["step_in_epoch"]
        state.global_step = state.loss_finite_at = saved["step"]  # saved only when finite
        self.steps.learning_rate.set(state.global_step)
        total = float(saved.get("loss_total", 0.0))
        state.loss_total = xla.device_number(total, self.steps.device)
        torch.set_rng_state(saved["torch_rng"])
        # That step is saved already: a stop before the next one, or the epoch's end a stop
        # at its last step left to do, writes nothing (it rewrote the same state, 205 MB for
        # ResNet-50, inside the grace window).
        self.saved_step = state.global_step
        self.job_before = JobTotals.from_checkpoint(saved.get("job_totals"))
        self.resumed, self.restore_seconds = True, time.perf_counter() - started
        self.restored = step
        if train_steps and state.global_step >= train_steps:
            log.info("resumed from %s: the run is complete (step %d of %d); the final model "
                     "is evaluated and written, and the run ends", source,
                     state.global_step, train_steps)
        else:
            log.info("resumed from %s: epoch %d, step %d", source,
                     state.epoch + 1, state.global_step)
        return total

    def check_same_start(self, step: int, job_sum: Callable[[List[int]], List[int]]) -> None:
        """On a slice, a usage error (64) on every host unless every host starts at ``step``,
        this host's (the restored checkpoint's, 0 for none): a host that read other
        checkpoints (a local job dir is each host's own folder) would train from other
        weights and another data position, and the hosts' steps would not meet. ``job_sum``:
        ``BoundaryVote.job_sum``, each value summed over the hosts in float32, exact below
        2^24: the step goes as four bytes, whose sums stay exact up to 65,793 hosts. Every
        host reaches the same verdict: the second sum counts the hosts whose step is the
        hosts' mean, all of them exactly when the steps agree."""
        hosts = self.topology.process_count
        if hosts == 1:
            return
        parts = [(step >> shift) & 0xFF for shift in (0, 8, 16, 24)]
        agrees = job_sum(parts) == [hosts * part for part in parts]
        if job_sum([int(agrees)])[0] == hosts:
            return
        raise TrainerError(
            "the hosts of this slice do not start from the same checkpoint: this host "
            "(process {} of {}) starts from {}, and their steps differ".format(
                self.topology.process_index, hosts, "step {} ({})".format(
                    step, self.store.source) if step else "none (step 0)"),
            "give the job a --job_dir every host sees as one folder (gs://BUCKET/..., or a "
            "mount all hosts share): a local folder is each host's own", EX_USAGE)

    def _check_global_batch(self, saved: Optional[int], uri: str) -> None:
        """A usage error (64) unless the checkpoint's global batch is this run's (checkpoints
        from before devices were recorded have none, and were written on one device)."""
        if saved is None or not self.global_batch or saved == self.global_batch:
            return
        devices = self.topology.devices
        hint = ("--batch_size={} resumes it on {} device{} at the same step and data "
                "position (--batch_size x --grad_accum_steps, where it accumulates)".format(
                    saved // devices, devices, "" if devices == 1 else "s")
                if saved % devices == 0 else "a global batch of {} cannot be split over {} "
                "devices".format(saved, devices))
        raise TrainerError(
            "checkpoint {} was written with a global batch of {}; this run's is {} "
            "({} examples per device and step x {} device{})".format(
                uri, saved, self.global_batch, self.batch_size, devices,
                "" if devices == 1 else "s"),
            hint + "; or start over with a new --job_dir", EX_USAGE)

    def _check_data_layout(self, saved: Optional[Dict[str, int]], uri: str) -> None:
        """A usage error (64) when the data order of the checkpoint's run depended on a
        setting (a shard set's ``--seed`` and block size) that this run sets otherwise: the
        same step would be other examples."""
        if not saved or not self.data_layout or saved == self.data_layout:
            return
        changed = sorted(name for name in set(saved) | set(self.data_layout)
                         if saved.get(name) != self.data_layout.get(name))
        raise TrainerError(
            "checkpoint {} read its data with {}; this run with {}".format(
                uri, _layout(saved, changed), _layout(self.data_layout, changed)),
            "the data order depends on them: {} resumes at the same data position (a "
            "setting that is no flag came from the version that wrote the checkpoint); or "
            "start over with a new --job_dir".format(_layout(saved, changed)), EX_USAGE)

    def _check_data_identity(self, saved: Optional[Dict[str, Any]], uri: str) -> None:
        """A data error (65) when the checkpoint's run trained on other examples than this
        run's data holds (a shard set re-made, another folder): resuming would train some
        examples twice and others never, silently. Checkpoints without an identity (older
        ones, sources with none) are not checked."""
        if not saved or not self.data_identity or saved == self.data_identity:
            return
        raise DataError(
            "checkpoint {} was trained on {}; --data_dir holds {}".format(
                uri, _identity(saved), _identity(self.data_identity)),
            "resume with the --data_dir the run started with (the same files), or "
            "start over with a new --job_dir")

    def save(self, state: LoopState, outputs: RunOutputs, wait: bool = False
             ) -> Optional[str]:
        """Checkpoint the run at ``state``; returns where it goes. The loop waits only for the
        state to reach host memory (and for the write before, if it is still going): the
        write itself runs in the background (``checkpoint_writer``), unless ``wait`` (SIGTERM:
        the run stops once it is durable). ``outputs`` are uploaded first by the same write (its
        uploads share the writer: ``fit``), so the metrics up to this step are durable before
        the checkpoint is. Every process of a slice calls it at the same step; only
        the writer writes. A step saved already (or restored from) is not written again:
        this waits for its write, when ``wait``, and returns where it is. Its ``job_totals``
        then stay those of its writing (the state is the same; only this process's time since
        is missing: an evaluation cut short by a stop, counted nowhere, as after a kill):
        rewriting the whole state for them would cost a stop's grace (205 MB for ResNet-50)."""
        if self.store is None:
            return None
        if self.saved_step == state.global_step:
            if wait:
                self.finish()
            restored = self.resumed and self.store.source and state.global_step == self.restored
            return self.store.source if restored else self.store.uri(state.global_step)
        with stop_signal.saving():  # a stop's deadline waits for it (``stop_signal``)
            return self._save_now(state, outputs, wait)

    def _save_now(self, state: LoopState, outputs: RunOutputs, wait: bool) -> str:
        """``save`` of a step not saved yet."""
        started = time.perf_counter()
        xla.sync()  # cut the step graph as the loader would, so the reads below compile nothing
        # Every process reads the same replicated loss: a diverged run stops on all of them.
        total = _total(state)
        check_loss(state, total, state.global_step)
        # Parameters split over the devices of several hosts (--sharding=fsdp on a slice):
        # each host writes the regions its own devices hold, and none gathers the rest.
        if self.topology.writes_outputs or self.pieces is not None:
            uri = self._hand_over(state, outputs, total, self.pieces, wait)
        else:
            uri = self.store.uri(state.global_step)
        self.saved_step, self.saved_at = state.global_step, time.monotonic()
        self.seconds += time.perf_counter() - started
        return uri

    def _hand_over(self, state: LoopState, outputs: RunOutputs, total: float,
                   layout: Optional[pieces.PieceLayout], wait: bool) -> str:
        """Copy the state at ``state`` to the host and hand its write to the background
        writer: one file (``layout`` None), or this process's pieces of it. Returns where it
        goes."""
        steps = self.steps
        steps.learning_rate.set(state.global_step)  # the compiled path computes it in-graph
        tensors = {"model": steps.model.state_dict(), "optimizer": steps.optimizer.state_dict()}
        if steps.average is not None:  # --ema_decay's averages (``weight_average``)
            tensors["ema"] = steps.average.state_dict()
        position = {
            "epoch": state.epoch, "step_in_epoch": state.step_in_epoch,
            "step": state.global_step, "loss_total": total,
            "global_batch": self.global_batch or None,
            "data_layout": self.data_layout,
            "data_identity": self.data_identity,
            "torch_rng": torch.get_rng_state(),
            GIVEN_NON_FINITE: sorted(self.allowed_non_finite),
            "job_totals": self.job_totals().as_dict()}
        if layout is None:
            # The model's and the optimizer's tensors reach the host in one transfer.
            snapshot = to_cpu(tensors, xla.to_host)
            snapshot.update(position)
            written: Dict[int, Dict[str, Any]] = {}
        else:
            written = pieces.take(tensors, layout, xla.sharded, xla.local_regions,
                                  xla.to_host, position)
        uri = self.store.uri(state.global_step)
        # The metrics up to this step land before the checkpoint does: same thread, first.
        upload = outputs.staged_upload() if self.topology.writes_outputs else None
        step = state.global_step  # the thread must not read ``state``: training goes on

        def write() -> None:
            if upload is not None:
                upload()
            if layout is None:
                check_state(snapshot, step, self.allowed_non_finite)
                self._write(step, snapshot)
                return
            for piece in written.values():
                check_state(pieces.checked_tensors(piece), step, self.allowed_non_finite)
            for host, piece in written.items():
                log.info("checkpoint piece %s", self.store.save_piece(step, host, piece))

        self.writer.submit(write, "checkpoint " + uri)
        if wait:
            self.writer.wait()
        return uri

    def name(self, step: int) -> Optional[str]:
        """The file name of the checkpoint of ``step`` (of its pieces, a pattern), None
        without checkpoints."""
        if self.store is None:
            return None
        if self.pieces is not None:
            return pieces.pieces_pattern(step, self.pieces.hosts)
        return checkpoint_name(step)

    def keep_also(self, step: int) -> None:
        """Keep the checkpoint of ``step`` beside the newest ``--keep_checkpoints`` (the best
        evaluation's: ``--keep_best``); the one kept before goes with the rotation."""
        if self.store is not None:
            self.store.kept = step

    def job_totals(self) -> JobTotals:
        """The job's totals now: the restored checkpoint's plus this process's."""
        return self.job_before.plus(self.this_process())

    def clock_due(self, minutes: float) -> Callable[[], bool]:
        """This process's own view of ``--checkpoint_minutes``: whether ``minutes`` have
        passed since its last checkpoint (or its start). Never, for 0 or with no job dir.
        Hosts' clocks disagree, so the loop acts on the processes' vote, not on this."""
        if not minutes or self.store is None:
            return lambda: False
        return lambda: time.monotonic() - self.saved_at >= minutes * 60

    def save_final(self, state: LoopState, outputs: RunOutputs) -> Optional[str]:
        """The checkpoint of ``state``, durable when this returns (SIGTERM): the one already
        saved (or restored from) at this step once its write has finished, else a new one
        written now."""
        stop_signal.stopping()  # no deadline cuts this write short (``stop_signal``)
        return self.save(state, outputs, wait=True)

    def finish(self) -> None:
        """Wait for the write in flight; its error, if it failed, is raised here."""
        started = time.perf_counter()
        self.writer.wait()
        self.seconds += time.perf_counter() - started

    def abandon(self) -> None:
        """For a run ending on another error: let the write in flight finish (a kill during it
        would cost the checkpoint, never the one before), and only warn if it failed."""
        problem = self.writer.drain()
        if problem:
            log.warning("%s", problem)

    def _write(self, step: int, snapshot: Dict[str, Any]) -> None:
        log.info("checkpoint %s", self.store.save(step, snapshot))


def _layout(layout: Dict[str, int], names: List[str]) -> str:
    return " ".join("{}={}".format(name, layout.get(name)) for name in names)


def _identity(identity: Dict[str, Any]) -> str:
    where = ("{} shards".format(identity["shards"]) if "shards" in identity
             else "class-folder files")
    return "{} training examples in {} (digest {})".format(
        identity.get("examples"), where, identity.get("digest"))


def _total(state: LoopState) -> float:
    return float(state.loss_total.item()) if state.loss_total is not None else 0.0

