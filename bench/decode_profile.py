"""Where one training image's time goes in a data worker (run: python bench/decode_profile.py
[--per-class N] [--long-side PX] [--rounds N]).

On real photographs (``tests/photos.py``'s, made here; ``--long-side 500`` gives the issue's
set, about 480x450 px at JPEG quality 90), one core, each stage timed over every plain RGB
JPEG of the training set (the best of ``--rounds`` passes, per image; the mean over images is
printed):

- ``pipeline``: the data worker's training image as the trainer makes it
  (``images.train_image``: its random-resized crop, flip, decode and resize), the total;
- ``decode (torchvision, RGB)``: the full-size decode the pipeline takes for these images
  (``jpeg_decode.decoded``: libjpeg-turbo straight into a tensor);
- the decode cut into libjpeg's stages with Pillow's decoder (the same libjpeg-turbo), each a
  decode that leaves one more stage out: ``RGB`` (all), ``YCbCr`` (no colour conversion),
  ``L`` (luma only: the chroma planes are entropy-decoded but neither inverse-transformed nor
  upsampled), ``L at 1/8`` (every coefficient entropy-decoded, only the DC term
  transformed: about the entropy decoding alone) and the header alone; the differences are
  the stages;
- ``resize``: the pipeline's crop and antialiased resize of the freshly decoded tensor (a
  decode and resize less the decode);
- ``copy``: the encoded bytes copied into a tensor (torchvision needs a writable buffer), and
  Pillow's RGBX pixels copied out into a tensor (what the torchvision path avoids; a decode
  and copy less the decode).

Where the region decoder is built (``trainer/data/_jpeg_region.c``, which the pipeline then
takes), its stages on the pipeline's boxes: the box's rows and columns decoded, the box copied
out of them (mirrored for a flip), and its resize; the rest of the pipeline is the header, the
draws and Python's calls. Then what a cropped decode could give at most on these crops, by
arithmetic from Pillow's stages: the entropy decoding of every row down to the crop's
bottom stays, the rest of the decode scales with the crop's area (MCU-aligned). With
simplejpeg importable (``PYTHONPATH``), its decode is timed too, also with ``fastdct`` and
``fastupsample``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

REPO = Path(__file__).resolve().parent.parent
# bench/ itself is off the path: its trainer.py is not the trainer package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import numpy  # noqa: E402
import torch  # noqa: E402

from trainer.data import images, jpeg_decode  # noqa: E402
from trainer.data.resample import pixel_box, resized, tensor_crop_resized  # noqa: E402

SIZE = 224
MCU = 16  # a 4:2:0 JPEG's MCU: 16x16 px (the photographs here are 4:2:0)


def photographs(work: Path, per_class: int, long_side: int, wheel) -> List[bytes]:
    """The plain RGB JPEGs (no grayscale, CMYK or very large one) of a training set."""
    import photos

    return photos.plain_jpegs(work / "tree", per_class, long_side, wheel)


def pillow(mode: str, eighth: bool = False, header_only: bool = False) -> Callable:
    from PIL import Image

    def decode(data: bytes, index: int) -> None:
        with Image.open(io.BytesIO(data)) as image:
            if header_only:
                return
            width, height = image.size
            image.draft(mode, (width // 8, height // 8) if eighth else None)
            image.load()
    return decode


def best_times(stages: Dict[str, Callable[[bytes, int], None]], photos: List[bytes],
               rounds: int) -> Dict[str, List[float]]:
    """Seconds per image of each stage: the best of ``rounds`` passes, the stages interleaved
    image by image (a busy machine slows them alike)."""
    best = {name: [float("inf")] * len(photos) for name in stages}
    for _ in range(rounds):
        for index, data in enumerate(photos):
            for name, stage in stages.items():
                started = time.perf_counter()
                stage(data, index)
                best[name][index] = min(best[name][index], time.perf_counter() - started)
    return best


def crop_fractions(photos: List[bytes]) -> Dict[str, float]:
    """Means over the training crops the pipeline draws: the share of the image's MCU rows
    down to the crop's bottom, and of its MCUs the crop touches."""
    from PIL import Image

    rows, area, reduced = [], [], 0
    for index, data in enumerate(photos):
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
        rng = images.draws(0, 0, index)
        left, top, right, bottom = images.crop_box(width, height, rng)
        mcu_rows, mcu_cols = -(-height // MCU), -(-width // MCU)
        down = -(-int(bottom) // MCU)
        touched = (down - int(top) // MCU) * (-(-int(right) // MCU) - int(left) // MCU)
        rows.append(down / mcu_rows)
        area.append(touched / (mcu_rows * mcu_cols))
        if images.draft_size(width, height, (left, top, right, bottom), SIZE) <= (
                width // 2, height // 2):
            reduced += 1
    return {"rows": statistics.mean(rows), "area": statistics.mean(area),
            "reduced": reduced / len(photos)}


def main() -> None:
    from PIL import Image

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--long-side", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--photo-wheel", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)  # a data worker's pool
    with tempfile.TemporaryDirectory() as scratch:
        photos = photographs(Path(scratch), args.per_class, args.long_side, args.photo_wheel)
    decoded = [jpeg_decode.decoded(data) for data in photos]
    boxes = []
    for index, tensor in enumerate(decoded):
        rng = images.draws(0, 0, index)
        box = images.crop_box(tensor.shape[2], tensor.shape[1], rng)
        boxes.append((box, rng.random() < 0.5))

    def pipeline(data: bytes, index: int) -> None:
        images.train_image(data, SIZE, images.draws(0, 0, index))

    def decode_resize(data: bytes, index: int) -> None:
        tensor_crop_resized(jpeg_decode.decoded(data), boxes[index][0], SIZE, boxes[index][1])

    def copy_in(data: bytes, index: int) -> None:
        torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def pillow_copy_out(data: bytes, index: int) -> None:
        with Image.open(io.BytesIO(data)) as image:
            torch.from_numpy(numpy.array(image)).permute(2, 0, 1)

    stages = {
        "pipeline": pipeline,
        "decode (torchvision, RGB)": lambda data, index: jpeg_decode.decoded(data),
        "decode (Pillow, RGB)": pillow("RGB"),
        "decode (Pillow, YCbCr)": pillow("YCbCr"),
        "decode (Pillow, L)": pillow("L"),
        "decode (Pillow, L at 1/8)": pillow("L", eighth=True),
        "header (Pillow)": pillow("RGB", header_only=True),
        "decode and resize (torchvision)": decode_resize,
        "copy in (bytes to tensor)": copy_in,
        "decode (Pillow, RGB) and copy out to a tensor": pillow_copy_out,
    }
    module = jpeg_decode._region_module()
    if module is not None:  # the region decoder's stages, on the pipeline's own boxes
        regions = []
        for index, tensor in enumerate(decoded):
            box, flip = boxes[index]
            # At full scale (the few crops large enough for a reduced decode included).
            regions.append((tensor.shape[2], tensor.shape[1], 1,
                            pixel_box(box, tensor.shape[2], tensor.shape[1]), flip))
        blocks = [jpeg_decode.region(data, *regions[index])
                  for index, data in enumerate(photos)]
        stages["region: the box's rows and columns decoded"] = (
            lambda data, index: module.decode(data, 1, *regions[index][3], jpeg_decode.FAST_DCT,
                                             jpeg_decode.CHECK_TO_END))
        stages["region: decoded and the box copied out (mirrored)"] = (
            lambda data, index: jpeg_decode.region(data, *regions[index]))
        stages["region: the box resized"] = lambda data, index: resized(blocks[index], SIZE)
    else:
        print("the region decoder: not built here, not timed")
    try:
        import simplejpeg

        for name, options in (("", {}), (", fastdct", {"fastdct": True}),
                              (", fastdct + fastupsample",
                               {"fastdct": True, "fastupsample": True})):
            stages["decode (simplejpeg, RGB{})".format(name)] = (
                lambda data, index, options=options: simplejpeg.decode_jpeg(data, **options))
    except ImportError:
        print("simplejpeg: not importable, not timed")
    mean = {name: statistics.mean(times) * 1000
            for name, times in best_times(stages, photos, args.rounds).items()}
    # Each stage after a fresh decode, as in the pipeline (a decoded image is in the cache).
    mean["resize"] = mean["decode and resize (torchvision)"] - mean["decode (torchvision, RGB)"]
    mean["copy out (Pillow to tensor)"] = (mean["decode (Pillow, RGB) and copy out to a tensor"]
                                           - mean["decode (Pillow, RGB)"])
    sizes = [Image.open(io.BytesIO(data)).size for data in photos]
    print("{} photographs, mean {:.0f}x{:.0f} px, {:.1f} KB; best of {} rounds, mean ms per "
          "image, one core".format(len(photos), statistics.mean(w for w, _ in sizes),
                                   statistics.mean(h for _, h in sizes),
                                   statistics.mean(len(data) for data in photos) / 1e3,
                                   args.rounds))
    for name, value in mean.items():
        print("  {:48s} {:6.3f}".format(name, value))
    header = mean["header (Pillow)"]
    split = {
        "header and setup": header,
        "entropy decoding (all coefficients)": mean["decode (Pillow, L at 1/8)"] - header,
        "luma IDCT and output": mean["decode (Pillow, L)"] - mean["decode (Pillow, L at 1/8)"],
        "chroma IDCT and upsampling": mean["decode (Pillow, YCbCr)"]
        - mean["decode (Pillow, L)"],
        "colour conversion": mean["decode (Pillow, RGB)"] - mean["decode (Pillow, YCbCr)"],
    }
    print("the decode's stages (Pillow, RGB: {:.3f} ms):".format(mean["decode (Pillow, RGB)"]))
    for name, value in split.items():
        print("  {:40s} {:6.3f} ({:.0%})".format(name, value,
                                                 value / mean["decode (Pillow, RGB)"]))
    if module is None:  # the pipeline decodes whole images
        rest = mean["pipeline"] - mean["decode (torchvision, RGB)"] - mean["resize"]
        print("the pipeline {:.3f} ms: decode {:.3f} ({:.0%}), resize {:.3f} ({:.0%}), the rest "
              "{:.3f} (header parse, crop draw, copies)".format(
                  mean["pipeline"], mean["decode (torchvision, RGB)"],
                  mean["decode (torchvision, RGB)"] / mean["pipeline"], mean["resize"],
                  mean["resize"] / mean["pipeline"], rest))
    else:
        region = mean["region: the box's rows and columns decoded"]
        copied = mean["region: decoded and the box copied out (mirrored)"] - region
        scaled = mean["region: the box resized"]
        print("the pipeline with the region decoder ({}) {:.3f} ms: the box's decode {:.3f} "
              "({:.0%}), its copy out {:.3f} ({:.0%}), the resize {:.3f} ({:.0%}), the rest "
              "{:.3f} ({:.0%}: header, draws, checks, Python's calls)".format(
                  jpeg_decode.decoder(), mean["pipeline"], region, region / mean["pipeline"],
                  copied, copied / mean["pipeline"], scaled, scaled / mean["pipeline"],
                  mean["pipeline"] - region - copied - scaled,
                  1 - (region + copied + scaled) / mean["pipeline"]))
    crops = crop_fractions(photos)
    print("crops: {:.0%} of the MCU rows down to the crop's bottom, {:.0%} of the MCUs touched, "
          "{:.0%} decoded at a reduced scale".format(crops["rows"], crops["area"],
                                                    crops["reduced"]))
    if module is None:  # what a cropped decode could give, by arithmetic
        entropy = split["entropy decoding (all coefficients)"]
        after = mean["decode (Pillow, RGB)"] - header - entropy
        # The share of the decode a cropped one keeps, from Pillow's stages, applied to the
        # pipeline's own (torchvision's) decode.
        kept = (header + entropy * crops["rows"] + after * crops["area"]) / mean[
            "decode (Pillow, RGB)"]
        bound = mean["pipeline"] - mean["decode (torchvision, RGB)"] * (1 - kept)
        print("a cropped decode keeps at best {:.0%} of the decode's time: the pipeline {:.3f} "
              "ms, {:.2f}x; without any decode at all {:.2f}x".format(
                  kept, bound, mean["pipeline"] / bound,
                  mean["pipeline"] / (mean["pipeline"] - mean["decode (torchvision, RGB)"])))
    # Each decoder in place of the full-size decode of a pipeline that decodes whole images.
    for name in [name for name in mean if name.startswith("decode (simplejpeg")]:
        if module is None:
            print("{}: the pipeline at best {:.2f}x{}".format(
                name, mean["pipeline"] / (mean["pipeline"] - mean["decode (torchvision, RGB)"]
                                          + mean[name]), pixel_difference(name, photos, decoded)))


def pixel_difference(name: str, photos: List[bytes], decoded: List[torch.Tensor]) -> str:
    """simplejpeg's pixels against the pipeline's decode: the largest and the mean difference
    in levels of 255."""
    import simplejpeg

    options = {"fastdct": "fastdct" in name, "fastupsample": "fastupsample" in name}
    largest, means = 0, []
    for data, tensor in zip(photos, decoded):
        other = torch.from_numpy(simplejpeg.decode_jpeg(data, **options)).permute(2, 0, 1)
        difference = (other.int() - tensor.int()).abs()
        largest = max(largest, int(difference.max()))
        means.append(float(difference.float().mean()))
    return "; pixels against torchvision's: at most {} levels, {:.2f} on average".format(
        largest, statistics.mean(means))


if __name__ == "__main__":
    main()
