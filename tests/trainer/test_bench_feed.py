"""bench/feed.py's arithmetic, on the CPU (its stand-in mode; the GPU step is measured the
same way): what reaches the step is the training images of the epochs after the first over
their wall time, set against the supply at the same batch and against what the step alone
asks, for a step timed by itself (the GPU's) as for the stand-in."""

import importlib.util
import time

import pytest
import torch

from conftest import REPO


@pytest.fixture(scope="module")
def feed():
    spec = importlib.util.spec_from_file_location("bench_feed", str(REPO / "bench" / "feed.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def slow_source(feed, batches, batch, seconds):
    """Epochs of ``batches`` batches of ``batch`` rows, each taking at least ``seconds`` to
    arrive, and no evaluation."""
    def train(epoch):
        for _ in range(batches):
            time.sleep(seconds)
            yield torch.zeros(batch, 1), torch.zeros(batch)

    return feed.Epochs(train, lambda epoch: iter(()), lambda: None)


class TimedStep:
    """A step that measures itself, as the GPU's does (no nominal time given to the bench)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def train(self, x, y):
        started = time.perf_counter()
        time.sleep(self.seconds)
        return time.perf_counter() - started

    evaluate = train


@pytest.mark.parametrize("make_step", [lambda feed: feed.StandIn(0.03),
                                       lambda feed: TimedStep(0.03)],
                         ids=["stand-in", "self-timed"])
def test_what_reaches_the_step_is_set_against_the_supply_at_the_same_batch(feed, make_step,
                                                                            capsys):
    # A batch of 8 arrives in at least 10 ms and the step takes at least 30 ms (sleeps never
    # end early): at most 800 images/s supplied, and the step, which waits for each batch,
    # is fed at most 8 / 40 ms = 200 images/s while it alone asks at most 8 / 30 ms.
    supplied = feed.supply(slow_source(feed, 5, 8, 0.010), 3)
    assert 0 < supplied <= 800
    figures = feed.fed(slow_source(feed, 5, 8, 0.010), make_step(feed), 3)
    assert figures["images"] == 3 * 5 * 8
    assert 0 < figures["fed"] <= 200 and 0 < figures["demand"] <= 8 / 0.03 + 1e-9
    assert figures["fed"] < figures["demand"]
    line = feed.reached(figures, supplied, 8)
    assert line == ("reached the step {:.0f} images/s: {:.0%} of the supply at batch 8 ({:.0f} "
                    "images/s), {:.0%} of what the step alone asks ({:.0f} images/s)".format(
                        figures["fed"], figures["fed"] / supplied, supplied,
                        figures["fed"] / figures["demand"], figures["demand"]))
    feed.report("stream", figures, supplied, 8)
    assert line in capsys.readouterr().out


def test_the_real_stream_feeds_a_stand_in_step(feed, photo_shards):
    """The trainer's data source (no workers: the decode is in this process) under the
    stand-in: the figures come from the second epoch."""
    figures = feed.fed(feed.stream_epochs(photo_shards, 16, 0), feed.StandIn(0.001), 2)
    assert figures["images"] == 2 * (192 // 16) * 16
    assert 0 < figures["fed"] < figures["demand"] <= 16 / 0.001 + 1e-6
