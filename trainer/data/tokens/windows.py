"""A split's tokens as a map-style Dataset of next-token pairs (``trainer.lm``): item ``i`` is
tokens ``i L .. i L + L - 1`` and, as its labels, the same shifted by one. Windows do not
overlap, so an epoch (every item once, in ``DatasetSource``'s order, over any number of
hosts) trains on every token once; the last ``(n - 1) % L`` tokens, too few for a window,
are left out."""

from __future__ import annotations

from typing import Tuple

import numpy
import torch
from torch.utils.data import Dataset

from trainer.errors import DataError


class TokenWindows(Dataset):
    def __init__(self, tokens: numpy.ndarray, seq_len: int, name: str) -> None:
        self.tokens, self.seq_len = tokens, seq_len
        self.windows = max(0, (len(tokens) - 1) // seq_len)
        if not self.windows:
            raise DataError("{} holds {} tokens: not one window of --seq_len={} + 1".format(
                name, len(tokens), seq_len), "give it more text, or a shorter --seq_len")

    def __len__(self) -> int:
        return self.windows

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, torch.Tensor]:
        start = index * self.seq_len
        window = torch.from_numpy(self.tokens[start:start + self.seq_len + 1].astype(
            numpy.int64))
        return window[:-1], window[1:]
