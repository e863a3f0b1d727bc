"""The few torch_xla calls the trainers make, written once for torch_xla 1.12 (XRT image) and
2.9 (PJRT), where some were renamed. Nothing else in ``trainer`` imports torch_xla: the step
path is decided here (``step_path``), and the device facts behind ``trainer.devices`` (how
many devices, which process of how many, the SPMD mesh and batch sharding) are read here.

Each trainer's entry module imports this module itself, before its other modules
(``trainer.startup`` says why)."""

from __future__ import annotations

import inspect
import logging
import os
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
)

import torch


class _DefaultDeviceWarning(logging.Filter):
    """Drops torch_xla's root-logger line for the device it picks where ``PJRT_DEVICE`` is
    unset (``Defaulting to PJRT_DEVICE=CPU``, ``... Setting PJRT_DEVICE=TPU``), which its
    import prints before the trainer's own first line, with no context: the trainer names
    the device it trains on itself (``trainer.fit``'s first line: "... on CPU (1 device)")."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "PJRT_DEVICE=" not in record.getMessage()


logging.getLogger().addFilter(_DefaultDeviceWarning())  # before torch_xla's import logs it

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.distributed.parallel_loader import MpDeviceLoader

from trainer.device_prefetch import LOADER_PREFETCH_BATCHES, TRANSFER_BATCHES
from trainer.errors import TrainerError

log = logging.getLogger("trainer")

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


def chip_kind(dev: torch.device) -> str:
    """The runtime's name of the device's chip (``TPU v5 lite``, ``TPU v6 lite``: what
    ``trainer.chips`` looks up); ``device_kind``'s where this torch_xla has no such name
    (1.x) or cannot give it."""
    kind_of = getattr(xm, "xla_device_kind", None)
    try:
        return str(kind_of(dev)) if kind_of is not None else device_kind(dev)
    except RuntimeError:
        return device_kind(dev)


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


def rng_state(dev: torch.device) -> int:
    """The seed ``dev``'s next random op (dropout) draws from: a host-side number that each
    traced random op advances, so saving and restoring it repeats the draws."""
    return int(xm.get_rng_state(dev))


def set_rng_state(seed: int, dev: torch.device) -> None:
    xm.set_rng_state(int(seed), dev)


def to_host(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """CPU copies of ``tensors``, in order: those on an XLA device fetched together (one
    request for all, as torch_xla's own ``xm.save`` does in 1.x and 2.x, where ``.cpu()``
    on each waits for each in turn), sharded ones put together from their shards where this
    process holds them all (``_assembled``), the others cloned."""
    split = [sharded(tensor) for tensor in tensors]
    if any(split) and process_place()[1] > 1:  # some shards are other hosts': fetch whole
        split = [False] * len(tensors)
    pieces = [tensor for tensor, apart in zip(tensors, split) if apart]
    on_device = [tensor for tensor, apart in zip(tensors, split)
                 if tensor.device.type == "xla" and not apart]
    assembled = iter(_assembled(pieces) if pieces else [])
    fetched = iter(torch_xla._XLAC._xla_get_cpu_tensors(on_device) if on_device else [])
    return [next(assembled) if apart else next(fetched) if tensor.device.type == "xla"
            else tensor.detach().clone() for tensor, apart in zip(tensors, split)]


def device_loader(batches: Iterable, dev: torch.device, path: str = LAZY,
                  sharding: Optional["BatchSharding"] = None,
                  step_path: Optional[str] = None) -> Iterable:
    """``batches`` on ``dev``, copied in the background by torch_xla's loader (host-to-device
    copies overlap compute). Lazy path: the loader also cuts the graph (one ``mark_step``)
    after every batch. Compiled path: nothing is cut, since the compiled steps leave no pending
    graph and a sync would only add host work per step; callers ``sync()`` where step closures
    must run. With ``sharding`` (SPMD), each batch is copied once, split over the devices
    along its first dimension. An exception of ``batches`` is raised here, after the batches
    before it. ``step_path``: the path the steps run on, when it is not ``path`` (a lazy loop
    that cuts its steps itself passes ``COMPILED`` as ``path``); it sets how many batches go
    per copy (``trainer.device_prefetch``: one on the compiled path, as soon as it is
    built)."""
    options: Dict[str, Any] = prefetch_options(step_path=step_path or path)
    if path == COMPILED:
        options["batches_per_execution"] = _NEVER
    if sharding is not None:
        options["input_sharding"] = sharding
    failed: List[Exception] = []
    return _raising_after(MpDeviceLoader(_ending_at_error(batches, failed), dev, **options),
                          failed)


_NEVER = 2 ** 62  # batches between the loader's syncs


def resident_batches(batches: Iterable, fixed: Sequence[torch.Tensor], dev: torch.device,
                     path: str = LAZY, sharding: Optional["BatchSharding"] = None
                     ) -> Iterator[List[torch.Tensor]]:
    """``fixed`` (the one batch every step holds: ``--fake_data``) copied to ``dev`` once,
    split over the devices like every batch under SPMD, and handed out once per item of
    ``batches`` (which sets the count, and whose items are not used): the steps then
    measure the devices, not the host's copies of the same bytes. Lazy path: the graph is
    cut before each batch, as ``device_loader`` cuts it."""
    tensors = list(fixed)
    placed = (xm.send_cpu_data_to_device(tensors, dev, sharding) if sharding is not None
              else xm.send_cpu_data_to_device(tensors, dev))
    for _ in batches:
        if path == LAZY:
            sync()
        yield placed



def prefetch_options(accepted: Optional[Sequence[str]] = None,
                     step_path: str = COMPILED) -> Dict[str, int]:
    """The device loader's queue sizes for ``step_path`` (``trainer.device_prefetch``) that
    this torch_xla's ``ParallelLoader`` takes (``accepted``: its parameter names; default:
    read from it). Both
    exist in 1.x and 2.x; should one be missing, the loader keeps its own default and the
    log says so once."""
    if accepted is None:
        from torch_xla.distributed.parallel_loader import ParallelLoader

        accepted = list(inspect.signature(ParallelLoader.__init__).parameters)
    wanted = {"loader_prefetch_size": LOADER_PREFETCH_BATCHES,
              "device_prefetch_size": TRANSFER_BATCHES[step_path]}
    missing = sorted(set(wanted) - set(accepted))
    if missing and not _said_missing:
        _said_missing.append(True)
        log.warning("this torch_xla's device loader takes no %s: it collects its default "
                    "number of batches before the first copy to the device",
                    ", ".join(missing))
    return {name: size for name, size in wanted.items() if name in accepted}


_said_missing: List[bool] = []


def _ending_at_error(batches: Iterable, failed: List[Exception]) -> Iterator:
    """``batches``, ending at an exception instead of raising it, which goes to ``failed``:
    torch_xla's loader iterates them in a thread of its own, where an exception is printed
    and taken for the end of the data (a data error ended the epoch early and the run went on:
    exit 0)."""
    try:
        yield from batches
    except Exception as error:
        failed.append(error)


def _raising_after(loaded: Iterable, failed: List[Exception]) -> Iterator:
    yield from loaded
    if failed:
        raise failed[0]


def add_step_closure(closure: Callable[..., None], args: Sequence[Any]) -> None:
    """Run ``closure(*args)`` after the current step has executed: the place for host reads
    (``.item()``), so that logging never forces an extra sync inside the step loop."""
    xm.add_step_closure(closure, args=tuple(args))


def compile_count() -> int:
    """Graphs compiled so far by this process."""
    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def compile_seconds() -> float:
    """Seconds this process has spent compiling graphs (torch_xla's ``CompileTime``
    accumulator, in nanoseconds)."""
    data = met.metric_data("CompileTime")
    return float(data[1]) / 1e9 if data else 0.0


def execute_count() -> int:
    """Graph executions on the device so far (an SPMD execution runs on every device at once
    and counts once)."""
    total = 0
    for name in ("ExecuteTime", "ExecuteReplicatedTime"):  # one device; SPMD
        data = met.metric_data(name)
        total += int(data[0]) if data else 0
    return total


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


def graph_text(tensors: Sequence[torch.Tensor]) -> str:
    """The HLO text of the graph that would compute ``tensors`` (lazy, not yet run)."""
    return torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))


def compile_traced(graph: torch.nn.Module, inputs: Sequence[torch.Tensor]
                   ) -> Callable[..., Sequence[torch.Tensor]]:
    """``graph`` (a ``make_fx`` trace over flat tensors: aten ops only, backward included)
    compiled by torch_xla for ``inputs``: a function of tensors like them that runs it as one
    device execution and returns its outputs. This is torch_xla's
    dynamo bridge, the one torch's ``openxla`` backends call, given the graph directly:
    dynamo would only trace it a second time."""
    from torch_xla._dynamo import dynamo_bridge

    return dynamo_bridge.extract_compiled_graph(graph, list(inputs))


_BARRIER: List[Any] = []


def recompute_barrier() -> Optional[Callable[[List[torch.Tensor]], List[torch.Tensor]]]:
    """A function from tensors to copies of them behind an XLA optimization barrier (what
    ``trainer.parallel.remat`` recomputes from, so that XLA cannot merge the recomputation
    into the forward pass). A torch custom op, so that ``make_fx`` records it in the compiled
    step's graph, where torch_xla runs it; None where torch has no custom ops (1.x)."""
    if not _BARRIER:
        library = getattr(torch, "library", None)
        if not hasattr(library, "custom_op"):
            return None

        @library.custom_op("tpu_trainer::recompute_barrier", mutates_args=())
        def barrier(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
            copies = [tensor.clone() for tensor in tensors]
            if copies and copies[0].device.type == "xla":
                torch_xla._XLAC._xla_optimization_barrier_(copies)
            return copies

        @barrier.register_fake
        def _(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
            return [torch.empty_like(tensor) for tensor in tensors]

        _BARRIER.append(barrier)
    return _BARRIER[0]


_SPLIT_AS: List[Any] = []


def split_as() -> Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """A function ``(new, old)``: a copy of ``new`` split over the devices exactly as ``old``
    is, whole on each where ``old`` is whole. The compiled step returns each tensor of the
    training state through it under FSDP: XLA otherwise splits a whole tensor's new value
    where its neighbours are split (GPT-2's MLP bias beside its split weight), and the step
    that gets it back compiles a second program for that layout. A torch custom op, so that
    ``make_fx`` records it; torch_xla runs it with the step's real inputs. None where torch
    has no custom ops (1.x, which has no SPMD either)."""
    if not _SPLIT_AS:
        library = getattr(torch, "library", None)
        if not hasattr(library, "custom_op"):
            return None

        @library.custom_op("tpu_trainer::split_as", mutates_args=())
        def split(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
            copy = new.clone()
            if copy.device.type == "xla":
                if sharded(old):
                    layout = torch_xla._XLAC._get_xla_op_sharding(old)
                else:
                    from torch_xla.distributed.spmd import ShardingType

                    layout = torch_xla._XLAC.OpSharding([], [], [], ShardingType.REPLICATED)
                torch_xla._XLAC._xla_mark_sharding(copy, layout)
            return copy

        @split.register_fake
        def _(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(new)

        _SPLIT_AS.append(split)
    return _SPLIT_AS[0]


FP32, BF16 = "fp32", "bf16"  # --precision
DEVICE_TYPE = "xla"  # torch's name of the device type, as autocast takes it


def mixed_precision(precision: str) -> Callable[[], Any]:
    """A factory of the context in which forward passes run for ``precision``: bf16 is
    torch's autocast for XLA devices (matrix products and convolutions in bfloat16, reductions
    and the loss in float32; the weights and their update stay float32, and bfloat16's
    exponent range needs no loss scaling). It is what ``torch_xla.amp.autocast`` does on a TPU,
    asked for directly because that wrapper ignores the CPU device. torch_xla 1.x has no XLA
    autocast: there bf16 is refused (exit 64), never silently fp32."""
    import contextlib

    if precision != BF16:
        return contextlib.nullcontext
    if not _has_xla_autocast():
        raise TrainerError("--precision=bf16 needs torch_xla 2.x (autocast on XLA devices); "
                           "this is torch_xla {}".format(torch_xla_version()),
                           "use --precision=fp32 on this image, or the pjrt image")
    _attention_under_autocast()
    return lambda: torch.autocast(DEVICE_TYPE, dtype=torch.bfloat16)


# The registration of ``_attention_in_low_precision`` (kept: torch drops a registration when
# its library is collected).
_AUTOCAST_ATTENTION: List[Any] = []


def _attention_under_autocast() -> None:
    """``scaled_dot_product_attention`` cast to autocast's dtype on XLA devices, as autocast
    casts it on every other device (CPU, CUDA, XPU, MPS: "lower_precision_fp"). torch_xla 2.9
    leaves it out of its autocast list, so that a model whose query and key leave a float32
    rotary embedding while its value is a bfloat16 projection (Hugging Face's Llama and most
    language models) fails at its first attention: "Expected query, key, and value to have the
    same dtype". Registered once, for the process; where torch cannot, nothing changes."""
    if _AUTOCAST_ATTENTION:
        return
    try:
        library = torch.library.Library("aten", "IMPL")
        library.impl("scaled_dot_product_attention", _attention_in_low_precision,
                     "AutocastXLA")
    except (AttributeError, RuntimeError, ValueError):  # no such key or op in this torch
        return
    _AUTOCAST_ATTENTION.append(library)


def _attention_in_low_precision(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                attn_mask: Optional[torch.Tensor] = None,
                                dropout_p: float = 0.0, is_causal: bool = False,
                                scale: Optional[float] = None,
                                enable_gqa: bool = False) -> torch.Tensor:
    """Autocast's kernel of the attention for XLA devices: its floating-point arguments but
    float64 (the mask's too) in autocast's dtype, then the attention with autocast off, as
    torch's own autocast kernels run the operation they cast for."""
    dtype = torch.get_autocast_dtype(DEVICE_TYPE)

    def low(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if tensor is None or not tensor.is_floating_point() or tensor.dtype == torch.float64:
            return tensor
        return tensor.to(dtype)

    with torch.autocast(DEVICE_TYPE, enabled=False):
        return torch.ops.aten.scaled_dot_product_attention(
            low(query), low(key), low(value), low(attn_mask), dropout_p, is_causal,
            scale=scale, enable_gqa=enable_gqa)


def _has_xla_autocast() -> bool:
    try:
        torch.autocast("xla", dtype=torch.bfloat16)
    except (RuntimeError, ValueError, AttributeError, TypeError):
        return False
    return True


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


def use_persistent_cache(local_folder: str, readonly: bool = False) -> bool:
    """Compile through a persistent cache in ``local_folder`` (``readonly``: load entries,
    never add any); False (and nothing changes) when this process has compiled already,
    since the cache must come first."""
    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return False
    _runtime().initialize_cache(local_folder, readonly=readonly)
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


def device_type() -> str:
    """The runtime's device type (``TPU``, ``CPU``, ``CUDA``...), without starting it."""
    return _device_type()


def _device_type() -> str:
    runtime = _runtime()
    kind = runtime.device_type() if runtime is not None and hasattr(runtime, "device_type") \
        else None
    return str(kind or os.environ.get("PJRT_DEVICE", "") or "XRT").upper()


# --- devices and processes (read by ``trainer.devices``, which decides what to use) ---------

def spmd_available() -> bool:
    """Whether this torch_xla can run one process over several devices (SPMD: 2.x)."""
    runtime = _runtime()
    if runtime is None or not hasattr(runtime, "use_spmd"):
        return False
    try:
        import torch_xla.distributed.spmd  # noqa: F401
    except ImportError:
        return False
    return True


def device_counts() -> Tuple[int, int]:
    """(devices of the whole job, devices of this host) as the runtime sees them. torch_xla
    1.x counts the devices of the process's own TPU or CPU (a TPU node's 8 cores)."""
    runtime = _runtime()
    if runtime is not None and hasattr(runtime, "global_runtime_device_count"):
        return (runtime.global_runtime_device_count(),
                runtime.addressable_runtime_device_count())
    found = len(xm.get_xla_supported_devices() or [None])
    return found, found


def process_place() -> Tuple[int, int]:
    """(this process's index, the number of processes) of the job: one per host under SPMD."""
    runtime = _runtime()
    if runtime is not None and hasattr(runtime, "process_count"):
        return runtime.process_index(), runtime.process_count()
    return 0, 1


def collectives_need_lockstep() -> bool:
    """Whether an SPMD program must finish each step before the next is dispatched. On the
    XLA CPU device (torch_xla 2.9) every execution of a compiled program joins its
    all-reduce under the same key (run id 0), so with several steps in flight one device can
    join the next step's all-reduce while the others are in this one's, and the process
    aborts ("Expected 4 threads to join the rendezvous", after 10 s): seen here with 125
    compiled steps of batch 16 per device and nothing else waiting between them. TPU
    collectives do not rendezvous on host threads."""
    return _device_type() == "CPU"


def spmd_enabled() -> bool:
    runtime = _runtime()
    return bool(runtime is not None and hasattr(runtime, "is_spmd") and runtime.is_spmd())


def enable_spmd() -> None:
    """Make this process one SPMD program over every device (before any tensor is on them)."""
    _runtime().use_spmd()


class BatchSharding:
    """How the device loader places a batch under SPMD: every tensor split along its first
    (batch) dimension over every device, whatever its rank (images and labels alike), the
    rest replicated. ``host_part``: each process supplies only its own devices' part of the
    global batch (a multi-host slice), which the runtime joins into one tensor.
    Duck-typed as torch_xla's ``ShardingSpec``, which fits tensors of one rank only.

    ``fsdp`` > 1 (``--sharding=fsdp``): the mesh is ``data`` x ``fsdp`` (``trainer.parallel``),
    the batch's rows split over both axes, and ``shard`` splits a parameter over ``fsdp``."""

    def __init__(self, devices: int, host_part: bool, fsdp: int = 1) -> None:
        import numpy
        import torch_xla.distributed.spmd as xs

        self._xs = xs
        if fsdp > 1:
            self.mesh = xs.Mesh(numpy.arange(devices), (devices // fsdp, fsdp),
                                ("data", "fsdp"))
            self._rows: Any = ("data", "fsdp")
        else:
            self.mesh = xs.Mesh(numpy.arange(devices), (devices,), ("data",))
            self._rows = "data"
        self.minibatch = host_part
        self._by_rank: Dict[int, Any] = {}

    def spec(self, rank: int) -> Any:
        if rank not in self._by_rank:
            self._by_rank[rank] = self._xs.ShardingSpec(
                self.mesh, (self._rows,) + (None,) * (rank - 1), minibatch=self.minibatch)
        return self._by_rank[rank]

    def xla_spec(self, tensor: torch.Tensor) -> Any:
        """The spec torch_xla's transfer applies to ``tensor`` (None for a scalar: copied
        whole to every device)."""
        return self.spec(tensor.dim()).xla_spec(tensor) if tensor.dim() else None

    def to_device(self, tensor: torch.Tensor, dev: torch.device) -> torch.Tensor:
        """One host tensor onto ``dev``, sharded like a batch."""
        return torch_xla._XLAC._xla_tensors_from_aten([tensor], [str(dev)],
                                                     [self.xla_spec(tensor)])[0]

    def shard(self, tensor: torch.Tensor, dim: int) -> None:
        """Split ``tensor`` (on the device) along ``dim`` over the ``fsdp`` axis, whole over
        ``data``; where it is (a parameter stays the same object)."""
        self._xs.mark_sharding(tensor, self.mesh,
                               tuple("fsdp" if at == dim else None for at in range(tensor.dim())))


def sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` (on an XLA device) is split over devices, not whole on each (never
    on torch_xla 1.x, which has no SPMD)."""
    spec_of = getattr(torch_xla._XLAC, "_get_xla_sharding_spec", None)
    if spec_of is None or tensor.device.type != "xla":
        return False
    return spec_of(tensor).startswith("{devices=")


def shard_like(tensor: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``tensor`` split over the devices as ``reference`` is (optimizer state made or restored
    for a sharded parameter: whole on each device, it would take the memory sharding saves,
    and the compiled step would compile again for it); as it is where ``reference`` is
    whole. Returns ``tensor``."""
    if sharded(reference) and tensor.shape == reference.shape:
        torch_xla._XLAC._xla_mark_sharding(tensor,
                                           torch_xla._XLAC._get_xla_op_sharding(reference))
    return tensor


def device_bytes(tensors: Sequence[torch.Tensor]) -> int:
    """The bytes ``tensors`` take on this process's first device: a sharded tensor's shard
    there, a whole one whole."""
    total = 0
    for tensor in tensors:
        elements = tensor.numel()
        if sharded(tensor):  # from where the first shard lies: no shard's data is fetched
            _, region = torch_xla._XLAC._get_local_shard_replica_and_indices([tensor])[0][0]
            elements = 1
            for part, size in zip(region, tensor.shape):
                elements *= len(range(*part.indices(size)))
        total += elements * tensor.element_size()
    return total


# A region of a tensor: (start, stop) along each of its dimensions.
Region = Tuple[Tuple[int, int], ...]


def local_regions(tensors: List[torch.Tensor]) -> List[List[Tuple[int, Region, torch.Tensor]]]:
    """For each sharded tensor, CPU copies of the regions this process holds, each region once
    in the whole job: the shards of replica 0 (the other replicas hold the same values), the
    padding of a last shard cut off; each as (the ordinal of the device it is on, its region,
    its values)."""
    # torch_xla's shard reader does not wait for the step computing them ("Trying to access
    # XLA data ... while an async operation is in flight", seen here 1 run in 5): wait first.
    xm.wait_device_ops()
    shards = torch_xla._XLAC._get_local_shards(tensors)
    places = torch_xla._XLAC._get_local_shard_replica_and_indices(tensors)
    found = []
    for tensor, pieces, where in zip(tensors, shards, places):
        regions = []
        for (piece, device), (replica, index) in zip(pieces, where):
            if replica != 0:
                continue
            bounds = tuple(part.indices(size)[:2] for part, size in zip(index, tensor.shape))
            shape = tuple(stop - start for start, stop in bounds)
            if tuple(piece.shape) != shape:  # padded: a copy, since torch.save writes a
                # view's whole storage
                piece = piece[tuple(slice(0, size) for size in shape)].clone()
            regions.append((int(device.rsplit(":", 1)[-1]), bounds, piece))
        found.append(regions)
    return found


def _assembled(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """Whole CPU copies of sharded ``tensors`` whose shards are all on this process's devices,
    put together from the shards on the host: fetching them whole instead compiles a gather
    per tensor, at every checkpoint again (torch_xla 2.9)."""
    wholes = []
    for tensor, regions in zip(tensors, local_regions(tensors)):
        whole = torch.empty(tuple(tensor.shape), dtype=tensor.dtype)
        for _, bounds, piece in regions:
            whole[tuple(slice(start, stop) for start, stop in bounds)] = piece
        wholes.append(whole)
    return wholes


# --- the profiler (``trainer.profiling`` decides when) --------------------------------------

def profiler_available() -> bool:
    """Whether this torch_xla captures a profile of its own process into a folder
    (``start_trace``/``stop_trace``: torch_xla 2.x). torch_xla 1.11 only serves profiles to
    a client over a port (``start_server`` + ``trace``), a capture this trainer does not
    drive."""
    import torch_xla.debug.profiler as xp

    return hasattr(xp, "start_trace") and hasattr(xp, "stop_trace")


def start_profile(folder: str) -> None:
    """Start capturing host and device activity; ``stop_profile`` writes it under
    ``folder/plugins/profile/RUN/`` (``HOST.xplane.pb``), where TensorBoard's profile
    plugin and xprof look."""
    import torch_xla.debug.profiler as xp

    xp.start_trace(folder)


def stop_profile() -> None:
    import torch_xla.debug.profiler as xp

    xp.stop_trace()


def step_annotation(step: int) -> Any:
    """The context of training step ``step`` in a profile (``StepTrace``: the profile tools
    find steps by it, and it cuts the graph at its end)."""
    import torch_xla.debug.profiler as xp

    return xp.StepTrace("train_step", step_num=step)
