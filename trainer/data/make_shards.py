"""Turn a class-folder tree into shuffled tar shards: ``python -m trainer.data.make_shards
--source=DIR_OR_GS --dest=DIR_OR_GS``.

The source is ``train/<class>/*`` and ``val/<class>/*`` (ImageNet's layout), local or under
``gs://``; or, with ``--val_fraction``, a tree of class folders alone (``<class>/*``), split
into train and val by a hash of each image's path (``folder_tree.split_class_folders``: the
same split on every run). The destination gets ``train-000000.tar ...``,
``val-000000.tar ...`` (each image, its label and its source, webdataset's layout:
``trainer.data.tar_members``) and, last, ``index.json`` (``trainer.data.shard_index``).
Every split is shuffled with ``--seed`` before it is cut, so a shard is a random sample of its
split; both splits share one class-to-label map.

- Each shard is written whole and atomically (a local rename; a GCS object appears only
  once uploaded), then a small ``NAME.json`` beside it records that it is done. Run the same
  command again after an interruption and it writes only the shards still missing; the
  same source and options always make the same plan, and a destination that holds another
  plan's shards is refused.
- Shards are made in parallel, one process per host core (``--workers``: -1 by default; 0
  makes them in this process, as the trainers' ``--num_workers=0``), with a progress
  line every ``--progress_seconds`` (shards and images done of all, and this run's images,
  rate and ETA). A worker process that dies (the OOM killer, a crash in a decoder) ends the
  run at once with exit 70 and one line naming the shard it was making
  (``trainer.data.worker_pool``); the same command resumes.
- Each image is stored as a JPEG or a PNG every reader decodes (``trainer.data.shard_image``):
  plain JPEGs and PNGs byte for byte (grayscale, CMYK, very large, PNG named ``.JPEG``), an
  MPO's first image, other formats converted. Its key is its place in the shard
  (``train-000012_000345``), whatever the file's name; ``KEY.json`` records the source file's
  path and format. A file that cannot be decoded is reported by name and skipped: the count
  and names are in the final line and in the index's ``skipped`` list.
- ``--max_shorter_side=N`` (opt-in; ``--max_side``, its old name, still works) stores images
  with their shorter side at most N px, scaled down (``shard_image``): the longer side stays
  in proportion, so a 4:3 image keeps 4/3 N px that way. The index records N (``max_side``),
  and another N is another plan. A trainer run whose ``--image_size`` needs more than N
  (``images.least_shorter_side``) warns at start.

Exit codes: 0 done; 64 bad option; 65 no usable images or the splits' classes differ; 70 a
worker process died (run the command again to resume); 74 the source or destination cannot be
read or written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from trainer import storage
from trainer.data import worker_pool
from trainer.data.folder_tree import Labelled, read_tree, split_class_folders
from trainer.data.shard_index import INDEX_NAME, SPLITS, Shard, ShardIndex
from trainer.data.tar_members import tar_bytes
from trainer.data.workers import TOOL_WORKERS_HELP, tool_workers
from trainer.errors import EX_USAGE, DataError, TrainerError

if TYPE_CHECKING:  # the codecs (and torch) load after the flags are checked (main)
    from trainer.data.shard_image import Stored

log = logging.getLogger("trainer")
# One shard task: (source uri, destination uri, shard name, its files, the plan's fingerprint,
# --max_side)
Task = Tuple[str, str, str, Labelled, str, int]


def plan_shards(files: Dict[str, Labelled], shard_size: int, seed: int
                ) -> List[Tuple[str, Labelled]]:
    """[(shard name, its files)] for every split: the split's files shuffled by ``seed``, cut
    into runs of ``shard_size``."""
    plan = []
    for split in SPLITS:
        order = list(files[split])
        random.Random("{}/{}".format(seed, split)).shuffle(order)
        for number, start in enumerate(range(0, len(order), shard_size)):
            plan.append(("{}-{:06d}.tar".format(split, number), order[start:start + shard_size]))
    return plan


def fingerprint(classes: List[str], plan: List[Tuple[str, Labelled]], max_side: int = 0
                ) -> str:
    """What identifies a plan: its classes, every shard's files, in order, and the largest
    shorter side it stores (``--max_side``, when set)."""
    digest = hashlib.sha256(json.dumps([classes, plan] + ([max_side] if max_side else []))
                            .encode())
    return digest.hexdigest()[:16]


def make_shard(task: Task) -> Tuple[Shard, List[str]]:
    """Write one shard and its done-marker; returns (its index entry, skipped files)."""
    source_uri, dest_uri, name, files, plan, max_side = task
    from trainer.data import shard_image  # loaded by main before the workers fork

    source, dest = storage.open_dir(source_uri), storage.open_dir(dest_uri)
    members: List[Tuple[str, bytes]] = []
    skipped = []
    for path, label in files:
        image = shard_image.stored(source.read_bytes(path), max_side)
        if image is None:
            skipped.append(path)
            continue
        members += example_members(example_key(name, len(members) // 3), image, path, label)
    data = tar_bytes(members)
    dest.write_bytes(name, data)
    shard = Shard.of_bytes(name, data)  # where each example is, for ranged reads
    dest.write_bytes(_marker(name), json.dumps(
        {"plan": plan, "count": shard.count, "skipped": skipped,
         "shard": shard.to_dict()}).encode())
    return shard, skipped


def example_key(shard: str, number: int) -> str:
    """The key of example ``number`` of ``shard``: its place, not its file's name, so that it
    is unique in the set and short whatever the source's names (``train-000012_000345``)."""
    return "{}_{:06d}".format(shard[:-len(".tar")], number)


