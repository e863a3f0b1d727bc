"""Bring a shard set's index to the current format without converting anything again:
``python -m trainer.data.reindex --data_dir=DIR_OR_GS``.

An index of format version 1 lists each shard's name and example count, not where each
example is; the trainer reads runs of examples by their place (``trainer.data.shard_index``).
This reads every shard the old index lists once (in parallel processes, ``--workers``),
records its example table, checks its example count against the old index, and writes the new
``index.json`` last (atomically; the old one is kept as ``index.v1.json``). An index of the
current version is left as it is.

Exit codes: 0 written (or nothing to do); 64 bad option; 65 no readable index, or a shard that
does not hold what the index says; 70 a worker process died (``trainer.data.worker_pool``;
run the command again); 74 the data dir cannot be read or written.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Dict, List, Optional, Tuple

from trainer import storage
from trainer.data import worker_pool
from trainer.data.shard_index import FORMAT, INDEX_NAME, VERSION, Shard, ShardIndex
from trainer.data.workers import TOOL_WORKERS_HELP, tool_workers
from trainer.errors import EX_USAGE, DataError, TrainerError

log = logging.getLogger("trainer")
OLD_INDEX = "index.v1.json"
Task = Tuple[str, str, int]  # (data dir, shard name, examples the old index lists)


def old_index(data: bytes, where: str) -> Tuple[List[str], Dict[str, List[Tuple[str, int]]],
                                                List[str]]:
    """(classes, {split: [(shard, examples)]}, skipped) of a version-1 index; a DataError
    for anything else."""
    try:
        raw = json.loads(data.decode())
        if raw.get("format") != FORMAT or raw.get("version") != 1:
            raise ValueError("not a {} index of version 1".format(FORMAT))
        return ([str(name) for name in raw["classes"]],
                {str(split): [(str(entry["name"]), int(entry["count"])) for entry in shards]
                 for split, shards in raw["splits"].items()},
                [str(name) for name in raw.get("skipped", [])])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise DataError("{} cannot be upgraded: {}".format(where, error),
                        "point --data_dir at a folder written by python -m "
                        "trainer.data.make_shards")


def index_shard(task: Task) -> Shard:
    """The index entry of one shard, read whole; a DataError when it does not hold the
    examples the old index lists."""
    uri, name, count = task
    root = storage.open_dir(uri)
    try:
        shard = Shard.of_bytes(name, root.read_bytes(name))
    except FileNotFoundError:
        raise DataError("{} lists shard {} but there is no such file".format(
            root.join(INDEX_NAME), name), "copy every shard of the set")
    except Exception as error:  # tarfile raises several types for a file that is not a tar
        raise DataError("{} is not a readable tar shard: {}".format(root.join(name), error),
                        "write the shards again with python -m trainer.data.make_shards")
    if shard.count != count:
        raise DataError("{} holds {} examples; {} says {}".format(
            root.join(name), shard.count, root.join(INDEX_NAME), count),
            "write the shards again with python -m trainer.data.make_shards")
    return shard


def reindex(data_dir: str, workers: int = -1) -> Optional[ShardIndex]:
    """Write the current index of the shard set ``data_dir``; None when it had one."""
    root = storage.open_dir(data_dir)
    try:
        data = root.read_bytes(INDEX_NAME)
    except FileNotFoundError:
        raise DataError("{} has no {}".format(root.uri, INDEX_NAME),
                        "write shards with python -m trainer.data.make_shards")
    try:
        version = json.loads(data.decode()).get("version")
    except (ValueError, AttributeError):
        version = None  # old_index says what is wrong
    if version == VERSION:
        ShardIndex.from_json(data, root.join(INDEX_NAME))  # a broken one is still an error
        log.info("%s is of version %d already: nothing to do", root.join(INDEX_NAME), VERSION)
        return None
    classes, splits, skipped = old_index(data, root.join(INDEX_NAME))
    tasks = [(root.uri, name, count) for shards in splits.values() for name, count in shards]
    log.info("%s: reading %d shards to record where each example is", root.uri, len(tasks))
    resume = "run the same command again: the old index stays until every shard is read"
    entries = {shard.name: shard for shard in worker_pool.results(
        index_shard, tasks, tool_workers(workers), lambda task: "reading " + task[1],
        resume)}
    worker_pool.check_complete([task[1] for task in tasks], entries, resume)
    index = ShardIndex(classes, {split: [entries[name] for name, _ in shards]
                                 for split, shards in splits.items()}, skipped)
    root.write_bytes(OLD_INDEX, data)
    root.write_bytes(INDEX_NAME, index.to_json())
    log.info("wrote %s (version %d; the old one is %s)", root.join(INDEX_NAME), VERSION,
             root.join(OLD_INDEX))
    return index


def main(argv: Optional[List[str]] = None) -> int:
    from trainer.console import run_tool

    parser = argparse.ArgumentParser(prog="python -m trainer.data.reindex",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="the shard set, DIR or gs://...")
    parser.add_argument("--workers", type=int, default=-1,
                        help="reading shards: " + TOOL_WORKERS_HELP)

    def run(args: argparse.Namespace) -> None:
        if args.workers < -1:
            raise TrainerError("--workers={} is not a number of processes".format(args.workers),
                               TOOL_WORKERS_HELP, EX_USAGE)
        reindex(args.data_dir, args.workers)

    return run_tool(parser, argv, run)


if __name__ == "__main__":
    sys.exit(main())
