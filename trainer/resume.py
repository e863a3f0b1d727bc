"""A run's checkpoints: what one holds (model, optimizer, position in the run, running loss,
RNG, global batch), writing it, and putting a new run back where the newest one left off.

A checkpoint does not depend on the device count: parameters and optimizer state are
replicated over the devices and saved once, as on one device. The position in the data is a
step of a *global* batch, so a run resumes on another device count when its global batch is
the same (``--batch_size`` is per device: 64 on 4 devices is 256 on 1); a different global
batch is refused, since it would change both the step and the data position. On a slice only
the process that writes outputs writes checkpoints; every process reads them."""

from __future__ import annotations

import logging
from typing import Dict, List, Optional

import torch

from trainer import xla
from trainer.checkpoints import CheckpointStore, mismatch, to_cpu
from trainer.devices import ONE_DEVICE, Topology
from trainer.errors import EX_USAGE, DataError, TrainerError
from trainer.loop import LoopState
from trainer.outputs import OutputPaths, RunOutputs, checkpoint_directory
from trainer.steps import Steps

log = logging.getLogger("trainer")


class RunCheckpoints:
    """Checkpoints of the run that ``steps`` trains on ``topology`` with ``batch_size``
    examples per device; without a store (no job dir) nothing is written and nothing
    resumed."""

    def __init__(self, store: Optional[CheckpointStore], steps: Steps,
                 topology: Topology = ONE_DEVICE, batch_size: int = 0,
                 data_layout: Optional[Dict[str, int]] = None) -> None:
        self.store, self.steps = store, steps
        self.topology, self.batch_size = topology, batch_size
        self.global_batch = topology.global_batch(batch_size)
        self.data_layout = data_layout

    @classmethod
    def for_paths(cls, paths: OutputPaths, keep: int, steps: Steps,
                  topology: Topology = ONE_DEVICE, batch_size: int = 0,
                  data_layout: Optional[Dict[str, int]] = None) -> "RunCheckpoints":
        """``data_layout``: what besides the seed and the global batch the data order
        depends on (``DataSource.layout``), checked on resume."""
        directory = checkpoint_directory(paths)
        if directory is None:
            log.warning("no --job_dir (nor AIP_CHECKPOINT_DIR): checkpoints are not written")
            return cls(None, steps, topology, batch_size, data_layout)
        store = CheckpointStore(directory, keep=keep, writes=topology.writes_outputs)
        return cls(store, steps, topology, batch_size, data_layout)

    def resume(self, state: LoopState) -> float:
        """Put the model, optimizer and ``state`` back to the newest valid checkpoint, if
        any; returns the running loss total it had (0 for a fresh run). A checkpoint of another
        model stops the run (exit 65) before anything is overwritten."""
        restored = self.store.load_latest() if self.store is not None else None
        if restored is None:
            return 0.0
        step, saved = restored
        problem = mismatch(self.steps.model, saved)
        if problem is not None:  # starting over would rotate that run's checkpoints away
            raise DataError("checkpoint {} was written by another model: {}".format(
                self.store.uri(step), problem),
                "use a new --job_dir for this model, or move the old checkpoints away")
        self._check_global_batch(saved.get("global_batch"), self.store.uri(step))
        self._check_data_layout(saved.get("data_layout"), self.store.uri(step))
        self.steps.model.load_state_dict(saved["model"])
        # Moves the optimizer state to the parameters' device; the rate is set again below.
        self.steps.optimizer.load_state_dict(saved["optimizer"])
        state.epoch, state.step_in_epoch = saved["epoch"], saved["step_in_epoch"]
        state.global_step = saved["step"]
        self.steps.learning_rate.set(state.global_step)
        total = float(saved.get("loss_total", 0.0))
        state.loss_total = xla.device_number(total, self.steps.device)
        torch.set_rng_state(saved["torch_rng"])
        log.info("resumed from %s: epoch %d, step %d", self.store.uri(step), state.epoch + 1,
                 state.global_step)
        return total

    def _check_global_batch(self, saved: Optional[int], uri: str) -> None:
        """A usage error (64) unless the checkpoint's global batch is this run's (checkpoints
        from before devices were recorded have none, and were written on one device)."""
        if saved is None or not self.global_batch or saved == self.global_batch:
            return
        devices = self.topology.devices
        hint = ("--batch_size={} resumes it on {} device{} at the same step and data "
                "position".format(saved // devices, devices, "" if devices == 1 else "s")
                if saved % devices == 0 else "a global batch of {} cannot be split over {} "
                "devices".format(saved, devices))
        raise TrainerError(
            "checkpoint {} was written with a global batch of {}; this run's is {} "
            "(--batch_size={} per device x {} device{})".format(
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

    def save(self, state: LoopState, outputs: RunOutputs) -> Optional[str]:
        """Checkpoint the run at ``state`` and flush ``outputs`` with it, so the metrics up to
        this step are durable together with the checkpoint; returns where it went. Every
        process of a slice calls it at the same step; only the writer writes."""
        if self.store is None:
            return None
        xla.sync()  # cut the step graph as the loader would, so the reads below compile nothing
        if not self.topology.writes_outputs:
            return self.store.uri(state.global_step)
        steps = self.steps
        steps.learning_rate.set(state.global_step)  # the compiled path computes it in its graph
        path = self.store.save(state.global_step, {
            "model": to_cpu(steps.model.state_dict()),
            "optimizer": to_cpu(steps.optimizer.state_dict()),
            "epoch": state.epoch, "step_in_epoch": state.step_in_epoch,
            "step": state.global_step, "loss_total": _total(state),
            "global_batch": self.global_batch or None,
            "data_layout": self.data_layout,
            "torch_rng": torch.get_rng_state()})
        outputs.flush()
        log.info("checkpoint %s", path)
        return path


def _layout(layout: Dict[str, int], names: List[str]) -> str:
    return " ".join("{}={}".format(name, layout.get(name)) for name in names)


def _total(state: LoopState) -> float:
    return float(state.loss_total.item()) if state.loss_total is not None else 0.0