def example_members(key: str, image: Stored, path: str, label: int
                    ) -> List[Tuple[str, bytes]]:
    """An example's members: the image, its label and, in ``KEY.json``, where it came from
    (the source file relative to the source folder, and its format)."""
    source = json.dumps({"path": path, "format": image.source_format}, ensure_ascii=False)
    return [("{}.{}".format(key, image.extension), image.data),
            (key + ".cls", str(label).encode()), (key + ".json", source.encode())]


def _marker(shard: str) -> str:
    return shard[:-len(".tar")] + ".json"


class Progress:
    """A progress line at most every ``every`` seconds, and at the end; the rate and ETA are
    this run's: a resumed run's shards done before took none of its time."""

    def __init__(self, shards: int, images_total: int, every: float) -> None:
        self.shards, self.images_total, self.every = shards, images_total, every
        self.done_shards = self.images_before = self.images_now = 0
        self.started = self.last = time.monotonic()

    def done_before(self, images: int) -> None:
        """A shard an earlier run finished."""
        self.done_shards += 1
        self.images_before += images

    def add(self, images_done: int, final: bool = False) -> None:
        """A shard this run finished."""
        self.done_shards += 1
        self.images_now += images_done
        now = time.monotonic()
        if now - self.last < self.every and not final:
            return
        self.last = now
        log.info("%s", progress_line(self.done_shards, self.shards, self.images_before,
                                     self.images_now, self.images_total, now - self.started))


def progress_line(shards_done: int, shards: int, images_before: int, images_now: int,
                  images_total: int, seconds: float) -> str:
    """``shards 9/11, images 200/264 (64 in this run), 32 images/s, ETA 0m02s``: the rate is
    this run's images over this run's ``seconds``, the ETA the images left at that rate."""
    done = images_before + images_now
    line = "shards {}/{}, images {}/{} ({} in this run), ".format(
        shards_done, shards, done, images_total, images_now)
    if images_now <= 0 or seconds <= 0:
        return line + "rate and ETA not known yet"
    rate = images_now / seconds
    return line + "{:.0f} images/s, ETA {}".format(rate, _duration((images_total - done) / rate))


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "{}h{:02d}m".format(hours, minutes) if hours else "{}m{:02d}s".format(minutes, seconds)


# The source layouts, for --help and for the hint when the source has neither.
LAYOUT = ("SOURCE holds train/<class>/<image> and val/<class>/<image> (ImageNet's layout, the "
          "same class folders in both); with --val_fraction=F, SOURCE/<class>/<image> alone, "
          "a share F of each class's images going to val (by a hash of each path: the same "
          "split on every run)")


def convert(source_uri: str, dest_uri: str, shard_size: int = 1000, seed: int = 0,
            workers: int = -1, progress_seconds: float = 10.0,
            val_fraction: Optional[float] = None, max_side: int = 0) -> ShardIndex:
    """Write the shards of ``source_uri`` into ``dest_uri`` (see the module's docstring) and
    return the index written last. ``workers`` -1: one process per host core; 0: none (all
    in this process). ``val_fraction``: the source is class folders alone, split so.
    ``max_side`` 0: images as they came, else their shorter side at most ``max_side`` px."""
    source, dest = storage.open_dir(source_uri), storage.open_dir(dest_uri)
    # Listing ImageNet on gs:// takes minutes; its own progress lines follow every 10 s.
    if val_fraction is None:
        log.info("%s: listing train/ and val/", source.uri)
        classes, files = read_tree(source, missing_hint=LAYOUT)
    else:
        log.info("%s: listing the class folders (a share of %g to val)", source.uri,
                 val_fraction)
        classes, files = split_class_folders(source, val_fraction)
    plan = plan_shards(files, shard_size, seed)
    plan_id = fingerprint(classes, plan, max_side)
    done = _done_shards(dest, plan_id)
    # What workers stopped mid-write left (a local shard is written to a temporary file first).
    dest.remove_stale_temporaries()
    tasks: List[Task] = [(source.uri, dest.uri, name, shard_files, plan_id, max_side)
                         for name, shard_files in plan if name not in done]
    total = sum(len(shard_files) for _, shard_files in plan)
    log.info("%s: %d classes, %d train and %d val images -> %d shards in %s (%d done before)",
             source.uri, len(classes), len(files["train"]), len(files["val"]), len(plan),
             dest.uri, len(done))
    progress = Progress(len(plan), total, progress_seconds)
    for shard, _ in done.values():
        progress.done_before(shard.count)
    resume = ("run the same command again to resume: it keeps the shards written and makes "
              "the rest")
    for shard, skipped in worker_pool.results(
            make_shard, tasks, tool_workers(workers), lambda task: "making " + task[2],
            resume):
        done[shard.name] = (shard, skipped)
        _report_skipped(skipped)
        progress.add(shard.count, final=len(done) == len(plan))
    worker_pool.check_complete([name for name, _ in plan], done, resume)
    splits = {split: [done[name][0] for name, _ in plan
                      if name.startswith(split + "-")] for split in SPLITS}
    skipped = sorted(path for _, skipped_files in done.values() for path in skipped_files)
    for split in SPLITS:
        if not sum(shard.count for shard in splits[split]):
            raise DataError("none of the {} images in {}/{} could be decoded".format(
                len(files[split]), source.uri, split), "check that they are image files")
    index = ShardIndex(classes, splits, skipped, max_side)
    dest.write_bytes(INDEX_NAME, index.to_json())
    log.info("wrote %s: %d train and %d val examples in %d shards; %d files skipped (cannot "
             "be decoded)%s", dest.join(INDEX_NAME), index.examples("train"),
             index.examples("val"), len(plan), len(skipped),
             ": " + ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else "")
             if skipped else "")
    return index


