"""The region decoder's C code (trainer/data/_jpeg_region.c) fuzzed under AddressSanitizer and
UBSan: run by ``make fuzz``, not ``make test`` (a sanitized build and thousands of decodes).

    python tests/sanitized_jpeg_region.py [--mutants N] [--seed S]

Builds the module with ``-fsanitize=address,undefined`` into a temporary folder
(``imagebuild/jpeg_region.py --sanitize``) and, in a child process with the sanitizer's
runtime preloaded, decodes mutants of a few JPEGs (4:2:0, 4:2:2, 4:4:4, grayscale,
progressive, restart markers): every truncation kind (with and without an End Of Image marker
appended), bit flips, header bytes rewritten, two files spliced; each at the four scales with
boxes drawn inside the image. Each call may raise ValueError (damage is its verdict); any
sanitizer report, crash or other exception fails with the mutant's seed. Where the compiler
cannot build with the sanitizers, one line says so and the run passes (exit 0).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import importlib.util, io, random, sys
from PIL import Image

path, mutants, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spec = importlib.util.spec_from_file_location("_jpeg_region", path)
region = importlib.util.module_from_spec(spec)
spec.loader.exec_module(region)

def encoded(mode, **options):
    picture = Image.effect_noise((97, 61), 64).convert("RGB").convert(mode)
    buffer = io.BytesIO()
    picture.save(buffer, "JPEG", quality=85, **options)
    return buffer.getvalue()

SOURCES = [encoded("RGB", subsampling=2), encoded("RGB", subsampling=1),
           encoded("RGB", subsampling=0), encoded("L"), encoded("RGB", progressive=True),
           encoded("RGB", subsampling=2, restart_marker_blocks=1)]

def mutant(rng):
    data = bytearray(rng.choice(SOURCES))
    kind = rng.randrange(4)
    if kind == 0:  # cut, with or without an End Of Image marker
        data = data[:rng.randrange(2, len(data))] + (b"\xff\xd9" if rng.random() < 0.5 else b"")
    elif kind == 1:  # bit flips
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
    elif kind == 2:  # header bytes rewritten (tables, frame, scan headers)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(2, min(len(data), 700))] = rng.randrange(256)
    else:  # two files spliced
        other = rng.choice(SOURCES)
        data = data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):]
    return bytes(data)

decoded = refused = 0
for number in range(mutants):
    rng = random.Random(seed * 1000003 + number)
    data = mutant(rng)
    for reduction in (1, 2, 4, 8):
        width, height = -(-97 // reduction), -(-61 // reduction)
        left, top = rng.randrange(width), rng.randrange(height)
        box = (left, top, rng.randint(left + 1, width), rng.randint(top + 1, height))
        try:
            region.decode(data, reduction, *box, rng.random() < 0.5, rng.random() < 0.5)
            decoded += 1
        except ValueError:
            refused += 1
        except Exception as error:
            print("mutant {} (seed {}): {}: {}".format(number, seed, type(error).__name__, error))
            sys.exit(1)
print("{} decodes, {} refused as damaged".format(decoded, refused))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2), "big"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        built = subprocess.run([sys.executable, str(REPO / "imagebuild" / "jpeg_region.py"),
                                str(REPO / "trainer" / "data" / "_jpeg_region.c"), work,
                                "--sanitize"], capture_output=True, text=True)
        runtime = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                                 text=True).stdout.strip()
        if built.returncode != 0 or not os.path.isabs(runtime):
            print("sanitized fuzz of the region decoder skipped: this compiler cannot build "
                  "with -fsanitize=address,undefined ({})".format(
                      (built.stderr.strip().splitlines() or ["no libasan"])[-1]))
            return 0
        [module] = Path(work).glob("_jpeg_region*.so")
        env = dict(os.environ, LD_PRELOAD=runtime,
                   ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",  # Python's own allocations
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        run = subprocess.run([sys.executable, "-c", CHILD, str(module), str(args.mutants),
                              str(args.seed)], capture_output=True, text=True, env=env)
    reports = [line for line in run.stderr.splitlines()
               if "AddressSanitizer" in line or "runtime error:" in line]
    if run.returncode != 0 or reports:
        print("sanitized fuzz of the region decoder failed (seed {}, exit {}):".format(
            args.seed, run.returncode))
        print("\n".join(reports or run.stdout.splitlines()[-3:] + run.stderr.splitlines()[-20:]))
        return 1
    print("sanitized fuzz of the region decoder (seed {}): {} mutants, {}".format(
        args.seed, args.mutants, run.stdout.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
