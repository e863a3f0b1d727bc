"""The data workers' CPU per image, today's decode against fa6bc49's, paired in one process
(run: python bench/decode_pairs.py [--per-class N] [--long-side PX] [--rounds N]).

On real photographs (``tests/photos.py``'s, made here; ``--long-side 500``, the default, gives
issue 49's kind: about 480x450 px at JPEG quality 90, 4:2:0), one core (torch's pool at one
thread, as in a data worker), every plain RGB JPEG of the training set is made into a training
image (its random-resized crop and flip) and an evaluation image (its centre crop) by both
pipelines, each written into a row of a ``N x 3 x size x size`` batch as a worker does:

- ``now``: ``images.train_image`` / ``images.eval_image`` of this checkout, with the decoder
  ``jpeg_decode.decoder()`` names (the region decoder where built, else simplejpeg where
  importable; ``--whole-images``: as where the region decoder is not built,
  ``--without-simplejpeg``: as where simplejpeg is not installed either, ``--accurate-idct``:
  without the fast IDCT, each lever apart);
- ``fa6bc49``: the pipeline as it was at fa6bc49 (``reference_train`` / ``reference_eval``
  below: Pillow's header, its reduced decode where the crop allows, else torchvision's
  full-size decode, the region copied into channels last, torch's resize, the flip a copy of
  the output), kept here so the pair runs from any checkout (no git needed).
  ``--check-against DIR`` (a checkout of fa6bc49, e.g. ``git worktree add DIR fa6bc49``)
  first checks that it gives that checkout's pixels exactly (in a child process).

Each image is timed by the process's CPU clock (``time.process_time``: user and system, so
other processes on a shared machine count only through the caches they share), the two
pipelines alternating image by image and their order swapped every round, after a round that
warms up. Printed: per round, the CPU seconds per image of each and the ratio, with their
medians over rounds (what a worker spends on a busy host); each image's best round, averaged
over images (what it costs with the caches to itself); and the pixels of ``now`` against a
full decode and resize of the same crop (the largest and the mean difference in levels of
255), apart for the images a reduced decode takes.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
if "--child" not in sys.argv:  # a child imports the checkout its PYTHONPATH names
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))

SIZE = 224


def reference_train(data: bytes, size: int, rng) -> "object":
    """fa6bc49's training image of a plain JPEG (its ``images.train_image``)."""
    from trainer.data import images

    image = images.open_image(data)
    box = images.crop_box(image.size[0], image.size[1], rng)
    return _reference_crop(data, image, box, size, rng.random() < 0.5)


def reference_eval(data: bytes, size: int) -> "object":
    """fa6bc49's evaluation image of a plain JPEG (its ``images.eval_image``)."""
    from trainer.data import images

    image = images.open_image(data)
    return _reference_crop(data, image, images.centre_box(image.size[0], image.size[1], size),
                           size, False)


def _reference_crop(data: bytes, image, box, size: int, flip: bool):
    import numpy
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    from trainer.data import images
    from trainer.data.resample import pixel_box

    width, height = image.size
    image.draft("RGB", images.draft_size(width, height, box, size))
    if image.size == (width, height):  # torchvision's full-size decode into a tensor
        pixels = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                             mode=ImageReadMode.RGB)
    else:  # Pillow's reduced decode, the region copied out through numpy
        sx, sy = image.size[0] / width, image.size[1] / height
        region = image.crop(pixel_box((box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy),
                                      image.size[0], image.size[1]))
        pixels = torch.from_numpy(numpy.array(region.convert("RGB"))).permute(2, 0, 1)
        box = (0, 0) + region.size
    left, top, right, bottom = pixel_box(box, pixels.shape[2], pixels.shape[1])
    region = pixels[:, top:bottom, left:right].unsqueeze(0).contiguous(
        memory_format=torch.channels_last)
    resized = torch.nn.functional.interpolate(region, size=(size, size), mode="bilinear",
                                              antialias=True, align_corners=False)[0]
    return resized.flip(2) if flip else resized


