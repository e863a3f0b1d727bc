"""The ImageNet input pipeline on real photographs (run: make bench, or python bench/data.py
[--images-per-class N] [--rounds N] [--no-end-to-end] [--only-epoch]).

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
4. One training epoch from fake-gcs-server with the default data workers (decode included):
   the training shards' bytes the storage server sent (counted by a proxy in front of it,
   look-ahead and every worker process included) over one period of the run (the end of an
   epoch to the end of the next: the stream reads ahead across epochs) against the split's
   bytes (goal <= 1.05); the peak memory of
   each worker and of the host (this process and its workers: PSS, shared pages counted
   once), against the data's part that the plan states (``trainer.data.plan``).
5. End to end, ResNet-18 at 64 px, batch 16: steady examples/s from the shards with the
   default data workers against the same run on fake data (the device-only rate): the
   pipeline's efficiency (goal >= 0.95). On this CPU device the decode workers share the two
   cores with the device, which a TPU host does not.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
from gcs_fault_proxy import GcsFaultProxy  # noqa: E402

import photos  # noqa: E402
from trainer.data import epoch_order, images  # noqa: E402
from trainer.data.make_shards import convert  # noqa: E402
from trainer.data.shard_index import load_index  # noqa: E402
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
    names = [name for name, _ in load_index(root).shards("train")]
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


def read_rate(data_dir: str, rounds: int, batch: int = 64) -> Dict[str, float]:
    """MB/s and images/s of reading and unpacking an epoch's examples as the trainer does
    (ranged reads of the runs of batches of ``batch``, checked, read ahead; one stream, no
    decode; median of rounds)."""
    source = ShardSource(data_dir, SIZE, batch, 0, 1)
    order = epoch_order.train_order([shard.count for shard in source.train.shards], 1, 0)
    runs = list(epoch_order.runs(order, source.cut, 0, 0, 0, 0))
    total_bytes = total_images = 0
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        total_bytes = total_images = 0
        for examples in source.train.examples_of(runs):
            total_bytes += sum(len(data) for _, data, _ in examples)
            total_images += len(examples)
        seconds.append(time.perf_counter() - start)
    elapsed = statistics.median(seconds)
    return {"MB/s": total_bytes / elapsed / 1e6, "images/s": total_images / elapsed}


class CountingProxy(GcsFaultProxy):
    """The fault proxy without faults, counting the body bytes of the objects read through
    it (GET answers): ``read`` all of them, ``read_train`` the training split's shards."""

    read = 0
    read_train = 0

    def _forward(self, method: str, path: str, headers, body: bytes):
        status, answer_headers, data = super()._forward(method, path, headers, body)
        if method == "GET" and "alt=media" in path:
            self.read += len(data)
            if "train-" in unquote(path):
                self.read_train += len(data)
        return status, answer_headers, data


def _children(pid: int) -> List[int]:
    """The processes ``pid`` started, and theirs (Linux's /proc)."""
    found = []
    for task in Path("/proc/{}/task".format(pid)).glob("*/children"):
        try:
            found += [int(child) for child in task.read_text().split()]
        except OSError:
            continue
    return found + [grandchild for child in found for grandchild in _children(child)]


def _memory(pid: int, *fields: str) -> int:
    """The sum of ``fields`` of ``pid``'s smaps_rollup (``Pss:``, ``Private_Dirty:``...) or
    status (``VmHWM:``), in bytes; 0 once it is gone."""
    source = "status" if fields[0].startswith("Vm") else "smaps_rollup"
    try:
        lines = Path("/proc/{}/{}".format(pid, source)).read_text().splitlines()
    except OSError:
        return 0
    return sum(int(line.split()[1]) * 1024 for line in lines if line.startswith(fields))


PRIVATE = ("Private_Clean:", "Private_Dirty:")


class MemorySampler(threading.Thread):
    """Every 20 ms: the PSS of this process and every process it started (their sum: the
    host's memory, pages shared by several counted once), and each child's private memory
    (what a worker adds to the trainer it was forked from) and peak RSS; keeps the peaks."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.host = self.worker_private = self.worker_rss = 0
        self.done = threading.Event()

    def run(self) -> None:
        me = os.getpid()
        while not self.done.wait(0.02):
            children = _children(me)
            self.host = max(self.host, sum(_memory(pid, "Pss:") for pid in [me] + children))
            self.worker_private = max([self.worker_private] + [
                _memory(child, *PRIVATE) for child in children])
            self.worker_rss = max([self.worker_rss] + [_memory(child, "VmHWM:")
                                                      for child in children])


def epoch_figures(data_dir: str, proxy: CountingProxy, batch: int) -> Dict[str, float]:
    """One training epoch of ``data_dir`` (read through ``proxy``) with the default data
    workers, decoded at 224 px: the training shards' bytes read over the split's, and memory
    against the plan. The input stream reads ahead across an epoch's end (into the evaluation
    and the next epoch), so one period of a run is measured: from the end of epoch 0's last
    batch to the end of epoch 1's, its evaluation included; reads ahead in, reads ahead out."""
    from trainer.data.workers import auto_workers

    source = ShardSource(data_dir, SIZE, batch, auto_workers(), 1)
    before = _memory(os.getpid(), "Pss:")
    try:
        for _ in source.train_batches(0):
            pass
        proxy.read_train = 0
        sampler = MemorySampler()
        sampler.start()
        for _ in source.eval_batches():
            pass
        steps = sum(1 for _ in source.train_batches(1))
        sampler.done.set()
        sampler.join()
    finally:
        source.close()
    return {"workers": source.workers, "steps": steps, "read": proxy.read_train,
            "split": source.index.size("train"), "worker_private": sampler.worker_private,
            "worker_rss": sampler.worker_rss, "host": sampler.host, "before": before,
            "plan_worker": source.plan.worker_ram, "plan_host": source.plan.host_ram,
            "plan_lines": source.plan_lines()}


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


