"""A small labelled set of real photographs in ImageNet's layout, made reproducibly from the
sample photos that scikit-image ships inside its wheel (the wheel is only unzipped: nothing
of scikit-image is installed or imported).

    python tests/photos.py DEST [--train N] [--val N] [--broken]

makes ``DEST/train/<class>/*.JPEG`` and ``DEST/val/<class>/*.JPEG``: one class per source
photo (8 classes), each image a random crop of that photo (40-100 % of its area, aspect 3:4
to 4:3, mirrored half the time, brightness +-15 %), scaled so its long side is 300-500 px
(ImageNet's typical size) and saved at JPEG quality 75-95. The same seed gives the same
bytes with the same Pillow. ImageNet's quirks are in every set: a grayscale JPEG, a CMYK
JPEG, a PNG named ``.JPEG`` and a very large JPEG (4,000 px) in ``train/``; ``--broken``
adds a truncated JPEG that no decoder can read.

Licences of the source photos (scikit-image's own notes): astronaut (Eileen Collins, NASA),
rocket (SpaceX) and hubble_deep_field (NASA): public domain; chelsea (Stefan van der Walt),
coffee (Rachel Michetti) and retina (Mikael Haggstrom): CC0; coins (Brooklyn Museum) and ihc
(CMMI): no known copyright restrictions. The sets made from them carry the same terms.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SKIMAGE = "scikit-image==0.26.0"
# class name: the photo's file in the wheel's skimage/data/
SOURCES = {
    "astronaut": "astronaut.png", "cat": "chelsea.png", "coffee": "coffee.png",
    "coins": "coins.png", "galaxies": "hubble_deep_field.jpg", "ihc": "ihc.png",
    "retina": "retina.jpg", "rocket": "rocket.jpg",
}
CACHE = Path(__file__).resolve().parent.parent / ".venv" / "photo-sources"


def source_wheel(cache: Path = CACHE) -> Path:
    """scikit-image's wheel, downloaded from PyPI into ``cache`` once."""
    found = sorted(glob.glob(str(cache / "scikit_image-*.whl")))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "-d", str(cache), SKIMAGE], check=True)
        found = sorted(glob.glob(str(cache / "scikit_image-*.whl")))
    return Path(found[-1])


def source_photos(wheel: Optional[Path] = None) -> Dict[str, "object"]:
    """class name -> the source photo as an RGB PIL image."""
    from PIL import Image

    with zipfile.ZipFile(str(wheel or source_wheel())) as archive:
        return {name: Image.open(io.BytesIO(archive.read("skimage/data/" + file))).convert("RGB")
                for name, file in SOURCES.items()}


def _sample(photo, rng: random.Random, long_side: Tuple[int, int] = (300, 500)):
    from PIL import Image, ImageEnhance

    width, height = photo.size
    for _ in range(20):
        area = width * height * rng.uniform(0.4, 1.0)
        aspect = rng.uniform(3 / 4, 4 / 3)
        w, h = int(round((area * aspect) ** 0.5)), int(round((area / aspect) ** 0.5))
        if w <= width and h <= height:
            break
    else:
        w, h = width, height
    left, top = rng.randint(0, width - w), rng.randint(0, height - h)
    image = photo.crop((left, top, left + w, top + h))
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.85, 1.15))
    scale = rng.randint(*long_side) / max(w, h)
    return image.resize((max(1, int(w * scale)), max(1, int(h * scale))), Image.BILINEAR)


def build(dest: Path, train: int = 24, val: int = 8, broken: bool = False, seed: int = 0,
          wheel: Optional[Path] = None, long_side: Tuple[int, int] = (300, 500),
          quality: Optional[int] = None) -> Path:
    """Write the set under ``dest`` (see the module's docstring); returns ``dest``. The long
    sides are drawn from ``long_side`` (inclusive), the JPEG qualities from 75-95 unless
    ``quality`` fixes one (the draws are the same either way)."""
    from PIL import Image

    rng = random.Random(seed)
    photos = source_photos(wheel)
    for split, count in (("train", train), ("val", val)):
        for label, (name, photo) in enumerate(sorted(photos.items())):
            folder = dest / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                image = _sample(photo, rng, long_side)
                drawn = rng.randint(75, 95)  # drawn whatever ``quality`` says: the same set
                image_quality = quality or drawn
                path = folder / "{}_{}_{:03d}.JPEG".format(split, name, index)
                quirk = (label + index) % count if split == "train" else -1
                if quirk == 0:
                    image.convert("L").save(str(path), "JPEG", quality=image_quality)
                elif quirk == 1:
                    image.convert("CMYK").save(str(path), "JPEG", quality=image_quality)
                elif quirk == 2 and label % 2 == 0:
                    image.save(str(path), "PNG")  # named .JPEG, as a few of ImageNet's are
                elif quirk == 3 and label == 0:
                    large = image.resize((4000, 4000 * image.height // image.width),
                                         Image.BILINEAR)
                    large.save(str(path), "JPEG", quality=image_quality)
                else:
                    image.save(str(path), "JPEG", quality=image_quality)
    if broken:
        first = sorted(photos)[0]
        good = sorted((dest / "train" / first).glob("*.JPEG"))[-1].read_bytes()
        (dest / "train" / first / "train_{}_broken.JPEG".format(first)).write_bytes(
            good[:len(good) // 3])
    return dest


def plain_jpegs(dest: Path, per_class: int, long_side: int = 0,
                wheel: Optional[Path] = None) -> List[bytes]:
    """The bytes of the plain RGB JPEGs (no grayscale, CMYK, PNG or very large one) of a set
    built under ``dest`` with ``per_class`` training images a class; ``long_side``: every long
    side that many px at quality 90 (500: issue 49's kind), 0: the set's usual sizes. For the
    decode benchmarks."""
    from PIL import Image

    build(dest, train=per_class, val=1, wheel=wheel,
          **({"long_side": (long_side, long_side), "quality": 90} if long_side else {}))
    found = []
    for path in sorted((dest / "train").glob("*/*")):
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            if image.format == "JPEG" and image.mode == "RGB" and max(image.size) <= 1000:
                found.append(data)
    return found


def build_noise(dest: Path, train: int = 8, val: int = 2, classes: int = 2,
                size: Tuple[int, int] = (3000, 2250), seed: int = 0) -> Path:
    """A class-folder tree of large JPEGs of random noise (quality 90, about 6 MB at the
    default size): the slowest images to decode per pixel, since a decoder cannot skip the
    entropy decoding of a file, whatever size it scales it to. For input-starved runs."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("val", val)):
        for label in range(classes):
            folder = dest / split / "class{}".format(label)
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
                Image.fromarray(pixels).save(str(folder / "{}.JPEG".format(index)), "JPEG",
                                             quality=90)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--train", type=int, default=24, help="images per class in train/")
    parser.add_argument("--val", type=int, default=8, help="images per class in val/")
    parser.add_argument("--broken", action="store_true", help="add a truncated JPEG")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build(args.dest, args.train, args.val, args.broken, args.seed)
    print("{}: {} images".format(args.dest, sum(len(files) for _, _, files in
                                                os.walk(str(args.dest)))))


if __name__ == "__main__":
    main()
