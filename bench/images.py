"""Image benchmark (run: make bench-images, which finds or starts a Docker engine).

Builds both profiles the way the container tests do (``make standin-base`` then ``make build``
on the stand-in base) and prints each build's wall time, each image's size, and the size the
shipped Dockerfile adds on top of its base. ``--cold`` first removes the images and the
engine's build cache, so the times are those of a fresh machine (the Debian rootfs, the
interpreters' packages and the pins all come from the network).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import clean_environ  # noqa: E402
from containers import (  # noqa: E402
    DOCKER,
    IMAGE,
    RUNTIMES,
    STANDIN,
    build_steps,
    image_size,
    make,
)

ROOTFS = "tpu-standin-rootfs:bookworm"


def forget_everything() -> None:
    """Remove what a previous build left, so that nothing is cached."""
    names = [ROOTFS] + [name.format(runtime) for runtime in RUNTIMES for name in (STANDIN, IMAGE)]
    subprocess.run([DOCKER, "rmi", "-f"] + names, capture_output=True)
    subprocess.run([DOCKER, "builder", "prune", "-af"], capture_output=True, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true",
                        help="remove the images and the build cache first")
    args = parser.parse_args()
    if args.cold:
        forget_everything()
    env = clean_environ()
    print("{:<46} {:>9}".format("build (" + ("cold" if args.cold else "warm cache") + ")",
                                "seconds"))
    total = 0.0
    for runtime in RUNTIMES:
        for step in build_steps(runtime):
            started = time.monotonic()
            result = make(*step, env=env)
            seconds = time.monotonic() - started
            if result.returncode != 0:
                print(result.stderr[-3000:], file=sys.stderr)
                return 1
            total += seconds
            runtime_arg = next(arg for arg in step if arg.startswith("RUNTIME="))
            print("{:<46} {:>9.1f}".format("make {} {}".format(step[0], runtime_arg), seconds))
    print("{:<46} {:>9.1f}".format("all four builds", total))
    print()
    print("{:<10} {:>14} {:>14} {:>14} {:>8}".format("profile", "stand-in GB", "image GB",
                                                    "added GB", "ratio"))
    for runtime in RUNTIMES:
        base, image = image_size(STANDIN.format(runtime)), image_size(IMAGE.format(runtime))
        print("{:<10} {:>14.2f} {:>14.2f} {:>14.2f} {:>8.3f}".format(
            runtime, base / 1e9, image / 1e9, (image - base) / 1e9, image / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
