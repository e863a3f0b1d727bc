"""Every torchvision classification model through ``--model``: the smallest image size each
takes (the trainer's own check, ``trainer.models``, from 1 px up at a global batch of 2), and
with ``--train`` one ``--smoke`` step of ``python -m trainer.imagenet`` at that size on the XLA
CPU device. Run: ``python bench/models.py [--train] [NAME ...]``; prints one line a model.

This is the survey behind docs/trainers.md's table of models; not a test (all 80 train for
hours on 2 cores), the tests take three families (tests/trainer/test_imagenet.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from trainer import models  # noqa: E402
from trainer.errors import TrainerError  # noqa: E402

BATCH = 2
NUM_CLASSES = 10


def smallest_size(name: str) -> str:
    """The smallest image size ``--model=name`` takes at a global batch of ``BATCH``, as
    the trainer's check finds it (or its refusal)."""
    make = models.builder(name)
    try:
        model = models.build_checked(name, make, NUM_CLASSES, BATCH, 1)
        models.check_input(name, model, make, NUM_CLASSES, BATCH, 1)
    except TrainerError as error:
        if "--image_size=" not in error.hint:
            return "refused: " + error.message
        return error.hint.split("--image_size=")[1].split()[0]
    return "1"


def smoke(name: str, size: str) -> str:
    with tempfile.TemporaryDirectory(prefix="bench-models-") as job:
        done = subprocess.run(
            [sys.executable, "-m", "trainer.imagenet", "--model=" + name, "--fake_data",
             "--smoke", "--image_size=" + size, "--batch_size={}".format(BATCH),
             "--num_workers=0", "--job_dir=" + job], cwd=str(REPO),
            env=dict(os.environ, PJRT_DEVICE="CPU"), capture_output=True, text=True)
    if done.returncode:
        return "exit {}: {}".format(done.returncode, (done.stderr.strip().splitlines() or [""])[-1])
    return "trains"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", action="store_true", help="also one --smoke step each")
    parser.add_argument("names", nargs="*", help="models (default: every one)")
    args = parser.parse_args()
    for name in args.names or models.torchvision_names():
        start = time.monotonic()
        size = smallest_size(name)
        line = "{} smallest {}".format(name, size)
        if args.train and size.isdigit():
            line += ", " + smoke(name, size)
        print("{} ({:.0f} s)".format(line, time.monotonic() - start), flush=True)


if __name__ == "__main__":
    main()