def _done_shards(dest: storage.Directory, plan: str) -> Dict[str, Tuple[Shard, List[str]]]:
    """{shard: (its index entry, skipped files)} of the shards a previous run of the same
    plan finished (a marker without an entry, from an older version, counts as not done);
    a DataError when ``dest`` holds shards of another plan."""
    done = {}
    for name in dest.list():
        if not (name.endswith(".json") and name != INDEX_NAME):
            continue
        try:
            marker = json.loads(dest.read_bytes(name).decode())
        except (ValueError, FileNotFoundError):
            continue  # not one of ours: the shard is simply written again
        if marker.get("plan") != plan:
            raise DataError("{} holds shards of another source or other options ({})".format(
                dest.uri, name), "write into an empty destination, or run the command again "
                "with the source and options of the interrupted run")
        if "shard" in marker:
            done[name[:-len(".json")] + ".tar"] = (Shard.from_dict(marker["shard"]),
                                                   list(marker["skipped"]))
    return done


def _report_skipped(skipped: List[str]) -> None:
    for path in skipped:
        log.warning("skipped %s: cannot be decoded as an image", path)


def main(argv: Optional[List[str]] = None) -> int:
    from trainer.console import run_tool

    parser = argparse.ArgumentParser(prog="python -m trainer.data.make_shards",
                                     description=__doc__.split("\n\n")[0],
                                     epilog="The source: " + LAYOUT + ".")
    parser.add_argument("--source", required=True,
                        help="class-folder tree, DIR or gs://... (train/ and val/; below)")
    parser.add_argument("--dest", required=True, help="where the shards go, DIR or gs://...")
    parser.add_argument("--shard_size", type=int, default=1000,
                        help="images per shard (default 1000: about 110 MB of ImageNet)")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    parser.add_argument("--workers", type=int, default=-1,
                        help="making shards: " + TOOL_WORKERS_HELP)
    parser.add_argument("--val_fraction", type=float, default=None,
                        help="for a SOURCE of class folders alone: the share of each class's "
                        "images that goes to val, between 0 and 1 (e.g. 0.05)")
    parser.add_argument("--progress_seconds", type=float, default=10.0)
    parser.add_argument("--max_shorter_side", "--max_side", dest="max_side", type=int,
                        default=0, metavar="N",
                        help="store images with their SHORTER side at most N px, scaled down, "
                        "the longer in proportion (default 0: as they came; --max_side is the "
                        "old name; docs/data.md says what it saves and costs)")

    def run(args: argparse.Namespace) -> None:
        if args.shard_size <= 0:
            raise TrainerError("--shard_size={} is not positive".format(args.shard_size),
                               "e.g. --shard_size=1000", EX_USAGE)
        if args.workers < -1:
            raise TrainerError("--workers={} is not a number of processes".format(args.workers),
                               TOOL_WORKERS_HELP, EX_USAGE)
        if args.val_fraction is not None and not 0 < args.val_fraction < 1:
            raise TrainerError("--val_fraction={} is not between 0 and 1".format(
                args.val_fraction), "e.g. --val_fraction=0.05 puts 5 % of each class in val",
                EX_USAGE)
        if args.max_side < 0:
            raise TrainerError("--max_shorter_side must be 0 (images as they came) or a side "
                               "in px, got {}".format(args.max_side),
                               "e.g. --max_shorter_side=256", EX_USAGE)
        # The image codecs (and torch) only now that the flags hold: --help and a typo answer
        # without them; loaded here, once, before the workers fork.
        from trainer.data import shard_image  # noqa: F401

        convert(args.source, args.dest, args.shard_size, args.seed, args.workers,
                args.progress_seconds, args.val_fraction, args.max_side)

    return run_tool(parser, argv, run)


if __name__ == "__main__":
    sys.exit(main())
