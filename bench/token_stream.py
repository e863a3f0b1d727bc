"""What streaming token shards from Cloud Storage costs a host's CPU: each window one ranged
read (``shards.StreamedShard`` through ``TokenWindows``), against the same windows from the
downloaded shards' memory maps (run: make bench, or python bench/token_stream.py [--windows N]).

fake-gcs-server on loopback holds 8 shards of 1 M uint16 tokens; one process reads ``--windows``
windows of 2,048 tokens at random positions (as an epoch's order does), timed and measured by
its own CPU time (``getrusage``, the server's excluded): the CPU seconds a window costs the
reading process, from which the windows a core supplies per second follow, at any core count.
Then the latency: behind a proxy that holds each read ``--latency_ms`` (Cloud Storage's first
byte takes tens of ms), a batch of ``--rows`` windows read one after another against side by
side (``TokenWindows.__getitems__``, ``READS_AT_ONCE`` at a time), medians of 5 batches: what
one data worker supplies.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy  # noqa: E402

SHARDS, TOKENS, SEQ_LEN = 8, 1 << 20, 2048


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(windows, order) -> tuple:
    """(wall seconds, CPU seconds) of reading ``windows[i]`` for each ``i`` of ``order``."""
    started, cpu = time.perf_counter(), cpu_seconds()
    for index in order:
        windows[int(index)]
    return time.perf_counter() - started, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--latency_ms", type=float, default=30.0)
    args = parser.parse_args()
    import os
    import statistics

    import fake_gcs
    from gcs_fault_proxy import GcsFaultProxy, Rule
    from google.cloud import storage as gcs

    from trainer import storage
    from trainer.data.tokens.shards import (
        map_split,
        read_index,
        shard_name,
        stream_split,
        write_index,
        write_shard,
    )
    from trainer.data.tokens.windows import TokenWindows

    server = fake_gcs.started()
    try:
        gcs.Client(project="bench").create_bucket("tokens")
        folder = storage.open_dir("gs://tokens/shards")
        generator = numpy.random.default_rng(0)
        records = [write_shard(folder, shard_name("train", number),
                               generator.integers(0, 256, TOKENS), "bench")
                   for number in range(SHARDS)]
        write_index(folder, {"train": records, "val": []}, 257, 256, "bytes")
        index = read_index(folder)
        with tempfile.TemporaryDirectory() as cache:
            mapped = TokenWindows(map_split(folder, index, "train", cache), SEQ_LEN, "mapped")
            streamed = TokenWindows(stream_split(folder, index, "train", folder.sizes()),
                                    SEQ_LEN, "streamed")
            order = generator.permutation(len(mapped))
            order = numpy.resize(order, args.windows)
            timed(streamed, order[:20])  # the client, its session and first connection
            ways = {"mapped": timed(mapped, order), "streamed": timed(streamed, order)}
            proxy = GcsFaultProxy(server.url).start()
            os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
            proxy.add(Rule("/shards/train-", methods=("GET",),
                           delay_s=args.latency_ms / 1000))
            behind = storage.open_dir("gs://tokens/shards")  # a client of the proxy's
            slow = TokenWindows(stream_split(behind, index, "train", behind.sizes()), SEQ_LEN,
                                "behind the proxy")
            batches = [order[at:at + args.rows].tolist() for at in range(0, 5 * args.rows,
                                                                          args.rows)]
            latency = {"one after another": [], "side by side": []}
            for batch in batches:
                started = time.perf_counter()
                [slow[index] for index in batch]
                latency["one after another"].append(time.perf_counter() - started)
                started = time.perf_counter()
                slow.__getitems__(batch)
                latency["side by side"].append(time.perf_counter() - started)
            proxy.stop()
    finally:
        server.stop()
    for way, (wall, cpu) in ways.items():
        print("{:8}: {:,} windows of {:,} tokens, {:.3f} ms CPU a window ({:,.0f} windows a "
              "second a core), {:.3f} ms wall a window on loopback".format(
                  way, args.windows, SEQ_LEN, cpu / args.windows * 1e3,
                  args.windows / cpu if cpu else float("inf"), wall / args.windows * 1e3))
    medians = {way: statistics.median(times) for way, times in latency.items()}
    for way, seconds in medians.items():
        print("a batch of {} windows, {:.0f} ms a read, {}: {:.2f} s ({:.0f} windows a "
              "second a worker)".format(args.rows, args.latency_ms, way, seconds,
                                        args.rows / seconds))
    print("side by side / one after another: {:.2f}x the time".format(
        medians["side by side"] / medians["one after another"]))


if __name__ == "__main__":
    main()
