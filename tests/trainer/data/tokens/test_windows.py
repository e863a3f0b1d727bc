"""trainer.data.tokens.windows: a split's shards read as one stream of windows, a window
crossing from one shard into the next as if they were one array; every token once."""

import numpy
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trainer.data.tokens.windows import TokenWindows
from trainer.errors import DataError


def test_windows_hold_every_token_once():
    tokens = numpy.arange(103, dtype=numpy.uint16)
    windows = TokenWindows(tokens, 10, "train")
    assert len(windows) == 10  # (103 - 1) // 10: the last 2 tokens too few for a window
    inputs = numpy.concatenate([windows[i][0].numpy() for i in range(len(windows))])
    labels = numpy.concatenate([windows[i][1].numpy() for i in range(len(windows))])
    assert inputs.tolist() == list(range(100)) and labels.tolist() == list(range(1, 101))


@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6), seq_len=st.integers(1, 12))
@example(sizes=[7, 0, 13, 5], seq_len=4)  # an empty shard between, windows across each cut
def test_shards_read_as_the_one_array_they_make(sizes, seq_len):
    whole = numpy.arange(sum(sizes), dtype=numpy.uint32) * 7
    parts = numpy.split(whole, numpy.cumsum(sizes)[:-1])
    if len(whole) <= seq_len:
        with pytest.raises(DataError, match="not one window of --seq_len"):
            TokenWindows(parts, seq_len, "train")
        return
    expected, found = TokenWindows(whole, seq_len, "one"), TokenWindows(parts, seq_len, "parts")
    assert len(found) == len(expected) == (len(whole) - 1) // seq_len
    for index in range(len(expected)):
        for want, got in zip(expected[index], found[index]):
            assert want.tolist() == got.tolist() and got.dtype == want.dtype
