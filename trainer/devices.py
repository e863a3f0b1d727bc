"""The one home of the device topology: how many devices the job trains on, this process's
place among the job's processes, who writes the outputs, how a batch is split, and how the
processes agree to stop and when to checkpoint. The loop, checkpoints and outputs ask a
``Topology``; the runtime facts behind it are read in ``trainer.xla`` and nowhere else.

Several devices are used the way pytorch/xla recommends for TPU VMs, SPMD: one process per
host runs one program over a mesh of every device of the job, each batch split over the mesh's
``data`` axis along its first dimension and the parameters replicated, and the XLA partitioner
inserts the gradient all-reduce. So the loss of a global batch is its mean over all devices'
examples, exactly as on one device, and the batch-norm statistics span the global batch too.

The rules (``choose``):

- ``--devices=auto`` (the default): every device the runtime sees (one on a laptop; every
  chip of a TPU VM or slice); on torch_xla 1.x, which has no SPMD, one, with a warning naming
  the devices left idle;
- ``--devices=1``: the single-device mode the image began with (not on a multi-host slice,
  where every host must join the one program);
- ``--devices=N``: must be what the runtime sees (a torch_xla mesh spans every device it sees;
  on the CPU device ``CPU_NUM_DEVICES`` sets how many there are).

``--batch_size`` is per device: the global batch is ``batch_size x devices``, and each host
loads only its own devices' part of it. The learning rate follows the global batch, never the
device count (``optim.peak_rate``).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch

from trainer import restart, stop_signal, xla
from trainer.batches import HostPart
from trainer.config import parse_devices
from trainer.errors import EX_USAGE, Preempted, TrainerError

log = logging.getLogger("trainer")


@dataclass(frozen=True)
class Topology:
    """Where a run trains. ``devices``: in the job's mesh, all hosts (1: one device, no
    SPMD); ``found``: what the runtime sees, all hosts; ``local_devices``: of ``devices``, on
    this host; ``process_index`` of ``process_count`` processes (one per host)."""

    devices: int = 1
    found: int = 1
    local_devices: int = 1
    process_index: int = 0
    process_count: int = 1

    @property
    def spmd(self) -> bool:
        return self.devices > 1

    @property
    def writes_outputs(self) -> bool:
        """Whether this process writes metrics, TensorBoard files, checkpoints, the model and
        the summary: exactly one process of the job does (the others hold the same replicated
        state)."""
        return self.process_index == 0

    def global_batch(self, per_device: int) -> int:
        return per_device * self.devices

    def host_part(self) -> Tuple[int, int]:
        """(part, parts): this host loads part ``part`` of every global batch cut into
        ``parts`` equal consecutive pieces, which torch_xla places on this host's own devices.
        Those need not be consecutive device ids (host 0 of a v6e 4x4 slice owns ids 0, 1, 4
        and 5), so a piece's examples may take other rows of the global batch than its part
        number says: a reordering of the step's examples, which leaves its mean loss and
        gradient as they are."""
        return self.process_index, self.process_count

    def describe(self) -> str:
        text = "{} of {} device{}".format(self.devices, self.found,
                                          "" if self.found == 1 else "s")
        if self.spmd:
            text += " (SPMD, a {}-device data mesh)".format(self.devices)
        if self.process_count > 1:
            text += ", host {} of {}".format(self.process_index + 1, self.process_count)
        return text


ONE_DEVICE = Topology()  # the single-device mode; also the default where none is given


def choose(requested: Optional[int], found: int, local: int, place: Tuple[int, int],
           spmd_available: bool) -> Topology:
    """The topology for ``--devices`` (``requested``; None: auto) where the runtime sees
    ``found`` devices in all, ``local`` on this host, and this process is ``place`` =
    (index, count). A request the runtime cannot meet is a usage error (exit 64), never a
    silent change of device count."""
    index, count = place
    if count > 1 and not spmd_available:  # torch_xla 1.x never reports several processes
        raise TrainerError("{} processes but no SPMD in this torch_xla".format(count),
                           "use a torch_xla 2.x image for multi-host slices", EX_USAGE)
    if requested is None:
        devices = found if spmd_available else 1
        if devices < found:
            log.warning("devices: torch_xla %s has no SPMD: training on 1 of %d devices, "
                        "%d idle (a torch_xla 2.x image uses all)", xla.torch_xla_version(),
                        found, found - 1)
    elif requested == 1:
        if count > 1:
            raise TrainerError("--devices=1 on a slice of {} hosts: each host would train "
                               "alone".format(count), "use --devices=auto: every host joins "
                               "one program over all {} devices".format(found), EX_USAGE)
        devices = 1
    elif not spmd_available:
        raise TrainerError("--devices={} needs SPMD, which torch_xla {} does not have".format(
            requested, xla.torch_xla_version()),
            "use --devices=1 (or auto) on this image, or a torch_xla 2.x (PJRT) image",
            EX_USAGE)
    elif requested > found:
        raise TrainerError("--devices={} but the runtime sees {} device{}".format(
            requested, found, "" if found == 1 else "s"),
            "use --devices=auto; on the CPU device CPU_NUM_DEVICES=N gives N", EX_USAGE)
    elif requested < found:
        raise TrainerError("--devices={}: a torch_xla mesh spans all {} devices the runtime "
                           "sees".format(requested, found),
                           "use --devices=auto ({}) or 1; on the CPU device, "
                           "CPU_NUM_DEVICES={} gives {}".format(found, requested, requested),
                           EX_USAGE)
    else:
        devices = requested
    return Topology(devices, found, local if devices > 1 else 1, index, count)


def detect(requested: str) -> Topology:
    """The topology of this process for ``--devices`` (text), from the runtime's own device
    and process counts; switches the runtime to SPMD when it spans several devices. Call it
    before any tensor is on the device."""
    spmd_available = xla.spmd_available()
    found, local = xla.device_counts()
    place = xla.process_place() if spmd_available else (0, 1)
    topology = choose(parse_devices(requested), found, local, place, spmd_available)
    if topology.spmd and not xla.spmd_enabled():
        xla.enable_spmd()
    elif not topology.spmd and xla.spmd_enabled():
        raise TrainerError("--devices=1 but this process already runs SPMD (XLA_USE_SPMD is "
                           "set?)", "unset XLA_USE_SPMD (the trainer turns SPMD on itself "
                           "when it uses several devices), or use --devices=auto", EX_USAGE)
    return topology


def batch_layout(batch_size: int, eval_batch_size: int, topology: Topology
                 ) -> Tuple[int, int, HostPart]:
    """(global training batch, global evaluation batch, this host's part of each) for
    per-device ``batch_size`` and ``eval_batch_size`` (0: the training batch's)."""
    return (topology.global_batch(batch_size),
            topology.global_batch(eval_batch_size or batch_size),
            HostPart(*topology.host_part()))


def batch_sharding(topology: Topology, fsdp: int = 1) -> Optional[xla.BatchSharding]:
    """How the device loader splits batches for ``topology`` (None: one device, no split);
    ``fsdp``: the mesh's ``fsdp`` axis (``trainer.parallel.mesh``), over which parameters
    may be split too."""
    if not topology.spmd:
        return None
    return xla.BatchSharding(topology.devices, host_part=topology.process_count > 1,
                             fsdp=fsdp)


class Agreed(NamedTuple):
    """What every process of the job decided at one step boundary."""

    stop: bool  # SIGTERM reached some process: checkpoint and stop
    checkpoint: bool  # --checkpoint_minutes have passed on some process's clock: checkpoint


NEITHER = Agreed(False, False)


# How long a host of a slice still waits for its next batch after a stop signal: long enough
# for a slow read to end and the hosts to stop together at the next step (checkpointed), short
# enough to leave most of a platform's grace period (Spot VMs: about 15 s; Vertex AI, GKE: 30 s
# by default) for the exit.
SLICE_INPUT_GRACE_S = 5.0


@contextlib.contextmanager
def _given_up_after(grace: float, resume: Optional[str]) -> Iterator[None]:
    try:
        with stop_signal.interruptible(grace):
            yield
    except stop_signal.Stopped:
        stop_signal.stopping()  # its exit is under way: no deadline cuts it short
        raise Preempted(
            "stopped by {} after waiting {:g} s more for the next batch: no checkpoint at this "
            "step (a slice's hosts checkpoint only a step they all reached)".format(
                stop_signal.name(), grace),
            "the data reads stalled (see the input lines above); " + restart.stop_hint(resume),
            exit_code=stop_signal.exit_code())


class BoundaryVote:
    """``decide()`` at each step boundary: whether the run stops there and whether it
    checkpoints there, the same answers on every host, so no host is left waiting in a
    collective for one that stopped, and every host cuts its graph for a checkpoint at the same
    step (hosts' clocks do not agree on when N minutes have passed; the vote does).

    One process: its own flags (``local_stop``: SIGTERM received; ``local_due``: a checkpoint
    is due by its clock), read on the host. Several (a slice): each host puts its flags on its
    devices as one number, ``stop + (devices + 1) * due`` (exact in float32 up to 4,095
    devices), the job sums them over the mesh (an all-reduce), and every host reads both
    counts back from the sum. The vote dispatched at one boundary is read at the next, so
    reading it waits only for the step before, never for the one just queued: a SIGTERM or a
    due checkpoint on any host acts on every host one step later, at the same step."""

    def __init__(self, topology: Topology, local_stop: Callable[[], bool],
                 sharding: Optional[xla.BatchSharding], dev: torch.device,
                 local_due: Callable[[], bool] = lambda: False,
                 resume: Optional[str] = None) -> None:
        self.topology, self.local_stop, self.local_due = topology, local_stop, local_due
        # What resumes the run (OutputPaths.resume; None: a platform restarts it), for the
        # hint of a stop that gave up waiting for a stalled read.
        self.resume = resume
        self.sharding, self.dev = sharding, dev
        self._pending: Optional[torch.Tensor] = None

    def decide(self) -> Agreed:
        if self.topology.process_count == 1:
            return Agreed(bool(self.local_stop()), bool(self.local_due()))
        previous, self._pending = self._pending, self.tally(self._votes())
        xla.sync()  # dispatch this boundary's vote (with the step, on the lazy path)
        return NEITHER if previous is None else self._read(previous)

    def input_wait(self) -> ContextManager[None]:
        """The context the loop waits for its next batch in, when a stop signal may come
        during a stalled read (a storage outage). One process: the signal ends the wait at
        once, and the loop stops at the step reached, checkpointed. A slice: its hosts agree
        on where they stop through this vote, which needs one more step; a host still
        waiting ``SLICE_INPUT_GRACE_S`` after the signal gives that up and stops without a
        new checkpoint (``Preempted``): every host then resumes from the newest one, and none
        wrote a step the others did not reach."""
        if self.topology.process_count == 1:
            return stop_signal.interruptible(0.0)
        return _given_up_after(SLICE_INPUT_GRACE_S, self.resume)

    def should_stop(self) -> bool:
        """``decide().stop``, for a loop that never checkpoints (evaluation)."""
        return self.decide().stop

    def settle(self) -> bool:
        """Whether to stop, read at once (start-up: no step is in flight), dropping any
        pending vote."""
        if self.topology.process_count == 1:
            return bool(self.local_stop())
        self._pending = None
        total = self.tally(self._votes())
        xla.sync()
        return self._read(total).stop

    def job_sum(self, values: Sequence[int]) -> List[int]:
        """Each of ``values`` (this process's counts, at a point every process of the job
        reaches alike: an evaluation's end) summed over the job's processes: each puts its
        count on its first device and zeros on its others, and the mesh sums them (exact in
        float32 up to 2^24; one device execution more). One process: the values as they
        are (they are the job's)."""
        if self.sharding is None or self.topology.process_count == 1:
            return [int(value) for value in values]
        sums = []
        for value in values:
            votes = torch.zeros(self.topology.local_devices)
            votes[0] = float(value)
            sums.append(self.tally(votes))
        xla.sync()
        return [int(round(float(total.item()))) for total in sums]

    def tally(self, votes: torch.Tensor) -> torch.Tensor:
        """The sum over the mesh of ``votes`` (a host tensor with one entry per device of this
        host; on one process, one per device of the job), as a replicated device scalar."""
        return self.sharding.to_device(votes, self.dev).sum()

    def _votes(self) -> torch.Tensor:
        vote = float(bool(self.local_stop())) + self._base * float(bool(self.local_due()))
        return torch.full((self.topology.local_devices,), vote)

    @property
    def _base(self) -> int:
        return self.topology.devices + 1  # more than any count of stop flags

    def _read(self, total: torch.Tensor) -> Agreed:
        stops, dues = divmod(int(round(float(total.item()))), self._base)[::-1]
        return Agreed(stops > 0, dues > 0)
