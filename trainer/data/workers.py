"""How many processes decode images when the user does not say: the host's cores (the ones
this process may run on, which a container's CPU set limits), less one for the process that
feeds the devices, capped where more workers only add memory (each holds up to
``shard_reads.RUNS_AHEAD + 1`` local batches' encoded bytes and about 260 MB of its own; the
ring of step buffers they decode into is the same for any number: ``python -m
trainer.data.plan`` shows the figures)."""

from __future__ import annotations

import os

MAX_AUTO_WORKERS = 32


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_workers(cores: int = 0) -> int:
    """Data workers for a host with ``cores`` cores (default: this one's): at least 1."""
    return max(1, min(MAX_AUTO_WORKERS, (cores or host_cores()) - 1))


def resolve_workers(requested: int) -> int:
    """``--num_workers``: -1 chooses (``auto_workers``), 0 decodes in the training process."""
    return auto_workers() if requested < 0 else requested


# The data tools' --workers means what the trainers' --num_workers means: -1 (their default)
# chooses, 0 runs no worker process (the work is done in the tool's own process).
TOOL_WORKERS_HELP = ("worker processes: -1 (default) one per host core; 0 none, the work runs "
                     "in this process; N: N processes")


def tool_workers(requested: int) -> int:
    """A data tool's ``--workers`` (``make_shards``, ``reindex``): -1 one process per host core
    (no training process shares the host), 0 none (``worker_pool`` then runs every task in
    this process), else that many."""
    return host_cores() if requested < 0 else requested