def photographs(work: Path, per_class: int, long_side: int, wheel) -> List[bytes]:
    """The plain RGB JPEGs (no grayscale, CMYK or very large one) of a training set."""
    import photos

    return photos.plain_jpegs(work / "tree", per_class, long_side, wheel)


def pipelines() -> Dict[str, Dict[str, Callable]]:
    """{pipeline: {"train": (data, index) -> image, "eval": ...}}; training draws as a
    worker's for epoch 0, seed 0, the image's index as its key."""
    from trainer.data import images

    return {
        "now": {"train": lambda data, index: images.train_image(
                    data, SIZE, images.draws(0, 0, index)),
                "eval": lambda data, index: images.eval_image(data, SIZE)},
        "fa6bc49": {"train": lambda data, index: reference_train(
                        data, SIZE, images.draws(0, 0, index)),
                    "eval": lambda data, index: reference_eval(data, SIZE)},
    }


def cpu_per_image(photos: List[bytes], rounds: int) -> tuple:
    """({"train"/"eval": [{pipeline: CPU s per image} per round]}, {"train"/"eval":
    {pipeline: the mean over images of each image's best round}})."""
    import torch

    batch = torch.empty((8, 3, SIZE, SIZE), dtype=torch.uint8)
    found: Dict[str, List[Dict[str, float]]] = {"train": [], "eval": []}
    made = pipelines()
    best = {kind: {name: [float("inf")] * len(photos) for name in made} for kind in found}
    clock = time.process_time
    for round_ in range(rounds + 1):  # round 0 warms up (imports, first calls): not kept
        order = list(made) if round_ % 2 == 0 else list(made)[::-1]
        for kind in found:
            spent = dict.fromkeys(made, 0.0)
            for index, data in enumerate(photos):
                for name in order:
                    started = clock()
                    batch[index % 8] = made[name][kind](data, index)
                    took = clock() - started
                    spent[name] += took
                    if round_:
                        best[kind][name][index] = min(best[kind][name][index], took)
            if round_:
                found[kind].append({name: spent[name] / len(photos) for name in made})
    return found, {kind: {name: statistics.mean(times) for name, times in by_name.items()}
                   for kind, by_name in best.items()}


def pixel_differences(photos: List[bytes]) -> Dict[str, str]:
    """``now`` against Pillow's full-size decode (libjpeg's accurate IDCT, what fa6bc49's
    torchvision decode gives too) and torch's resize of the same crop and flip."""
    import numpy
    import torch
    from PIL import Image

    from trainer.data import images
    from trainer.data.resample import tensor_crop_resized

    made = pipelines()["now"]
    found = {}
    for kind in ("train", "eval"):
        differences: Dict[bool, List[tuple]] = {False: [], True: []}  # by: a reduced decode?
        for index, data in enumerate(photos):
            with Image.open(io.BytesIO(data)) as image:
                full = torch.from_numpy(numpy.array(image.convert("RGB"))).permute(2, 0, 1)
            if kind == "train":
                rng = images.draws(0, 0, index)
                box = images.crop_box(full.shape[2], full.shape[1], rng)
                flip = rng.random() < 0.5
            else:
                box, flip = images.centre_box(full.shape[2], full.shape[1], SIZE), False
            expected = tensor_crop_resized(full, box, SIZE, flip).int()
            difference = (made[kind](data, index).int() - expected).abs()
            reduced = images.reduction(full.shape[2], full.shape[1], box, SIZE) > 1
            differences[reduced].append((int(difference.max()), float(difference.float().mean())))
        found[kind] = "; ".join(
            "{} ({} images): at most {} levels, {:.2f} on average (the largest image mean "
            "{:.2f})".format("reduced decode, as at fa6bc49" if reduced else "full size",
                             len(pairs), max(pair[0] for pair in pairs),
                             statistics.mean(pair[1] for pair in pairs),
                             max(pair[1] for pair in pairs))
            for reduced, pairs in differences.items() if pairs)
    return found


