"""The input stream at a host's size, against a step (run: make bench, or python bench/feed.py
[--workers 1,3,7] [--per-class N] [--batch N] [--epochs N] [--max-shorter-side N]
[--step-ms MS]).

Runs from a plain checkout with torch, Pillow and numpy (torchvision for the reference
pipeline and the GPU model; no torch_xla; no network given scikit-image's wheel,
``--photo-wheel``, which ``tests/photos.py`` keeps in ``.venv/photo-sources``): it makes its
own photographs
(``tests/photos.py``: 8 classes, about 370x350 px) and their shards (``make_shards``; with
``--max-shorter-side`` a second set, stored at most that on the shorter side), then reports:

1. **Supply**: training images/s the real stream (``ShardSource``, the trainer's data source)
   delivers when drawn flat out (from the second epoch on, evaluations included), by data
   worker count (default 1, half and all of cores - 1); with ``--max-shorter-side``, also from the
   smaller images' shards, and the ratio.
2. **Fed**: the stream (with the most workers) feeding a step, epochs with their evaluations:
   the images/s that reach the step, over the supply measured at the same batch (the GPU
   step's ``--gpu-batch`` has a supply of its own, measured before it) and over what the
   step alone asks (its images over its own time), the
   step's busy share per epoch after the first (its step time over the epoch's wall time,
   the boundary and the evaluation included), the longest wait for a batch after the first
   epoch and where it fell,
   and the trainer process's CPU per training image and its workers'. The step is a stand-in
   (it sleeps ``--step-ms``; default: the time the supply needs for a batch, so the step asks
   for exactly what the host supplies) on any machine; with ``torch.cuda`` available, a real
   one too: a torchvision model (``--gpu-model``, ResNet-50 by default), bf16 autocast,
   channels_last, SGD (``--gpu-batch``).
3. **Reference**: the same for pytorch/xla's reference pipeline (``ImageFolder`` and a
   ``DataLoader`` of as many workers, ``RandomResizedCrop``, flip, ``ToTensor``,
   ``Normalize``; a new iterator, so new workers, each epoch), in the same run; skipped, with
   a line saying so, where torchvision is missing.

The trainer process's torch pools are sized by ``trainer.host_threads``, as in the trainer.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import torch  # noqa: E402

from trainer import host_threads  # noqa: E402
from trainer.host_resources import host_cores  # noqa: E402

SIZE = 224
EVAL_STEP_SHARE = 1 / 3  # a stand-in evaluation step: the forward pass of a training step


def photographs(work: Path, per_class: int, max_side: int = 0,
                wheel: Optional[Path] = None, long_side: int = 0) -> Tuple[Path, Path]:
    """(class-folder tree, its shards: ``make_shards --max_side=max_side``) under ``work``,
    made once (from scikit-image's photographs in ``wheel``, default: ``tests/photos.py``'s
    cached copy); ``long_side``: every photograph's long side that, at JPEG quality 90 (the
    issue's set), else ``tests/photos.py``'s own (300-500 px, quality 75-95)."""
    import photos
    from trainer.data.make_shards import convert

    tree = work / "tree-{}-{}".format(per_class, long_side)
    if not (tree / "val").exists():
        photos.build(tree, train=per_class, val=max(1, per_class // 8), wheel=wheel,
                     **({"long_side": (long_side, long_side), "quality": 90}
                        if long_side else {}))
    shards = work / "shards-{}-{}-{}".format(per_class, long_side, max_side)
    if not (shards / "index.json").exists():
        convert(str(tree), str(shards), shard_size=256, max_side=max_side)
    return tree, shards


def image_bytes(shards: Path) -> float:
    """The training split's shard bytes per example."""
    from trainer.data.shard_index import INDEX_NAME, ShardIndex

    index = ShardIndex.from_json((shards / INDEX_NAME).read_bytes(), str(shards))
    return index.size("train") / index.examples("train")


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class Epochs:
    """A data source as the bench draws it: ``train(epoch)`` and ``evaluation(epoch)``
    iterate (images, labels) batches; ``close`` ends its workers."""

    def __init__(self, train: Callable[[int], Iterable], evaluation: Callable[[int], Iterable],
                 close: Callable[[], None]) -> None:
        self.train, self.evaluation, self.close = train, evaluation, close


