"""Make a small class-folder tree in ImageNet's layout for a local ImageNet run (make
run-imagenet), from nothing: synthetic JPEGs, so no data set needs to be downloaded.

    python data/make_imagenet_sample.py DEST [--train N] [--val N] [--size PX] [--seed S]

writes ``DEST/train/<class>/<class>_NNNN.JPEG`` (N per class, default 48) and
``DEST/val/<class>/...`` (default 12 per class) for 4 classes, each a pattern the model must
tell apart whatever its colours and position: horizontal stripes, vertical stripes, a
checkerboard and a disc, each on a random background with random colours, phase and noise,
saved at JPEG quality 90. The same seed gives the same bytes with the same Pillow. It is a
demonstration of the pipeline (folder tree -> decode -> augment -> ResNet), not a benchmark:
accuracy on it says nothing about ImageNet.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Callable, Dict, Tuple

from PIL import Image, ImageDraw

Colour = Tuple[int, int, int]


def _stripes(vertical: bool) -> Callable[[ImageDraw.ImageDraw, int, random.Random, Colour],
                                         None]:
    def draw(canvas: ImageDraw.ImageDraw, size: int, rng: random.Random, ink: Colour) -> None:
        width, phase = rng.randint(4, 10), rng.randint(0, 9)
        for start in range(-phase, size, 2 * width):
            box = (start, 0, start + width - 1, size) if vertical else \
                (0, start, size, start + width - 1)
            canvas.rectangle(box, fill=ink)
    return draw


def _checker(canvas: ImageDraw.ImageDraw, size: int, rng: random.Random, ink: Colour) -> None:
    cell = rng.randint(6, 14)
    for y in range(0, size, cell):
        for x in range(0, size, cell):
            if (x // cell + y // cell) % 2:
                canvas.rectangle((x, y, x + cell - 1, y + cell - 1), fill=ink)


def _disc(canvas: ImageDraw.ImageDraw, size: int, rng: random.Random, ink: Colour) -> None:
    radius = rng.randint(size // 5, size // 3)
    x, y = rng.randint(radius, size - radius), rng.randint(radius, size - radius)
    canvas.ellipse((x - radius, y - radius, x + radius, y + radius), fill=ink)


CLASSES: Dict[str, Callable[..., None]] = {
    "checker": _checker, "disc": _disc, "stripes_h": _stripes(False),
    "stripes_v": _stripes(True)}


def _colour(rng: random.Random) -> Colour:
    return (rng.randint(0, 255), rng.randint(0, 255), rng.randint(0, 255))


def make_image(pattern: Callable[..., None], size: int, rng: random.Random) -> Image.Image:
    """One picture of ``pattern``: random background and ink (never too alike), then noise."""
    background = _colour(rng)
    ink = _colour(rng)
    while sum(abs(a - b) for a, b in zip(background, ink)) < 150:
        ink = _colour(rng)
    image = Image.new("RGB", (size, size), background)
    pattern(ImageDraw.Draw(image), size, rng, ink)
    noise = Image.effect_noise((size, size), rng.uniform(10, 30)).convert("RGB")
    return Image.blend(image, noise, 0.15)


def make_sample(dest: str, train: int = 48, val: int = 12, size: int = 96, seed: int = 0) -> int:
    """Write the tree under ``dest``; the number of images written."""
    rng = random.Random(seed)
    written = 0
    for split, count in (("train", train), ("val", val)):
        for name, pattern in sorted(CLASSES.items()):
            folder = os.path.join(dest, split, name)
            os.makedirs(folder, exist_ok=True)
            for index in range(count):
                path = os.path.join(folder, "{}_{:04d}.JPEG".format(name, index))
                make_image(pattern, size, rng).save(path, "JPEG", quality=90)
                written += 1
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", help="folder to write train/ and val/ into")
    parser.add_argument("--train", type=int, default=48, help="images per class in train/ (48)")
    parser.add_argument("--val", type=int, default=12, help="images per class in val/ (12)")
    parser.add_argument("--size", type=int, default=96, help="side of each image in px (96)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    args = parser.parse_args(argv)
    count = make_sample(args.dest, args.train, args.val, args.size, args.seed)
    print("{} images of {} classes in {}/train and {}/val".format(
        count, len(CLASSES), args.dest, args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
