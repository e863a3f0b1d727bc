"""What the damaged-image policy (issue 57) costs where nothing is damaged, as a share of the
work it rides on (run: python bench/damage_checks.py [--per-class N] [--rounds N]).

- a data worker, per image: ``jpeg_limits.layout`` and ``problem`` (the markers read, the
  scans counted) against the image's whole training decode (``images.train_image``, which
  now includes them), on the photographs ``bench/decode_pairs.py`` uses (about 480 x 450 px,
  quality 90, 4:2:0), CPU seconds of this process (``time.process_time``), torch at one
  thread as in a worker;
- a data worker, per image, the region decoder's read to the End Of Image marker
  (``jpeg_decode.CHECK_TO_END``: the rows below the crop entropy-decoded, what finds a zeroed
  run or a frame whose sampling its scan does not match) against the decode without it, for
  the training crop and the evaluation crop: the two alternate round by round in this
  process, each round's ratio taken (only where the region decoder is built);
- a data worker, per damaged file: each kind of ``tests/damaged_jpegs.py`` (made from every
  photograph; the bombs once) through ``images.train_image`` to its ``DamagedImage``, CPU
  per file against the good files' decode, and the most the process's peak memory grew
  over them (Linux's VmHWM, reset first): what a bucket's damage costs a worker;
- the trainer's side, per training step: ``damage.stand_in`` on a local batch of 512 images of
  224 px with no damaged row (what every step now pays: its labels scanned for a masked one).

Printed: the median over rounds of each figure and the ratios. The policy adds nothing else
to a batch without damage.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO / "bench"]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def per_item(function, items, rounds):
    """Median over ``rounds`` of the CPU seconds per item of ``function`` over ``items``."""
    found = []
    for _ in range(rounds + 1):  # the first warms up
        started = time.process_time()
        for index, item in enumerate(items):
            function(item, index)
        found.append((time.process_time() - started) / len(items))
    return statistics.median(found[1:] or found)


def tail_ratio(items, function, rounds, jpeg_decode) -> float:
    """Median over ``rounds`` of (CPU of ``function`` over ``items`` with
    ``jpeg_decode.CHECK_TO_END``) / (the same without), the two alternating in each round and
    their order swapped round by round."""
    ratios = []
    try:
        for round_ in range(rounds + 1):  # the first warms up
            seconds = {}
            for checked in ((True, False) if round_ % 2 else (False, True)):
                jpeg_decode.CHECK_TO_END = checked
                seconds[checked] = per_item(function, items, 0)
            ratios.append(seconds[True] / seconds[False])
    finally:
        jpeg_decode.CHECK_TO_END = True
    return statistics.median(ratios[1:])


def peak_growth(function) -> "int | None":
    """Bytes the process's peak memory grew by while ``function`` ran (Linux: VmHWM reset
    through /proc/self/clear_refs); None where that cannot be read."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        function()
        return None

    def kib(key):
        with open("/proc/self/status") as status:
            return int(next(line.split()[1] for line in status if line.startswith(key + ":")))

    before = kib("VmRSS")
    function()
    return (kib("VmHWM") - before) * 1024


def damaged_costs(pictures, rounds, images) -> dict:
    """{kind: (CPU seconds per file, peak memory growth, files that decoded, files)} of each
    kind of damage. A file decodes where libjpeg's entropy decoder resynchronises after the
    damage and ends exactly at the marker: no decoder has a warning to go by there."""
    import damaged_jpegs

    undetected = set()

    def refused(data, index):
        try:
            images.train_image(data, 224, images.draws(0, 0, index), "damaged.jpg")
        except images.DamagedImage:
            return
        undetected.add(data)  # the entropy decoder resynchronised: no warning to go by

    kinds = {kind: [damage(data) for data in pictures]
             for kind, damage in damaged_jpegs.DAMAGE.items()}
    kinds.update((kind, [make()]) for kind, make in damaged_jpegs.BOMBS.items())
    costs = {}
    for kind, files in kinds.items():
        undetected.clear()
        seconds = per_item(refused, files, rounds)
        costs[kind] = (seconds, peak_growth(functools.partial(per_item, refused, files, 0)),
                       len(undetected), len(files))
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    import photos
    from trainer.data import damage, images, jpeg_decode, jpeg_limits

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        pictures = photos.plain_jpegs(Path(work) / "tree", args.per_class, 500)
    checks = per_item(lambda data, _: jpeg_limits.problem(jpeg_limits.layout(data)), pictures,
                      args.rounds)
    decode = per_item(lambda data, index: images.train_image(
        data, 224, images.draws(0, 0, index)), pictures, args.rounds)
    tails = {kind: tail_ratio(pictures, decode_one, args.rounds, jpeg_decode)
             for kind, decode_one in (
                 ("training", lambda data, index: images.train_image(
                     data, 224, images.draws(0, 0, index))),
                 ("evaluation", lambda data, _: images.eval_image(data, 224)))
             } if jpeg_decode.decoder() == "region" else {}
    damaged = damaged_costs(pictures, args.rounds, images)
    x = torch.zeros((512, 3, 224, 224), dtype=torch.uint8)
    y = torch.arange(512, dtype=torch.int64)
    batches = [(x, y)] * 50
    step = per_item(lambda batch, index: damage.stand_in(batch[0], batch[1], 0, 0, index),
                    batches, args.rounds)
    print("{} photographs, {}, {} rounds".format(len(pictures), jpeg_decode.described(),
                                                 args.rounds))
    print("worker, per image: marker checks {:.1f} us of a training decode of {:.3f} ms "
          "({:.2%})".format(checks * 1e6, decode * 1e3, checks / decode))
    for kind, ratio in tails.items():
        print("worker, per {} image: the read to the End Of Image marker {:.3f}x the decode "
              "without it (median of {} paired rounds)".format(kind, ratio, args.rounds))
    for kind, (seconds, grown, decoded, files) in damaged.items():
        print("worker, per damaged file, {}: {:.3f} ms ({:.2f}x a good file's decode); peak "
              "memory grew {}; {} of {} decoded without a warning".format(
                  kind, seconds * 1e3, seconds / decode,
                  "{:.1f} MB".format(grown / 1e6) if grown is not None
                  else "(not measured: no /proc/self/clear_refs)", decoded, files))
    print("trainer, per step of 512: stand_in without damage {:.1f} us ({:.4f} us an image; "
          "a 64 ms v5e step: {:.3%})".format(step * 1e6, step * 1e6 / 512, step / 0.064))


if __name__ == "__main__":
    main()
