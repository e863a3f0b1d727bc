"""A split's tokens as a map-style Dataset of next-token pairs (``trainer.lm``): item ``i`` is
tokens ``i L .. i L + L - 1`` and, as its labels, the same shifted by one. Windows do not
overlap, so an epoch (every item once, in ``DatasetSource``'s order, over any number of
hosts) trains on every token once; the last ``(n - 1) % L`` tokens, too few for a window,
are left out.

The tokens are one array or the split's shards in order (``shards.map_split``'s memory maps, or
``shards.stream_split``'s shards read a window at a time from Cloud Storage): one stream either
way, a window crossing from one shard into the next taking the end of the
one and the start of the other, as if they were one array."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple, Union

import numpy
import torch
from torch.utils.data import Dataset

from trainer.errors import DataError


class TokenStream:
    """Arrays of tokens read as one: ``len``, and ``take(start, count)``, a new int64 array.
    A part is anything with ``len`` whose slices are arrays (``shards.StreamedShard``)."""

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = [part for part in parts if len(part)]
        self.starts: List[int] = list(numpy.cumsum([0] + [len(part) for part in self.parts]))

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
