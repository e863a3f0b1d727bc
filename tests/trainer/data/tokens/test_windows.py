"""trainer.data.tokens.windows: a split's shards read as one stream of windows, a window
crossing from one shard into the next as if they were one array; every token once an epoch,
over the hosts of a slice and after a resume."""

import numpy
import pytest
import torch
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


@pytest.mark.parametrize("hosts", [1, 2, 4])
def test_every_token_once_an_epoch_over_the_hosts_of_a_slice_and_after_a_resume(hosts):
    """trainer.lm's data path (``DatasetSource`` over the windows, injected host indices): the
    hosts' pieces of each step's global batch, put together, hold every window of the epoch
    once (every token once, windows running across the shards' cuts); a resumed epoch gives
    the same batches from the step it resumes at."""
    from trainer.batches import HostPart
    from trainer.dataset_source import DatasetSource

    seq_len, global_batch = 8, 8
    tokens = numpy.arange(8 * 4 * 8 + 5, dtype=numpy.uint16)  # 32 windows, 4 tokens left
    windows = TokenWindows(numpy.split(tokens, [50, 51, 200]), seq_len, "train")
    steps = []
    for host in range(hosts):
        source = DatasetSource(windows, None, global_batch, global_batch, seed=7,
                               host=HostPart(host, hosts))
        batches = list(source.train_batches(2))
        resumed = list(source.train_batches(2, start_step=3))
        source.close()
        assert all(len(x) == global_batch // hosts for x, _ in batches)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(batches[3:], resumed))
        steps.append([x for x, _ in batches])
    starts = sorted(int(row[0]) for host in steps for x in host for row in x)
    assert starts == list(range(0, 32 * seq_len, seq_len))  # each window once
    for step in zip(*steps):  # each step's pieces: consecutive labels follow their inputs
        for x in step:
            assert all((row[1:] - row[:-1] == 1).all() for row in x)
