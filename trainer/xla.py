"""The few torch_xla calls the trainers make, written once for torch_xla 1.12 (XRT image) and
2.9 (PJRT), where some were renamed. Nothing else in ``trainer`` imports torch_xla."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Sequence, Tuple

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.distributed.parallel_loader import MpDeviceLoader

from trainer.errors import TrainerError

# How the training and evaluation steps run (``--step_mode``, reported in summary.json):
# LAZY traces every op of every step and compiles the traced graph once per shape (torch_xla
# 1.x's only way, and the reference scripts'); COMPILED traces each step once into one graph
# (training: forward, backward and update; ``graph_step``) and then just runs the compiled
# graphs, which takes the per-step tracing and hashing off the host.
LAZY, COMPILED, AUTO = "lazy", "compiled", "auto"


def device() -> torch.device:
    """The single XLA device this process trains on."""
    if hasattr(torch_xla, "device"):  # 2.x; xm.xla_device() is deprecated there
        return torch_xla.device()
    return xm.xla_device()


def device_kind(dev: torch.device) -> str:
    """``TPU``, ``CPU``, ``CUDA``... for the log."""
    return str(xm.xla_device_hw(dev))


def device_number(value: float, dev: torch.device,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``value`` as device *data* of shape (1,), so that a graph that reads it traces the same
    at every step. Not shape (): torch_xla turns 0-dim host tensors into graph constants, so
    the first step's graph would differ from the rest, or need one more graph to compile."""
    return torch.tensor([value], dtype=dtype).to(dev)


def sync() -> None:
    """Cut the lazy graph here and run it (``mark_step``)."""
    if hasattr(torch_xla, "sync"):
        torch_xla.sync()
    else:
        xm.mark_step()


def wait() -> None:
    """Block until every dispatched graph has finished executing."""
    xm.wait_device_ops()


def device_loader(batches: Iterable, dev: torch.device, path: str = LAZY) -> Iterable:
    """``batches`` on ``dev``, copied in the background by torch_xla's loader (host-to-device
    copies overlap compute). Lazy path: the loader also cuts the graph (one ``mark_step``)
    after every batch. Compiled path: nothing is cut, since the compiled steps leave no pending
    graph and a sync would only add host work per step; callers ``sync()`` where step closures
    must run."""
    if path == COMPILED:
        return MpDeviceLoader(batches, dev, batches_per_execution=_NEVER)
    return MpDeviceLoader(batches, dev)


_NEVER = 2 ** 62  # batches between the loader's syncs


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


def graph_compiler_available() -> bool:
    """Whether steps can be traced into graphs and compiled as such (``compile_traced``):
    torch's ``make_fx`` and ``torch.func``, and torch_xla's graph bridge (torch_xla >= 2.1;
    the XRT image's 1.11 has none of them)."""
    if not hasattr(torch, "func"):
        return False
    try:
        from torch_xla._dynamo import dynamo_bridge
    except ImportError:
        return False
    return hasattr(dynamo_bridge, "extract_compiled_graph")


def step_path(requested: str = AUTO) -> str:
    """The one decision of how steps run: ``compiled`` where ``graph_compiler_available()``,
    else ``lazy``; ``requested`` (``--step_mode``) may force either. Asking for ``compiled``
    where it is not available is refused (exit 64), never silently lazy."""
    if requested == LAZY:
        return LAZY
    if graph_compiler_available():
        return COMPILED
    if requested == COMPILED:
        raise TrainerError("--step_mode=compiled needs torch_xla >= 2.1 (traced step graphs); "
                           "this is torch_xla {}".format(torch_xla_version()),
                           "use --step_mode=auto (lazy here) or a torch_xla 2.x image")
    return LAZY


def compile_traced(graph: torch.nn.Module, inputs: Sequence[torch.Tensor]
                   ) -> Callable[..., Sequence[torch.Tensor]]:
    """``graph`` (a ``make_fx`` trace over flat tensors: aten ops only, backward included)
    compiled by torch_xla for ``inputs``: a function of tensors like them that runs it as one
    device execution and returns its outputs. This is torch_xla's
    dynamo bridge, the one torch's ``openxla`` backends call, given the graph directly:
    dynamo would only trace it a second time."""
    from torch_xla._dynamo import dynamo_bridge

    return dynamo_bridge.extract_compiled_graph(graph, list(inputs))


def torch_xla_version() -> str:
    return torch_xla.__version__.split("+")[0]


def runtime_name() -> str:
    """``torch_xla-<version>-<device type>``: compiled programs of one runtime are useless,
    or worse, to another, so the compile cache keeps each runtime's entries apart."""
    return "torch_xla-{}-{}".format(torch_xla_version(), _device_type())


def persistent_cache_available() -> bool:
    """Whether this torch_xla has a persistent compilation cache (2.x; not 1.x)."""
    return hasattr(_runtime(), "initialize_cache")


def loads_cached_programs() -> bool:
    """Whether the runtime can load a compiled program back from the cache: PJRT's TPU and
    GPU clients can; the CPU client of torch_xla 2.9 writes entries but cannot read them."""
    return _device_type() not in ("CPU", "")


def use_persistent_cache(local_folder: str) -> bool:
    """Compile through a persistent cache in ``local_folder``; False (and nothing changes)
    when this process has compiled already, since the cache must come first."""
    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return False
    _runtime().initialize_cache(local_folder, readonly=False)
    return True


def cache_counts() -> Tuple[int, int]:
    """(programs loaded from the persistent cache, entries that could not be loaded)."""
    return (met.counter_value("PersistentCacheHit") or 0,
            met.counter_value("PersistentCacheDeserializeFailure") or 0)


def _runtime() -> Any:
    try:
        import torch_xla.runtime as xr
    except ImportError:  # torch_xla 1.x
        return None
    return xr


def _device_type() -> str:
    runtime = _runtime()
    kind = runtime.device_type() if runtime is not None and hasattr(runtime, "device_type") \
        else None
    return str(kind or os.environ.get("PJRT_DEVICE", "") or "XRT").upper()