def check_against(checkout: Path, photos: List[bytes], work: Path) -> None:
    """Exits 1 unless ``reference_train``/``reference_eval`` give fa6bc49's pixels exactly
    (that checkout's ``images`` run in a child process on the same photographs)."""
    import torch

    from trainer.data import images

    listed = work / "photos.json"
    listed.write_text(json.dumps([data.hex() for data in photos]))
    theirs = work / "theirs.pt"
    subprocess.run([sys.executable, __file__, "--child", str(listed), str(theirs)],
                   env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"}, check=True)
    expected = torch.load(str(theirs))
    for index, data in enumerate(photos):
        mine = (reference_train(data, SIZE, images.draws(0, 0, index)),
                reference_eval(data, SIZE))
        for kind, got, want in zip(("train", "eval"), mine, expected[index]):
            if not torch.equal(got, want):
                sys.exit("the fa6bc49 reference differs from {} ({} image {})".format(
                    checkout, kind, index))
    print("the fa6bc49 reference gives {}'s pixels exactly ({} photographs)".format(
        checkout, len(photos)))


def child(listed: Path, out: Path) -> None:
    """In the checkout ``PYTHONPATH`` names: its training and evaluation images."""
    import torch

    from trainer.data import images

    torch.set_num_threads(1)
    photos = [bytes.fromhex(text) for text in json.loads(listed.read_text())]
    torch.save([(images.train_image(data, SIZE, images.draws(0, 0, index)),
                 images.eval_image(data, SIZE)) for index, data in enumerate(photos)], str(out))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    import torch
    from PIL import Image

    from trainer.data import jpeg_decode

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--long-side", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--photo-wheel", type=Path)
    parser.add_argument("--check-against", type=Path, help="a checkout of fa6bc49")
    parser.add_argument("--without-simplejpeg", action="store_true",
                        help="now as where simplejpeg is absent (the xrt image's decoders)")
    parser.add_argument("--accurate-idct", action="store_true",
                        help="simplejpeg with the accurate IDCT (jpeg_decode.FAST_DCT off)")
    parser.add_argument("--whole-images", action="store_true",
                        help="now without the region decoder (as where it is not built)")
    args = parser.parse_args()
    if args.without_simplejpeg:
        sys.modules["simplejpeg"] = None  # its import fails, as where it is not installed
    if args.whole_images:  # as where trainer.data._jpeg_region is not built
        sys.modules["trainer.data._jpeg_region"] = None
    jpeg_decode.FAST_DCT = not args.accurate_idct
    torch.set_num_threads(1)  # a data worker's pool
    with tempfile.TemporaryDirectory() as scratch:
        photos = photographs(Path(scratch), args.per_class, args.long_side, args.photo_wheel)
        if args.check_against:
            check_against(args.check_against, photos, Path(scratch))
    sizes = [Image.open(io.BytesIO(data)).size for data in photos]
    print("{} photographs, mean {:.0f}x{:.0f} px, {:.1f} KB; now: {}; {} rounds, one "
          "core, CPU ms per image (process_time)".format(
              len(photos), statistics.mean(w for w, _ in sizes),
              statistics.mean(h for _, h in sizes),
              statistics.mean(len(data) for data in photos) / 1e3, jpeg_decode.described(),
              args.rounds))
    found, best = cpu_per_image(photos, args.rounds)
    differences = pixel_differences(photos)
    for kind, rounds in found.items():
        ratios = [each["fa6bc49"] / each["now"] for each in rounds]
        print("  {:5s} fa6bc49 {:.3f} ms, now {:.3f} ms: {:.2f}x (rounds: {}); each image's "
              "best round: {:.3f} ms, {:.3f} ms: {:.2f}x".format(
                  kind, statistics.median(each["fa6bc49"] for each in rounds) * 1e3,
                  statistics.median(each["now"] for each in rounds) * 1e3,
                  statistics.median(ratios), ", ".join("{:.2f}".format(ratio) for ratio in ratios),
                  best[kind]["fa6bc49"] * 1e3, best[kind]["now"] * 1e3,
                  best[kind]["fa6bc49"] / best[kind]["now"]))
        print("        now's pixels against a full decode and resize: " + differences[kind])


if __name__ == "__main__":
    main()
