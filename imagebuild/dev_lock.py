"""``python -m imagebuild.dev_lock FROZEN LOCK`` (``make lock-dev``): the development lock with
the sha256 of every file, as the image locks have them.

FROZEN is ``pip freeze`` of a virtual env that installed ``requirements/dev.in`` (every
package at one version). pip, run by this interpreter, is asked which file of each version it
would install here (``pip install --dry-run --ignore-installed --no-deps --report``: nothing
is installed, and only metadata is fetched where the index serves it) and with which sha256;
LOCK gets one ``NAME==VERSION --hash=sha256:...`` per package. ``make venv`` installs it with
``--require-hashes --no-deps``: a file that changed on the index, or a package missing from
the lock, stops the install. The hashes are of the files for this interpreter and platform
(CPython 3.11, Linux x86-64), like the image locks'.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import List

from imagebuild.lock import Pin, pins

HEADER = """\
# Fully pinned resolution of requirements/dev.in for Python 3.11 on Linux x86-64, with the
# sha256 of the file pip picks for each (`make lock-dev` regenerates it: imagebuild/dev_lock.py).
# make venv installs it with --require-hashes --no-deps; do not edit by hand.
"""


def render(locked: List[Pin]) -> str:
    """The lock file's text for ``locked`` (name, version, sha256)."""
    return HEADER + "".join("{}=={} \\\n    --hash=sha256:{}\n".format(name, version, digest)
                            for name, version, digest in locked)


def resolve(frozen: str) -> List[Pin]:
    """(name, version, sha256) of each pin in ``frozen``, as pip would install it here."""
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "report.json")
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--dry-run", "--ignore-installed", "--no-deps", "--report", report, "-r", frozen],
            capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit("imagebuild.dev_lock: pip could not resolve {}: {}".format(
                frozen, " ".join(result.stderr.split())[-500:]))
        with open(report) as handle:
            return pins(json.load(handle))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagebuild.dev_lock",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("frozen", help="pip freeze of the env that installed dev.in")
    parser.add_argument("lock", help="the lock file to write (requirements/dev.lock)")
    args = parser.parse_args(argv)
    locked = resolve(args.frozen)
    with open(args.lock, "w") as handle:
        handle.write(render(locked))
    print("{}: {} packages with their sha256".format(args.lock, len(locked)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
