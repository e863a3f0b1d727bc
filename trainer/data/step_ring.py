"""A ring of step buffers in shared memory, into which the data workers decode each image
straight into its final row, so that the trainer's side hands whole steps over without
touching an image (``trainer.data.stream``).

The ring has ``slots`` slots, each a mixing group's ``group`` step buffers of ``rows`` images
(uint8, 3 x size x size) and their labels (int64). It is allocated once per start of the
workers, before they are forked, with torch's shared storage: under the ``file_descriptor``
strategy (torch's default on Linux) its file in ``/dev/shm`` is unlinked as soon as it is
made, so nothing is left there whatever ends the process (kill -9 included); the workers
inherit the mapping.

The stream's groups are numbered from the start of the workers; group ``g`` lives in slot
``g % slots``. A slot is free for group ``g`` once every batch handed out of group
``g - slots`` is gone (``free_for``): a worker waits for that (``claim``) on a doorbell of
its own, a ``multiprocessing.Semaphore`` created before the fork that the trainer's side
rings after each change, never by polling. Nothing a worker holds can block the trainer's
side (a ``multiprocessing.Condition`` can: its ``notify`` waits for a sleeper that may have
been killed). Batches are handed
out as tensors with storages of their own over the ring's memory (``torch.frombuffer`` on a
numpy view), so any view or alias a consumer makes keeps that storage, and the view,
alive; a ``weakref.finalize`` on each view counts the group's releases (``Lease``).

A consumer that holds more batches than the ring has room for (a script that keeps a whole
epoch) never deadlocks: before it waits for group ``g``'s units it says so (``want``), and a
worker whose slot for ``g`` is not free then builds the unit in memory of its own, as before
the ring (``claim`` returns False), which the trainer's side copies into place.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import weakref
from typing import Set, Tuple

import numpy
import torch

# How long a worker waiting for a slot sleeps between checks that its parent still lives
# (a worker orphaned by a kill -9 of the trainer must not wait for ever).
PARENT_CHECK_S = 5.0
CHANNELS = 3


def _shared_bytes(count: int) -> torch.Tensor:
    """``count`` bytes of shared memory as a uint8 tensor, its pages untouched (unlike
    ``share_memory_`` of a fresh tensor, which copies)."""
    untyped = getattr(torch, "UntypedStorage", None)
    if untyped is not None and hasattr(untyped, "_new_shared"):
        storage = untyped._new_shared(count)
    else:  # torch 1.11
        storage = torch.ByteStorage._new_shared(count)
    return torch.empty(0, dtype=torch.uint8).set_(storage)


class StepRing:
    """``slots`` x ``group`` step buffers of ``rows`` images of ``size`` px, shared with the
    ``workers`` forked after it was made."""

    def __init__(self, slots: int, group: int, rows: int, size: int, workers: int) -> None:
        self.slots, self.group, self.rows, self.size = slots, group, rows, size
        image = CHANNELS * size * size
        count = slots * group * rows
        # The 64-bit words first (aligned), then the images; the words reinterpreted by
        # numpy (torch 1.11's ``view(dtype)`` cannot change the element size).
        memory = _shared_bytes(8 * (slots + 1 + count) + count * image)
        words = memory.numpy()[:8 * (slots + 1 + count)].view(numpy.int64)
        # Written by the consumer only, read by the workers (aligned 64-bit words):
        # free_for[s], the group slot s may hold now, and wanted, the group the consumer
        # waits for.
        self.counters = words[:slots + 1]
        self.counters[:slots] = range(slots)
        self.counters[slots] = -1
        self.labels = torch.from_numpy(words[slots + 1:]).view(slots, group, rows)
        self.images = memory[8 * (slots + 1 + count):].view(slots, group, rows, CHANNELS, size,
                                                            size)
        # One doorbell per worker, rung by the consumer after each change of the counters:
        # nothing a worker holds can block the consumer (a worker may die at any moment).
        self.doorbells = [multiprocessing.Semaphore(0) for _ in range(max(1, workers))]
        self.parent = os.getpid()
        self._images_np = self.images.numpy()
        self._labels_np = self.labels.numpy()
        self._done: Set[int] = set()  # groups released before their slot's turn came
        self._lock = threading.RLock()

    @property
    def nbytes(self) -> int:
        return self.slots * self.group * self.rows * (CHANNELS * self.size ** 2 + 8)

    # The workers' side.

    def claim(self, group: int, worker: int) -> bool:
        """Wait until group ``group``'s slot is free (True) or the consumer waits for that
        group while its slot is held (False: build it elsewhere); ``worker``: the caller's
        doorbell. Its tokens are taken before each look at the counters (an atomic operation
        each), so a change made before a token was posted is seen and none is missed."""
        slot, doorbell = group % self.slots, self.doorbells[worker]
        while True:
            while doorbell.acquire(False):
                pass
            if self.counters[slot] >= group:
                return True
            if self.counters[self.slots] >= group:
                return False
            if not doorbell.acquire(timeout=PARENT_CHECK_S) and self.parent not in (
                    os.getppid(), os.getpid()):  # orphaned (or a thread of the consumer)
                return False

    def destination(self, group: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Group ``group``'s slot as (images, labels), its step buffers end to end."""
        slot = group % self.slots
        return (self.images[slot].view((self.group * self.rows,) + self.images.shape[3:]),
                self.labels[slot].view(-1))

    # The consumer's side.

    def want(self, group: int) -> None:
        """The consumer is about to wait for group ``group``'s units."""
        self.counters[self.slots] = group
        self._ring()

    def _ring(self) -> None:
        for doorbell in self.doorbells:
            if doorbell.get_value() < 1:  # one token wakes it: no more pile up
                doorbell.release()

    def lease(self, group: int) -> "Lease":
        """Group ``group``'s hold on its slot, held once by the caller (``release`` it)."""
        return Lease(self, group)

    def batch(self, lease: "Lease", block: int, rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The first ``rows`` rows of step buffer ``block`` of ``lease``'s group's slot, as
        tensors whose storages are their own: the slot stays held while any view of either
        lives."""
        slot = lease.group % self.slots
        tensors = []
        for ring, dtype in ((self._images_np, torch.uint8), (self._labels_np, torch.int64)):
            owner = ring[slot, block, :rows]
            lease.hold()
            weakref.finalize(owner, lease.release).atexit = False  # nothing to free then
            tensors.append(torch.frombuffer(owner, dtype=dtype).view(owner.shape))
        return tensors[0], tensors[1]

    def _released(self, group: int) -> None:
        """Every hold of group ``group`` is gone: its slot is free for ``group + slots`` once
        the group before it in the slot is released too."""
        slot = group % self.slots
        with self._lock:
            self._done.add(group)
            advanced = False
            while int(self.counters[slot]) in self._done:
                self._done.discard(int(self.counters[slot]))
                self.counters[slot] += self.slots
                advanced = True
        if advanced:
            self._ring()


class Lease:
    """The holds on one group's slot: the stream's own while it hands the group out, and
    one per tensor handed out; the last release frees the slot (``StepRing._released``).
    Releases may come from any thread (a tensor's last reference may die in the device
    loader's)."""

    def __init__(self, ring: StepRing, group: int) -> None:
        self.ring, self.group = ring, group
        self.holds = 1
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self.holds += 1

    def release(self) -> None:
        with self._lock:
            self.holds -= 1
            last = self.holds == 0
        if last:
            self.ring._released(self.group)
