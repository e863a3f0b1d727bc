"""How many threads the trainer process's own torch pools get, decided once at start.

torch gives every process an intra-op pool of one thread per core (and an inter-op pool as
large). In the trainer process nothing needs them: on a TPU (or GPU) host the model's compute
runs on the device, and on the XLA CPU device it runs in XLA's own thread pool, which torch's
settings do not touch. What the trainer process does on the host itself, on every platform,
is hand batches over (the step buffers its data workers decoded into, each image straight
into its row: the step is together when they are done; only without workers does it put a
step together itself) and launch steps. torch split even the small copies that
handing over took before the step ring over its pool: on a 16-vCPU host its 16 threads
then kept 15 vCPUs spinning to pass on 540 images/s, while the data
workers (one process each, on the cores the trainer leaves them) waited for CPU.
``docs/trainers.md`` ("Host threads") gives the rule's measurements.

The rule (``choose``), the same on every platform and host size: **one intra-op and one
inter-op thread** in the trainer process. The data workers are single-threaded already
(torch's DataLoader sets each worker's pool to one thread), so every process of a run uses one
core, and the default worker count (``trainer.data.workers``: one per core this process may
use but its own, however many: no ceiling; fewer only where memory cannot hold them) fills the
host without oversubscribing it.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch

log = logging.getLogger("trainer")

INTRA_OP_THREADS = 1
INTER_OP_THREADS = 1
# Where the model's compute runs, by the XLA runtime's device type (for the log).
COMPUTE = {"TPU": "on the TPU", "CPU": "in XLA's own CPU thread pool",
           "CUDA": "on the GPU", "GPU": "on the GPU"}


class HostThreads(NamedTuple):
    """The trainer process's torch pools: ``intra_op`` and ``inter_op`` threads."""

    intra_op: int
    inter_op: int


def choose(cores: int) -> HostThreads:
    """The trainer process's pools on a host with ``cores`` cores (see the module's
    docstring: one thread each, whatever the host's size)."""
    del cores  # the rule does not grow with the host: the cores are the data workers'
    return HostThreads(INTRA_OP_THREADS, INTER_OP_THREADS)


def apply(threads: HostThreads) -> HostThreads:
    """Size this process's torch pools as ``threads`` says, before any parallel work;
    returns what the pools are now (the inter-op pool cannot change once it has started:
    it keeps its size then, as ``describe`` shows)."""
    torch.set_num_threads(threads.intra_op)
    try:
        torch.set_num_interop_threads(threads.inter_op)
    except RuntimeError:  # started already (in-process callers): it stays as it is
        pass
    return HostThreads(torch.get_num_threads(), torch.get_num_interop_threads())


def describe(now: HostThreads, cores: int, default_intra_op: int, device_type: str) -> str:
    """The one log line: the pools, what torch would have used, where compute runs."""
    return ("host threads: the trainer process's torch pools at {} intra-op and {} inter-op "
            "(torch's default here: {} of {} cores); data workers 1 each; the model's compute "
            "runs {}".format(now.intra_op, now.inter_op, default_intra_op, cores,
                             COMPUTE.get(device_type.upper(), "on the " + device_type)))


def configure(cores: int, device_type: str) -> HostThreads:
    """``choose``, ``apply`` and log the rule for this host; returns the pools' sizes."""
    default = torch.get_num_threads()
    now = apply(choose(cores))
    log.info("%s", describe(now, cores, default, device_type))
    return now
