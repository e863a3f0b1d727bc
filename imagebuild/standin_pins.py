"""``python -m imagebuild.standin_pins xrt|pjrt...`` (``make standin-pins``): add each file's
sha256 to ``standin/RUNTIME-pins.txt``.

The pins file names every package a stand-in installs at an exact version (edit the versions by
hand; the set is what the real base's build leaves, see ``standin/*.Dockerfile``). This asks
pip, inside the current stand-in (the base's interpreter and platform), which file it would
install for each pin (``pip install --dry-run --no-deps --ignore-installed --report``) and
rewrites the file with that file's sha256, so that ``standin/*.Dockerfile`` can install it in
pip's hash-checking mode: a file that changed on the index stops the stand-in's build.

Needs a Docker engine (``DOCKER``, ``DOCKER_HOST``) and the stand-in image; ``PIP_CERT`` as for
``imagebuild.lock``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable, List

from imagebuild.lock import PYTHONS, REPO, RESOLVER_PIP, STANDIN, Pin, pins, run_in_standin
from imagebuild.sbom import read_lock

_SCRIPT = """set -e
python -m pip install --quiet --disable-pip-version-check {pip} >&2
python -m pip install --quiet --disable-pip-version-check --dry-run --no-deps \
  --ignore-installed --report /tmp/report.json -r /pins/pins.txt >&2
cat /tmp/report.json
"""
HEADER = """\
# Every package standin/{runtime}.Dockerfile installs, at the version the stand-in held
# when requirements/image-{runtime}.lock was resolved in it, with the sha256 of the file pip
# picks (Linux x86-64, CPython {python}): the stand-in, and so what `make lock-images` assumes
# of the base, no longer moves with PyPI. pip and setuptools come with the interpreter.
# Edit versions by hand; `make standin-pins` (imagebuild/standin_pins.py) writes the hashes.
"""


def path_of(runtime: str, root: Path = REPO) -> Path:
    return root / "standin" / "{}-pins.txt".format(runtime)


def hashed(runtime: str, docker: str, versions: Iterable[str]) -> List[Pin]:
    """(name, version, sha256) of the file pip picks in the stand-in for each ``name==version``."""
    with tempfile.TemporaryDirectory(prefix="standin-pins-") as folder:
        Path(folder, "pins.txt").write_text("".join(pin + "\n" for pin in versions))
        result = run_in_standin(runtime, docker, _SCRIPT.format(pip=RESOLVER_PIP),
                                {folder: "/pins"})
    if result.returncode != 0:
        raise SystemExit("imagebuild.standin_pins: pip in {} failed: {}".format(
            STANDIN.format(runtime), result.stderr.strip()[-2000:]))
    return pins(json.loads(result.stdout))


def render(runtime: str, found: Iterable[Pin]) -> str:
    lines = [HEADER.format(runtime=runtime, python=PYTHONS[runtime]).rstrip("\n")]
    lines += ["{}=={} \\\n    --hash=sha256:{}".format(*pin) for pin in found]
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagebuild.standin_pins",
                                     description=__doc__)
    parser.add_argument("runtimes", nargs="+", choices=sorted(PYTHONS))
    args = parser.parse_args(argv)
    docker = os.environ.get("DOCKER", "docker")
    for runtime in args.runtimes:
        path = path_of(runtime)
        versions = ["{}=={}".format(name, version)
                    for name, (version, _) in sorted(read_lock(str(path)).items())]
        found = hashed(runtime, docker, versions)
        if [pin[:2] for pin in found] != [tuple(v.split("==")) for v in versions]:
            raise SystemExit("imagebuild.standin_pins: pip picked {} for {}".format(
                [pin[:2] for pin in found], versions))
        path.write_text(render(runtime, found))
        print("{}: {} packages".format(path.relative_to(REPO), len(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