def stream_epochs(shards: Path, batch: int, workers: int) -> Epochs:
    from trainer.data.shard_source import ShardSource

    source = ShardSource(str(shards), SIZE, batch, workers, seed=0)
    return Epochs(source.train_batches, lambda epoch: source.eval_batches(), source.close)


def reference_epochs(tree: Path, batch: int, workers: int) -> Optional[Epochs]:
    """pytorch/xla's reference pipeline; None without torchvision."""
    try:
        from torchvision import datasets, transforms
    except ImportError:
        return None
    from trainer.data.images import MEAN, STD

    normalize = transforms.Normalize(MEAN, STD)
    train = datasets.ImageFolder(str(tree / "train"), transforms.Compose([
        transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), normalize]))
    val = datasets.ImageFolder(str(tree / "val"), transforms.Compose([
        transforms.Resize(SIZE * 256 // 224), transforms.CenterCrop(SIZE),
        transforms.ToTensor(), normalize]))
    options = dict(batch_size=batch, num_workers=workers, drop_last=True,
                   **({"prefetch_factor": 16} if workers else {}))
    loaders = (torch.utils.data.DataLoader(train, shuffle=True, **options),
               torch.utils.data.DataLoader(val, **dict(options, drop_last=False)))
    return Epochs(lambda epoch: loaders[0], lambda epoch: loaders[1], gc.collect)


def supply(epochs: Epochs, count: int) -> float:
    """Training images/s drawn flat out over epochs 1 to ``count - 1`` (their evaluations
    drawn too, not counted; epoch 0 starts the workers)."""
    images, started = 0, 0.0
    for epoch in range(count):
        if epoch == 1:
            started = time.perf_counter()
        for x, _ in epochs.train(epoch):
            images += len(x) if epoch else 0
        for _ in epochs.evaluation(epoch):
            pass
    seconds = time.perf_counter() - started
    epochs.close()
    return images / seconds


class StandIn:
    """A step that takes ``seconds`` (an evaluation step a third of it)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def train(self, x: torch.Tensor, y: torch.Tensor) -> float:
        time.sleep(self.seconds)
        return self.seconds

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> float:
        time.sleep(self.seconds * EVAL_STEP_SHARE)
        return self.seconds * EVAL_STEP_SHARE


class GpuStep:
    """A torchvision model (``--gpu-model``: ResNet-50 by default, or any other, such as
    vit_b_16) on the GPU: bf16 autocast, channels_last, SGD; uint8 images are normalized on the
    device, floats (the reference's) taken as they are. Each step is timed from its launch to
    its end (synchronized)."""

    def __init__(self, name: str = "resnet50") -> None:
        import torchvision

        from trainer.data.images import normalize

        self.normalize = normalize
        model = torchvision.models.get_model(name)
        self.model = model.cuda().to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.loss = torch.nn.CrossEntropyLoss(ignore_index=-1)

    def _inputs(self, x: torch.Tensor) -> torch.Tensor:
        x = x.cuda(non_blocking=True)
        x = self.normalize(x) if x.dtype == torch.uint8 else x
        return x.contiguous(memory_format=torch.channels_last)

    def train(self, x: torch.Tensor, y: torch.Tensor) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.loss(self.model(self._inputs(x)), y.cuda(non_blocking=True))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        torch.cuda.synchronize()
        return time.perf_counter() - started

    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            self.model(self._inputs(x)).argmax(1)
        torch.cuda.synchronize()
        return time.perf_counter() - started


def timed(batches: Iterable) -> Iterator[Tuple[float, object]]:
    """(seconds waited for it, batch) of each of ``batches``."""
    iterator = iter(batches)
    while True:
        started = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        yield time.perf_counter() - started, batch


def fed(epochs: Epochs, step, count: int) -> Dict[str, object]:
    """``count`` epochs and their evaluations through ``step``; the figures of ``fed``. Over
    the epochs after the first (the first starts the workers), as ``supply`` counts: ``fed``
    the training images/s that reached the step (their wall time, boundaries and evaluations
    included), ``demand`` the images/s the step alone asks (the training images over the
    training steps' own time)."""
    trainer_before = cpu_seconds(resource.RUSAGE_SELF)
    workers_before = cpu_seconds(resource.RUSAGE_CHILDREN)
    busy_shares, longest, images = [], (0.0, ""), 0
    counted = wall = stepping = 0.0
    for epoch in range(count):
        started, busy, trained = time.perf_counter(), 0.0, 0.0
        for number, (waited, (x, y)) in enumerate(timed(epochs.train(epoch))):
            if epoch:  # the first epoch's first wait is the workers' start
                longest = max(longest, (waited, "epoch {} step {}{}".format(
                    epoch, number, " (its first: the boundary)" if number == 0 else "")))
            took = step.train(x, y)
            busy, trained = busy + took, trained + took
            images += len(x)
            counted += len(x) if epoch else 0
        for number, (waited, (x, y)) in enumerate(timed(epochs.evaluation(epoch))):
            if epoch:
                longest = max(longest, (waited, "evaluation {} step {}".format(epoch, number)))
            busy += step.evaluate(x, y)
        seconds = time.perf_counter() - started
        busy_shares.append(busy / seconds)
        if epoch:
            wall, stepping = wall + seconds, stepping + trained
    epochs.close()
    return {"busy": busy_shares[1:], "longest": longest, "images": images,
            "fed": counted / wall if wall else 0.0,
            "demand": counted / stepping if stepping else 0.0,
            "trainer_ms": 1000 * (cpu_seconds(resource.RUSAGE_SELF) - trainer_before) / images,
            "workers_ms": 1000 * (cpu_seconds(resource.RUSAGE_CHILDREN) - workers_before)
            / images}


def reached(figures: Dict[str, object], supplied: float, batch: int) -> str:
    """What reached the step against the supply measured at the same ``batch`` and against
    what the step alone asks: the share of the supply is the host's side (1.0: every image
    the workers can make is trained on), the share of the demand the device's (1.0: the step
    never waits)."""
    return ("reached the step {:.0f} images/s: {:.0%} of the supply at batch {} ({:.0f} "
            "images/s), {:.0%} of what the step alone asks ({:.0f} images/s)".format(
                figures["fed"], figures["fed"] / supplied, batch, supplied,
                figures["fed"] / figures["demand"] if figures["demand"] else 0.0,
                figures["demand"]))


def report(name: str, figures: Dict[str, object], supplied: float, batch: int) -> None:
    """The fed line; ``supplied`` must be the supply measured at ``batch``."""
    busy = figures["busy"]
    waited, where = figures["longest"]
    print("  {}: busy {} per epoch after the first (boundary and evaluation included); "
          "longest wait {:.0f} ms at {}; trainer process {:.3f} ms CPU per training image, "
          "its workers {:.3f} ms ({:.0%}); {}".format(
              name, ", ".join("{:.0%}".format(share) for share in busy), 1000 * waited, where,
              figures["trainer_ms"], figures["workers_ms"],
              figures["trainer_ms"] / max(figures["workers_ms"], 1e-9),
              reached(figures, supplied, batch)))


def main() -> None:
    cores = host_cores()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default=",".join(
        str(w) for w in sorted({1, max(1, (cores - 1) // 2), max(1, cores - 1)})),
        help="data worker counts for the supply (default: 1, half and all of cores - 1)")
    parser.add_argument("--per-class", type=int, default=64, help="training photographs per "
                        "class (8 classes; an eighth as many for evaluation)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--long-side", type=int, default=0, help="photographs of this long "
                        "side at JPEG quality 90 (500: the issue's set, about 480x450 px; "
                        "default: tests/photos.py's 300-500 px)")
    parser.add_argument("--max-shorter-side", "--max-side", dest="max_side", type=int,
                        default=0, help="also measure the supply from shards made with "
                        "make_shards --max_shorter_side=N (--max-side: the old name)")
    parser.add_argument("--step-ms", type=float, default=0.0,
                        help="the stand-in step (default: what the supply takes for a batch)")
    parser.add_argument("--rounds", type=int, default=1, help="supply: rounds (medians)")
    parser.add_argument("--gpu-batch", type=int, default=256)
    parser.add_argument("--gpu-model", default="resnet50", help="the GPU step's torchvision "
                        "model (resnet50, vit_b_16, convnext_tiny, ...), 224 px")
    parser.add_argument("--work", type=Path, help="keep the photographs here")
    parser.add_argument("--photo-wheel", type=Path, help="scikit-image's wheel, where the "
                        "photographs come from, on a machine without network (default: "
                        "tests/photos.py's copy in .venv/photo-sources, fetched once)")
    args = parser.parse_args()
    threads = host_threads.apply(host_threads.choose(cores))
    with tempfile.TemporaryDirectory() as scratch:
        tree, shards = photographs(args.work or Path(scratch), args.per_class,
                                   wheel=args.photo_wheel, long_side=args.long_side)
        smaller = photographs(args.work or Path(scratch), args.per_class, args.max_side,
                              long_side=args.long_side)[1] if args.max_side else None
        counts = [int(count) for count in args.workers.split(",")]
        print("{} cores; the trainer process's torch pools: {} intra-op, {} inter-op; "
              "{} at {} px, batch {}, {} epochs; {:.0f} bytes per training image{}".format(
                  cores, threads.intra_op, threads.inter_op, shards, SIZE, args.batch,
                  args.epochs, image_bytes(shards), "" if smaller is None else
                  " ({:.0f} with --max_shorter_side={})".format(image_bytes(smaller),
                                                                 args.max_side)))
        has_reference = reference_epochs(tree, args.batch, 0) is not None
        if not has_reference:
            print("reference pipeline: skipped (torchvision is not installed)")
        supplied, reference_supplied = {}, {}
        for workers in counts:
            sources = {"stream": functools.partial(stream_epochs, shards, args.batch, workers)}
            if smaller is not None:
                sources["max_side"] = functools.partial(stream_epochs, smaller, args.batch,
                                                        workers)
            if has_reference:
                sources["reference"] = functools.partial(reference_epochs, tree, args.batch,
                                                         workers)
            rates = {name: [] for name in sources}
            for round_number in range(args.rounds):  # alternating, medians
                for name in (list(sources) if round_number % 2 == 0 else list(sources)[::-1]):
                    rates[name].append(supply(sources[name](), args.epochs))
            rate = {name: statistics.median(found) for name, found in rates.items()}
            supplied[workers] = rate["stream"]
            reference_supplied[workers] = rate.get("reference", 0.0)
            line = "supply, {:2d} worker(s): stream {:.0f} images/s".format(
                workers, rate["stream"])
            if smaller is not None:
                line += ", stream from --max_shorter_side={} shards {:.0f} ({:.2f}x)".format(
                    args.max_side, rate["max_side"], rate["max_side"] / rate["stream"])
            if has_reference:
                line += ", reference {:.0f}".format(rate["reference"])
            print(line + (" (medians of {} alternating rounds: {})".format(args.rounds, "; ".join(
                "{} {}".format(name, ", ".join("{:.0f}".format(r) for r in found))
                for name, found in rates.items())) if args.rounds > 1 else ""))
        workers = max(counts)
        step_seconds = args.step_ms / 1000 or args.batch / supplied[workers]
        print("fed, {} worker(s), a stand-in step of {:.1f} ms:".format(
            workers, 1000 * step_seconds))
        report("stream", fed(stream_epochs(shards, args.batch, workers),
                             StandIn(step_seconds), args.epochs),
               supplied[workers], args.batch)
        if has_reference:
            report("reference", fed(reference_epochs(tree, args.batch, workers),
                                    StandIn(step_seconds), args.epochs),
                   reference_supplied[workers], args.batch)
        if not torch.cuda.is_available():
            print("GPU step: skipped (torch.cuda is not available)")
            return
        # The GPU step's batch is another batch: its supply is measured again at that batch
        # (the units the workers build, and so their share of a step, depend on it).
        gpu_supply = supply(stream_epochs(shards, args.gpu_batch, workers), args.epochs)
        gpu_reference = supply(reference_epochs(tree, args.gpu_batch, workers), args.epochs) \
            if has_reference else 0.0
        print("supply at batch {}, {} worker(s): stream {:.0f} images/s{}".format(
            args.gpu_batch, workers, gpu_supply, ", reference {:.0f}".format(gpu_reference)
            if has_reference else ""))
        step = GpuStep(args.gpu_model)
        print("fed, {} worker(s), {} on {} (bf16, channels_last, batch {}):".format(
            workers, args.gpu_model, torch.cuda.get_device_name(), args.gpu_batch))
        report("stream", fed(stream_epochs(shards, args.gpu_batch, workers), step,
                             args.epochs), gpu_supply, args.gpu_batch)
        if has_reference:
            report("reference", fed(reference_epochs(tree, args.gpu_batch, workers), step,
                                    args.epochs), gpu_reference, args.gpu_batch)


if __name__ == "__main__":
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    main()