def print_epoch(figures: Dict[str, float]) -> None:
    figures = dict(figures, host_added=figures["host"] - figures["before"])
    print("an epoch and its evaluation from fake-gcs-server (epoch 1, after epoch 0), {workers} "
          "data worker(s), {steps} steps: read {read} bytes of the train shards' {split}, "
          "{ratio:.3f}x".format(
              ratio=figures["read"] / figures["split"], **figures))
    print("  peak memory: a worker {:.0f} MB of its own ({:.0f} MB RSS with the pages it shares "
          "with the trainer); the host {:.0f} MB (PSS of the trainer and its workers), {:.0f} MB "
          "more than the trainer alone before the epoch; the plan's data part: {:.0f} MB a "
          "worker, {:.0f} MB the host".format(*(figures[name] / 1e6 for name in (
              "worker_private", "worker_rss", "host", "host_added", "plan_worker",
              "plan_host"))))
    for line in figures["plan_lines"]:
        print("  plan: " + line)


@contextlib.contextmanager
def served(shards: Path):
    """``gs://bench-data/shards`` holding ``shards`` on a fake-gcs-server, and a counting proxy
    in front of it (``STORAGE_EMULATOR_HOST`` points at the server)."""
    import fake_gcs
    from google.cloud import storage

    server = fake_gcs.started()
    proxy = CountingProxy(server.url).start()
    try:
        os.environ["STORAGE_EMULATOR_HOST"] = server.url
        bucket = storage.Client(project="bench").create_bucket("bench-data")
        for path in sorted(shards.iterdir()):
            bucket.blob("shards/" + path.name).upload_from_filename(str(path))
        yield "gs://bench-data/shards", proxy
    finally:
        proxy.stop()
        server.stop()


def epoch_through(proxy: CountingProxy, uri: str, batch: int) -> Dict[str, float]:
    os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
    try:
        return epoch_figures(uri, proxy, batch)
    finally:
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.upstream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images-per-class", type=int, default=80)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64,
                        help="the local batch of part 4 (default 64)")
    parser.add_argument("--no-end-to-end", action="store_true",
                        help="skip the trainer runs (the longest part, about 12 minutes)")
    parser.add_argument("--only-epoch", action="store_true",
                        help="run part 4 only (a minute or two)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per pipeline
    with tempfile.TemporaryDirectory(prefix="bench-data-") as work:
        tree = photos.build(Path(work) / "tree", train=args.images_per_class, val=16)
        jpegs = [path.read_bytes() for path in sorted((tree / "train").rglob("*.JPEG"))]
        print("{} train photographs, {:.0f} KB on average, {} to {} px on the long side".format(
            len(jpegs), sum(map(len, jpegs)) / len(jpegs) / 1e3,
            *(f(max(images.open_image(data).size) for data in jpegs) for f in (min, max))))
        shards = Path(work) / "shards"
        convert(str(tree), str(shards), shard_size=100)
        if args.only_epoch:
            with served(shards) as (uri, proxy):
                print_epoch(epoch_through(proxy, uri, args.batch))
            return

        rates = decode_rates(jpegs, args.rounds)
        print("decode + augment, one core: ours {ours:.0f} images/s, reference {reference:.0f} "
              "images/s, ratio {ratio:.2f}".format(ratio=rates["ours"] / rates["reference"],
                                                   **rates))
        print("  decoding every JPEG at full size, nothing else: {:.2f} ms per image; ours "
              "whole: {:.2f} ms".format(full_decode_ms(jpegs, args.rounds), 1000 / rates["ours"]))

        local = read_rate(str(shards), args.rounds)
        local_parts = read_parts(str(shards), args.rounds)
        with served(shards) as (uri, proxy):
            remote = read_rate(uri, args.rounds)
            remote_parts = read_parts(uri, args.rounds)
            epoch = epoch_through(proxy, uri, args.batch)
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
        print_epoch(epoch)

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
