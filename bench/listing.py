"""Memory per listed object of a ``gs://`` class-folder tree (run: make bench, or python
bench/listing.py [--objects N] [--rounds N]).

fake-gcs-server holds ``--objects`` empty objects named like ImageNet's files
(``train/n01440764/n01440764_000123.JPEG``, 1,000 per class); its list responses carry the
full metadata of every object, as Cloud Storage's do. Each measurement is a whole process that
lists ``gs://BUCKET/imagenet/train`` once, after a warm-up listing, in one of two ways:

- before: what ``GcsDirectory.walk`` did until issue 32, ``list(client.list_blobs(...))`` (a
  ``Blob`` per object kept to the end), then the names;
- after: ``GcsDirectory.walk`` today (``trainer.gcs_listing``: only names leave each page).

Reported (medians of ``--rounds`` paired runs): the memory held per listed object once the
listing is done (Python's traced allocations, ``tracemalloc``; and the growth of the process's
resident memory), the peak during the listing, the ratio of the held memory, and the peak
extrapolated to ImageNet's 1,331,167 files (held per object times the files, plus the peak's
part that does not grow with them: a page in flight).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

IMAGENET_FILES = 1331167
PER_CLASS = 1000


def object_names(count: int):
    return ["imagenet/train/n{0:08d}/n{0:08d}_{1:06d}.JPEG".format(number // PER_CLASS,
                                                                   number % PER_CLASS)
            for number in range(count)]


def fill(bucket, count: int) -> None:
    def upload(name: str) -> None:
        bucket.blob(name).upload_from_string(b"")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(upload, object_names(count) + ["warm/one.JPEG"]))


def measure(way: str, bucket_name: str) -> dict:
    """In a process of its own: list the tree one way; the memory it took, per object."""
    from trainer import storage

    tree = storage.open_dir("gs://{}/imagenet".format(bucket_name))
    storage.open_dir("gs://{}/warm".format(bucket_name)).walk()  # client, imports, session
    policy = storage._retry_policy()
    rss_before = _rss()
    tracemalloc.start()
    started = time.monotonic()
    if way == "before":
        # Pages of 1,000 as Cloud Storage sends them (fake-gcs-server's default is one page).
        held = list(tree.bucket.client.list_blobs(bucket_name, prefix="imagenet/train/",
                                                  page_size=1000, **policy))
        names = sorted(blob.name[len("imagenet/"):] for blob in held)
    else:
        held, names = [], tree.walk("train")
    seconds = time.monotonic() - started
    retained, peak = tracemalloc.get_traced_memory()  # the Blobs (before) and names held
    tracemalloc.stop()
    rss_growth = _rss() - rss_before
    del held
    return {"objects": len(names), "retained_per_object": retained / len(names),
            "peak_bytes": peak, "rss_per_object": rss_growth / len(names), "seconds": seconds}


def _rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def run(way: str, bucket_name: str, url: str) -> dict:
    import os

    result = subprocess.run([sys.executable, __file__, "--measure", way, bucket_name],
                            env=dict(os.environ, STORAGE_EMULATOR_HOST=url),
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    import fake_gcs
    from google.cloud import storage

    server = fake_gcs.started()
    try:
        bucket = storage.Client(project="bench").create_bucket("listing")
        started = time.monotonic()
        fill(bucket, args.objects)
        print("{} objects uploaded to fake-gcs-server in {:.0f} s".format(
            args.objects, time.monotonic() - started))
        runs = {"before": [], "after": []}
        for _ in range(args.rounds):
            for way in runs:
                runs[way].append(run(way, bucket.name, server.url))
    finally:
        server.stop()
    keys = ("retained_per_object", "peak_bytes", "rss_per_object", "seconds")
    median = {way: {key: statistics.median(run[key] for run in found) for key in keys}
              for way, found in runs.items()}
    for way in runs:
        assert all(run["objects"] == args.objects for run in runs[way]), runs[way]
        figures = median[way]
        # The peak is what the listing holds plus its largest transient (a page in flight):
        # the held part grows with the objects, the transient does not.
        transient = figures["peak_bytes"] - figures["retained_per_object"] * args.objects
        print("{:6}: {:5.0f} B held per object (traced; {:5.0f} B of RSS), peak {:.1f} MB, "
              "{:.2f} s; at ImageNet's {:,} files: {:.2f} GB".format(
                  way, figures["retained_per_object"], figures["rss_per_object"],
                  figures["peak_bytes"] / 1e6, figures["seconds"], IMAGENET_FILES,
                  (figures["retained_per_object"] * IMAGENET_FILES + transient) / 1e9))
    print("before/after: {:.1f}x the memory held per listed object (median of {} paired runs "
          "of {:,} objects)".format(median["before"]["retained_per_object"]
                                    / median["after"]["retained_per_object"], args.rounds,
                                    args.objects))


if __name__ == "__main__":
    main()
