"""What streaming token shards from Cloud Storage costs a host's CPU: each window one ranged
read (``shards.StreamedShard`` through ``TokenWindows``), against the same windows from the
downloaded shards' memory maps (run: make bench, or python bench/token_stream.py [--windows N]).

fake-gcs-server on loopback holds 8 shards of 1 M uint16 tokens; one process reads ``--windows``
windows of 2,048 tokens at random positions (as an epoch's order does), timed and measured by
its own CPU time (``getrusage``, the server's excluded): the CPU seconds a window costs the
reading process, from which the windows a core supplies per second follow, at any core count.
The time a read waits on the network is Cloud Storage's (tens of ms to the first byte), not
loopback's, so what a host supplies is ``workers / (rows x latency)`` batches a second: stated
in docs/benchmarks.md, not measured here.
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
    args = parser.parse_args()
    import fake_gcs
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
    finally:
        server.stop()
    for way, (wall, cpu) in ways.items():
        print("{:8}: {:,} windows of {:,} tokens, {:.3f} ms CPU a window ({:,.0f} windows a "
              "second a core), {:.3f} ms wall a window on loopback".format(
                  way, args.windows, SEQ_LEN, cpu / args.windows * 1e3,
                  args.windows / cpu if cpu else float("inf"), wall / args.windows * 1e3))


if __name__ == "__main__":
    main()
