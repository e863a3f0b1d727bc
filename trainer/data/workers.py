"""How many processes decode images when the user does not say: one for every core this
process may use but the trainer's own, and fewer only where the memory this process may use
cannot hold them.

- Cores and memory: what ``trainer.host_resources`` reads (the affinity within a cgroup's
  CPU quota; a cgroup's memory limit, else ``MemTotal``): a worker past the CPU quota is
  throttled and slows the trainer's own step launches with it.
- Each worker takes its own process memory and the encoded runs it holds; the step ring they
  decode into and the trainer's own take the same for any number of them
  (``trainer.data.plan.data_memory`` states the arithmetic).

A host of 180 vCPUs and 720 GB (a v6e host with 8 chips) gets 179 workers: memory would hold
thousands. ``python -m trainer.data.plan --host_cores=180 --host_memory_gb=720
--devices_per_host=8`` prints the choice and what it takes for any host.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Tuple

from trainer.data.plan import IMAGENET_EXAMPLE_BYTES, SliceShape, data_memory
from trainer.host_resources import Host, gigabytes, host_cores, this_host

log = logging.getLogger("trainer")
TRAINER_PROCESSES = 1  # the trainer's own process: it hands batches over and launches steps


@dataclass(frozen=True)
class WorkerChoice:
    """The default worker count for a host and what decided it."""

    workers: int
    host: Host
    by_memory: Optional[int]  # the most workers the memory holds (None: memory unknown)
    fixed: int  # bytes the trainer and the step ring take, whatever the workers' number
    per_worker: int  # bytes each worker adds

    @property
    def memory_bound(self) -> bool:
        return self.by_memory is not None and self.by_memory < self.host.cores - 1

    @property
    def memory_holds(self) -> Optional[int]:
        """The most workers the memory holds where that is fewer than the cores would run
        (the input-bound advice must not ask for more); None where memory is no limit."""
        return max(0, self.by_memory or 0) if self.memory_bound else None

    @property
    def total(self) -> int:
        """Bytes the trainer, the ring and ``workers`` workers take on the host (estimate)."""
        return self.fixed + self.workers * self.per_worker

    def line(self) -> str:
        """The start-up line."""
        limit = ("memory holds only {}: {} each beside {} for the trainer, the step ring and "
                 "the runs in flight".format(
            max(0, self.by_memory or 0), gigabytes(self.per_worker), gigabytes(self.fixed))
            if self.memory_bound else "one per core but the trainer's{}".format(
                "; memory would hold {:,}".format(self.by_memory)
                if self.by_memory is not None else ""))
        return ("data workers: {} ({}); with them the host's data and processes take about "
                "{} (estimate); the host: {}".format(
                    self.workers, limit, gigabytes(self.total), self.host.why or "{} cores".format(
                        self.host.cores)))


def auto_workers(cores: int = 0, memory: int = 0, need: Tuple[int, int] = (0, 0)) -> int:
    """Data workers for a host with ``cores`` cores (default: this one's) and ``memory`` bytes
    (0: not limited by memory) where the data takes ``need`` = (fixed, per worker) bytes:
    at least 1."""
    return choose(Host(cores or host_cores(), memory), need).workers


def choose(host: Host, need: Tuple[int, int]) -> WorkerChoice:
    """``host``'s cores less the trainer's, fewer where ``need`` = (fixed bytes, bytes per
    worker) leaves memory for fewer; at least 1 (a host too small for one is told so by the
    ``/dev/shm`` check and the start-up line, and ``--num_workers=0`` needs no ring)."""
    fixed, per_worker = need
    by_memory = None
    if host.memory and per_worker:
        by_memory = max(0, (host.memory - fixed) // per_worker)
    workers = host.cores - TRAINER_PROCESSES
    if by_memory is not None:
        workers = min(workers, by_memory)
    return WorkerChoice(max(1, workers), host, by_memory, fixed, per_worker)


def worker_choice(shape: Optional[SliceShape]) -> WorkerChoice:
    """``choose`` for this host and the data of ``shape`` (an ImageNet-like shard set's;
    None: no memory need known)."""
    need = data_memory(shape, IMAGENET_EXAMPLE_BYTES) if shape is not None else (0, 0)
    return choose(this_host(), need)


def resolve_workers(requested: int, shape: Optional[SliceShape] = None,
                    announce: bool = True) -> int:
    """``--num_workers``: -1 chooses (``choose`` for this host and the data of ``shape``, an
    ImageNet-like shard set's; logged unless not ``announce``), 0 decodes in the training
    process."""
    if requested >= 0:
        return requested
    choice = worker_choice(shape)
    if announce:
        log.info("%s", choice.line())
    return choice.workers


# The data tools' --workers means what the trainers' --num_workers means: -1 (their default)
# chooses, 0 runs no worker process (the work is done in the tool's own process).
TOOL_WORKERS_HELP = ("worker processes: -1 (default) one per host core; 0 none, the work runs "
                     "in this process; N: N processes")


def tool_workers(requested: int) -> int:
    """A data tool's ``--workers`` (``make_shards``, ``reindex``): -1 one process per host core
    (no training process shares the host), 0 none (``worker_pool`` then runs every task in
    this process), else that many."""
    return host_cores() if requested < 0 else requested
