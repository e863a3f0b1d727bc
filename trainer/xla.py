"""The few torch_xla calls the trainers make, written once for torch_xla 1.12 (XRT image) and
2.9 (PJRT), where some were renamed. Nothing else in ``trainer`` imports torch_xla."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.distributed.parallel_loader import MpDeviceLoader


def device() -> torch.device:
    """The single XLA device this process trains on."""
    if hasattr(torch_xla, "device"):  # 2.x; xm.xla_device() is deprecated there
        return torch_xla.device()
    return xm.xla_device()


def device_kind(dev: torch.device) -> str:
    """``TPU``, ``CPU``, ``CUDA``... for the log."""
    return str(xm.xla_device_hw(dev))


def sync() -> None:
    """Cut the lazy graph here and run it (``mark_step``)."""
    if hasattr(torch_xla, "sync"):
        torch_xla.sync()
    else:
        xm.mark_step()


def wait() -> None:
    """Block until every dispatched graph has finished executing."""
    xm.wait_device_ops()


def device_loader(batches: Iterable, dev: torch.device) -> Iterable:
    """Wrap a host iterable so batches are copied to ``dev`` in the background, overlapping
    compute; the loader also cuts the graph (one ``mark_step``) after every batch."""
    return MpDeviceLoader(batches, dev)


def add_step_closure(closure: Callable[..., None], args: Sequence[Any]) -> None:
    """Run ``closure(*args)`` after the current step has executed: the place for host reads
    (``.item()``), so that logging never forces an extra sync inside the step loop."""
    xm.add_step_closure(closure, args=tuple(args))


def compile_count() -> int:
    """Graphs compiled so far by this process."""
    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def execute_count() -> int:
    """Graph executions on the device so far."""
    data = met.metric_data("ExecuteTime")
    return int(data[0]) if data else 0
