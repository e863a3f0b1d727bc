"""``CheckpointStore``: numbered checkpoints in a job-dir folder, written atomically, the newest
K kept, and the newest *valid* one loaded at start (a truncated or corrupt file is skipped with
a warning, and the one before it used).

Two rules keep a run's work: a checkpoint that cannot be *read* (storage unavailable or
forbidden: ``StorageError``, exit 74) stops the run instead of counting as corrupt, because
starting over at step 0 would then write over that run; and saving step N never deletes a
checkpoint of a later step, whatever happened before."""

from __future__ import annotations

import io
import logging
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from trainer.storage import Directory

_NAME = re.compile(r"^ckpt-(\d{9})\.pt$")
log = logging.getLogger("trainer.checkpoints")


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint of ``step``: only this module builds or parses it."""
    return "ckpt-{:09d}.pt".format(step)


class CheckpointStore:
    """Checkpoints ``ckpt-<step>.pt`` in ``directory``; ``keep`` newest are retained."""

    def __init__(self, directory: Directory, keep: int = 3, writes: bool = True) -> None:
        """``writes``: False for a process that only reads (one host of a slice that another
        writes for): it never touches the folder."""
        self.directory = directory
        self.keep = max(1, keep)
        if writes:
            directory.remove_stale_temporaries()

    def steps(self):
        """Steps with a checkpoint, oldest first."""
        found = (_NAME.match(name) for name in self.directory.list())
        return sorted(int(match.group(1)) for match in found if match)

    def uri(self, step: int) -> str:
        """Where the checkpoint of ``step`` is (for messages)."""
        return self.directory.join(checkpoint_name(step))

    def save(self, step: int, state: Dict[str, Any]) -> str:
        """Write ``state`` (tensors already on the CPU) as the checkpoint of ``step``,
        serialised straight to a file: no copy of it in memory (a bytes buffer held one, 205 MB
        for ResNet-50, while the write went on)."""
        name = checkpoint_name(step)
        self.directory.write_file(name, lambda stream: torch.save(state, stream))
        # Rotation among this step and earlier ones only: a later checkpoint is another
        # run's progress (or this one's, if its restore went wrong), never ours to delete.
        for old in [earlier for earlier in self.steps() if earlier <= step][:-self.keep]:
            self.directory.delete(checkpoint_name(old))
        return self.uri(step)

    def load_latest(self) -> Optional[Tuple[int, Dict[str, Any]]]:
        """The newest checkpoint that loads, as (step, state), or None when there is none.
        A file whose bytes are not a checkpoint is skipped with a warning; a file that is
        gone is skipped too; a ``StorageError`` reading one ends the run (exit 74)."""
        for step in reversed(self.steps()):
            name = checkpoint_name(step)
            try:
                data = self.directory.read_bytes(name)
            except FileNotFoundError:  # deleted since it was listed
                log.warning("skipping vanished checkpoint %s", self.directory.join(name))
                continue
            try:
                state = _load(data)
                if not isinstance(state, dict) or "step" not in state:
                    raise ValueError("not a trainer checkpoint")
                return step, state
            except Exception as error:  # corrupt bytes: fall back to the previous one
                log.warning("skipping unreadable checkpoint %s (%s: %s)",
                            self.directory.join(name), type(error).__name__, error)
        return None


def mismatch(model: torch.nn.Module, saved: Dict[str, Any]) -> Optional[str]:
    """Why the saved ``model`` state cannot be loaded into ``model`` (a short phrase naming the
    first differing parameter), or None when it fits."""
    expected = model.state_dict()
    state = saved.get("model")
    if not isinstance(state, dict):
        return "it holds no model state"
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        return "{} parameters missing (e.g. {}), {} unexpected (e.g. {})".format(
            len(missing), missing[0] if missing else "-", len(unexpected),
            unexpected[0] if unexpected else "-")
    for name, tensor in expected.items():
        value = state[name]
        if not isinstance(value, torch.Tensor) or value.shape != tensor.shape:
            return "{} has shape {}, this model needs {}".format(
                name, tuple(getattr(value, "shape", ())), tuple(tensor.shape))
    return None


def _load(data: bytes) -> Any:
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except TypeError:  # torch 1.12 has no weights_only
        return torch.load(io.BytesIO(data), map_location="cpu")


# Copies a list of tensors to the CPU, in order (``to_cpu``).
Fetch = Callable[[List[torch.Tensor]], List[torch.Tensor]]


def to_cpu(value: Any, fetch: Optional[Fetch] = None) -> Any:
    """A copy of nested state (dicts, lists, tuples of tensors) with every tensor on the CPU;
    a copy even of tensors that were there already, since a background write reads it while
    training goes on. ``fetch`` copies a list of tensors to the CPU at once (``xla.to_host``:
    one transfer for all those on the device, where one per tensor waits for each in turn);
    default: one by one."""
    tensors = [tensor for _, tensor in named_tensors(value)]
    copies = (fetch or _each_to_cpu)(tensors)
    return _rebuilt(value, iter(copies))


def _each_to_cpu(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    return [tensor.detach().to("cpu", copy=True) for tensor in tensors]


def named_tensors(value: Any, name: str = "") -> Iterator[Tuple[str, torch.Tensor]]:
    """Every tensor of nested state (dicts, lists, tuples), with its dotted path
    (``optimizer.state.0.momentum_buffer``), in the order ``_rebuilt`` puts copies back."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from named_tensors(item, "{}.{}".format(name, key) if name else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from named_tensors(item, "{}.{}".format(name, index) if name else str(index))


def _rebuilt(value: Any, copies: Iterator[torch.Tensor]) -> Any:
    """``value`` with its tensors replaced, in ``_collect``'s order, by ``copies``."""
    if isinstance(value, torch.Tensor):
        return next(copies)
    if isinstance(value, dict):
        return {key: _rebuilt(item, copies) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuilt(item, copies) for item in value)
    return value
