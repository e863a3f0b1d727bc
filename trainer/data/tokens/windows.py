"""A split's tokens as a map-style Dataset of next-token pairs (``trainer.lm``): item ``i`` is
tokens ``i L .. i L + L - 1`` and, as its labels, the same shifted by one. Windows do not
overlap, so an epoch (every item once, in ``DatasetSource``'s order, over any number of
hosts) trains on every token once; the last ``(n - 1) % L`` tokens, too few for a window,
are left out.

The tokens are one array or the split's shards in order (``shards.map_split``'s memory maps, or
``shards.stream_split``'s shards read a window at a time from Cloud Storage): one stream either
way, a window crossing from one shard into the next taking the end of the
one and the start of the other, as if they were one array. A batch's windows of streamed shards
are read side by side (``__getitems__``, ``READS_AT_ONCE`` at a time): each read waits on the
network, not on this process."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from torch.utils.data import Dataset

from trainer.errors import DataError

# Streamed windows read at once by a process (a data worker): each read mostly waits for Cloud
# Storage's first byte, so a batch of 128 windows at 30 ms each takes 0.5 s at 8 at once, not
# 3.8 s. google-cloud-storage's connection pool keeps 10 connections to a host: more threads
# would open and drop connections.
READS_AT_ONCE = 8


class TokenStream:
    """Arrays of tokens read as one: ``len``, and ``take(start, count)``, a new int64 array.
    A part is anything with ``len`` whose slices are arrays (``shards.StreamedShard``)."""

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = [part for part in parts if len(part)]
        self.starts: List[int] = list(numpy.cumsum([0] + [len(part) for part in self.parts]))
        # Whether a part is read where it is stored (no array in memory or mapped).
        self.streamed = any(not isinstance(part, numpy.ndarray) for part in self.parts)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def take(self, start: int, count: int) -> numpy.ndarray:
        first = int(numpy.searchsorted(self.starts, start, side="right")) - 1
        pieces, needed = [], count
        while needed:
            offset = start - self.starts[first]
            piece = self.parts[first][offset:offset + needed]
            pieces.append(piece.astype(numpy.int64))
            needed, start, first = needed - len(piece), start + len(piece), first + 1
        return pieces[0] if len(pieces) == 1 else numpy.concatenate(pieces)


class TokenWindows(Dataset):
    def __init__(self, tokens: Union[numpy.ndarray, Sequence[Any]], seq_len: int,
                 name: str) -> None:
        self.tokens = TokenStream([tokens] if isinstance(tokens, numpy.ndarray) else tokens)
        self.seq_len = seq_len
        self.windows = max(0, (len(self.tokens) - 1) // seq_len)
        if not self.windows:
            raise DataError("{} holds {} tokens: not one window of --seq_len={} + 1".format(
                name, len(self.tokens), seq_len), "give it more text, or a shorter --seq_len")

    def __len__(self) -> int:
        return self.windows

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        window = torch.from_numpy(self.tokens.take(index * self.seq_len, self.seq_len + 1))
        return window[:-1], window[1:]

    def __getitems__(self, indices: Sequence[int]) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """The windows ``indices``, in their order: read side by side where the shards are
        streamed, one after another where they are in memory or mapped."""
        if not self.tokens.streamed or len(indices) < 2:
            return [self[index] for index in indices]
        return list(_readers().map(self.__getitem__, indices))


_pool: Optional[ThreadPoolExecutor] = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _forgotten_in_child() -> None:
    """A forked data worker starts with no pool and a free lock (another thread of the parent
    may have held it at the fork)."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forgotten_in_child)


def _readers() -> ThreadPoolExecutor:
    """This process's threads for streamed reads (a forked data worker makes its own: the
    parent's threads are not in the child). Idle threads wait on a queue, using no CPU."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(READS_AT_ONCE, thread_name_prefix="token-reads")
            _pool_pid = os.getpid()
        return _pool
