"""The ImageNet input pipeline on real photographs (run: make bench, or python bench/data.py
[--images-per-class N] [--rounds N] [--no-end-to-end]).

The photographs are ``tests/photos.py``'s set (scikit-image's sample photos, cropped and saved
as ImageNet-sized JPEGs, with its quirks), ``--images-per-class`` train images per class.

1. Decode + augment, images/s on one core: ours (``trainer.data.images.train_image``: reduced
   JPEG draft or torchvision's decode into a tensor, crop and resize in one resample by
   torch's uint8 kernel) against the reference pipeline
   (torchvision: PIL decode + ``RandomResizedCrop(224)`` + flip + ``ToTensor`` +
   ``Normalize``), the same JPEG bytes from memory, one thread each, rounds interleaved; the
   ratio of the medians (goal >= 2); and how much of ours is the full-size decode alone.
2. Shards read from fake-gcs-server against the same shards on local disk: MB/s and images/s
   of fetching and unpacking every train shard (no decode) through the trainer's reader; the
   ratio (goal >= 0.8); and the fetch and the unpacking apart.
3. Host-to-device bytes per image: a batch of ours (uint8) against the float32 batch the
   reference pipeline makes (goal: 4x fewer).
4. End to end, ResNet-18 at 64 px, batch 16: steady examples/s from the shards with the
   default data workers against the same run on fake data (the device-only rate): the
   pipeline's efficiency (goal >= 0.95). On this CPU device the decode workers share the two
   cores with the device, which a TPU host does not.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402

import photos  # noqa: E402
from trainer.data import images  # noqa: E402
from trainer.data.make_shards import convert  # noqa: E402
from trainer.data.shard_source import ShardSource  # noqa: E402

SIZE = 224


def reference_transform() -> Callable:
    from torchvision import transforms

    return transforms.Compose([
        transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(images.MEAN, images.STD)])


def decode_rates(jpegs: List[bytes], rounds: int) -> Dict[str, float]:
    """Median images/s of each pipeline over ``rounds`` interleaved passes over ``jpegs``."""
    from PIL import Image

    transform = reference_transform()
    draws = random.Random(0)

    def ours(data: bytes) -> torch.Tensor:
        return images.train_image(data, SIZE, draws)

    def reference(data: bytes) -> torch.Tensor:
        # torchvision's ImageFolder loader (pil_loader), then the transform.
        return transform(Image.open(io.BytesIO(data)).convert("RGB"))

    rates: Dict[str, List[float]] = {"ours": [], "reference": []}
    for _ in range(rounds):
        for name, pipeline in (("ours", ours), ("reference", reference)):
            start = time.perf_counter()
            for data in jpegs:
                pipeline(data)
            rates[name].append(len(jpegs) / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def full_decode_ms(jpegs: List[bytes], rounds: int) -> float:
    """Median ms per image of decoding each JPEG at full size to RGB, nothing else: the
    part of both pipelines that a reduced decode cannot remove when the crop is small."""
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        for data in jpegs:
            images.open_image(data).convert("RGB")
        seconds.append(time.perf_counter() - start)
    return 1000 * statistics.median(seconds) / len(jpegs)


def read_parts(data_dir: str, rounds: int) -> Dict[str, float]:
    """MB/s of the reader's two parts apart: fetching every train shard's bytes (through
    the trainer's storage layer) and unpacking them (tar members, in Python)."""
    from trainer import storage
    from trainer.data.tar_members import read_samples

    root = storage.open_dir(data_dir)
    names = [name for name, _ in ShardSource(data_dir, SIZE, 1, 0, 1).index.shards("train")]
    fetch, unpack = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        shards = [root.read_bytes(name) for name in names]
        fetch.append(time.perf_counter() - start)
        start = time.perf_counter()
        for data in shards:
            list(read_samples(io.BytesIO(data)))
        unpack.append(time.perf_counter() - start)
    total = sum(map(len, shards)) / 1e6
    return {"fetch": total / statistics.median(fetch),
            "unpack": total / statistics.median(unpack)}


def read_rate(data_dir: str, rounds: int) -> Dict[str, float]:
    """MB/s and images/s of fetching and unpacking every train shard (median of rounds)."""
    source = ShardSource(data_dir, SIZE, 1, 0, 1)
    shards = source.index.shards("train")
    total_bytes = total_images = 0
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        total_bytes = total_images = 0
        for _, data, _ in source.read_examples(shards, 0, shuffle=None):
            total_bytes += len(data)
            total_images += 1
        seconds.append(time.perf_counter() - start)
    elapsed = statistics.median(seconds)
    return {"MB/s": total_bytes / elapsed / 1e6, "images/s": total_images / elapsed}


def steady_rate(flags: List[str]) -> float:
    """Steady examples/s of a whole ImageNet trainer process (ResNet-18, 64 px)."""
    with tempfile.TemporaryDirectory(prefix="bench-data-") as job:
        result = subprocess.run(
            [sys.executable, "-m", "trainer.imagenet", "--job_dir=" + job, "--model=resnet18",
             "--image_size=64", "--batch_size=16", "--num_epochs=1", "--num_steps=36",
             "--warmup_epochs=0", "--log_steps=0"] + flags, cwd=str(REPO),
            capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit("trainer failed: " + result.stderr[-2000:])
        with open(os.path.join(job, "summary.json")) as handle:
            return json.load(handle)["steady_examples_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images-per-class", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-end-to-end", action="store_true",
                        help="skip the trainer runs (the longest part, about 12 minutes)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per pipeline
    with tempfile.TemporaryDirectory(prefix="bench-data-") as work:
        tree = photos.build(Path(work) / "tree", train=args.images_per_class, val=16)
        jpegs = [path.read_bytes() for path in sorted((tree / "train").rglob("*.JPEG"))]
        print("{} train photographs, {:.0f} KB on average, {} to {} px on the long side".format(
            len(jpegs), sum(map(len, jpegs)) / len(jpegs) / 1e3,
            *(f(max(images.open_image(data).size) for data in jpegs) for f in (min, max))))

        rates = decode_rates(jpegs, args.rounds)
        print("decode + augment, one core: ours {ours:.0f} images/s, reference {reference:.0f} "
              "images/s, ratio {ratio:.2f}".format(ratio=rates["ours"] / rates["reference"],
                                                   **rates))
        print("  decoding every JPEG at full size, nothing else: {:.2f} ms per image; ours "
              "whole: {:.2f} ms".format(full_decode_ms(jpegs, args.rounds), 1000 / rates["ours"]))

        shards = Path(work) / "shards"
        convert(str(tree), str(shards), shard_size=100)
        local = read_rate(str(shards), args.rounds)
        local_parts = read_parts(str(shards), args.rounds)
        import fake_gcs
        from google.cloud import storage

        server = fake_gcs.started()
        try:
            os.environ["STORAGE_EMULATOR_HOST"] = server.url
            bucket = storage.Client(project="bench").create_bucket("bench-data")
            for path in sorted(shards.iterdir()):
                bucket.blob("shards/" + path.name).upload_from_filename(str(path))
            remote = read_rate("gs://bench-data/shards", args.rounds)
            remote_parts = read_parts("gs://bench-data/shards", args.rounds)
        finally:
            server.stop()
        print("shard reading: local {:.0f} MB/s, {:.0f} images/s; fake-gcs-server {:.0f} MB/s, "
              "{:.0f} images/s; ratio {:.2f}".format(local["MB/s"], local["images/s"],
                                                      remote["MB/s"], remote["images/s"],
                                                      remote["MB/s"] / local["MB/s"]))
        print("  apart: fetch local {:.0f} MB/s, fake-gcs-server {:.0f} MB/s; unpack {:.0f} "
              "and {:.0f} MB/s".format(local_parts["fetch"], remote_parts["fetch"],
                                       local_parts["unpack"], remote_parts["unpack"]))

        batch, _ = next(iter(ShardSource(str(shards), SIZE, 8, 0, 1).train_batches(0)))
        ours_bytes = batch.element_size() * batch[0].nelement()
        reference_bytes = reference_transform()(
            images.open_image(jpegs[0]).convert("RGB")).element_size() * 3 * SIZE * SIZE
        print("host-to-device bytes per {0}x{0} image: ours {1} (uint8), reference {2} "
              "(float32), {3:.1f}x fewer".format(SIZE, ours_bytes, reference_bytes,
                                                 reference_bytes / ours_bytes))

        if args.no_end_to_end:
            return
        torch.set_num_threads(os.cpu_count() or 1)
        runs: Dict[str, List[float]] = {"real": [], "fake": []}
        for _ in range(args.rounds):  # interleaved
            runs["real"].append(steady_rate(["--data_dir=" + str(shards)]))
            runs["fake"].append(steady_rate(["--fake_data"]))
        real, fake = statistics.median(runs["real"]), statistics.median(runs["fake"])
        print("end to end, ResNet-18 64 px, batch 16, default workers: shards {:.1f} "
              "examples/s, fake data {:.1f} examples/s, pipeline efficiency {:.2f}".format(
                  real, fake, real / fake))


if __name__ == "__main__":
    main()
