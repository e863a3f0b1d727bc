"""Whether ``/dev/shm`` can hold the batches the data workers hand to the trainer, checked
before the first worker starts: a DataLoader worker that runs out of shared memory dies of a
bus error ("DataLoader worker (pid N) is killed by signal: Bus error"), minutes into a run.

Docker gives a container 64 MB of ``/dev/shm`` unless ``docker run --shm-size`` says more;
ImageNet's step buffers need gigabytes (``trainer.data.plan``), so a container that is too
small stops at start with exit 78, one line and a hint naming ``--shm-size`` and the size.
``TRAINER_SHM_DIR`` (read by ``trainer.cli``; a hook for tests) checks another directory.
"""

from __future__ import annotations

import math
import os

from trainer.errors import EX_CONFIG, TrainerError

SHM_DIR = "/dev/shm"


def free_bytes(path: str) -> int:
    """Bytes an unprivileged process may still write under ``path``; -1 when there is no
    such directory (not Linux: nothing to check)."""
    try:
        stats = os.statvfs(path)
    except (OSError, AttributeError):
        return -1
    return stats.f_bavail * stats.f_frsize


def check(needed: int, workers: int, per_worker: int, path: str = "") -> None:
    """Raise a TrainerError (exit 78) when ``path`` (default ``SHM_DIR``) has less than
    ``needed`` bytes free for ``workers`` data workers that need ``per_worker`` bytes each of
    it (the rest is the trainer's share)."""
    path = path or SHM_DIR
    free = free_bytes(path)
    if not workers or free < 0 or free >= needed:
        return
    fitting = max(0, (free - (needed - workers * per_worker)) // per_worker) \
        if per_worker else 0
    fewer = ("; or lower --num_workers{}".format(
        " (up to {} fit)".format(fitting) if fitting else "; --num_workers=0 decodes in the "
        "training process and needs none") if per_worker else
        "; or lower --batch_size (the data workers' step buffers hold a few local batches, "
        "whatever their number), or --num_workers=0, which decodes in the training process "
        "and needs none")
    raise TrainerError(
        "{} has {} free; {} data worker{} {} of shared memory for the batches in "
        "flight".format(path, _mb(free), workers, " needs" if workers == 1 else "s need",
                        _mb(needed)),
        "give the container more: docker run --shm-size={}g (or mount a bigger tmpfs at "
        "{}){}".format(math.ceil(needed / 2 ** 30 * 1.1), path, fewer), EX_CONFIG)


def _mb(count: int) -> str:
    return "{:,.0f} MB".format(count / 1e6)
