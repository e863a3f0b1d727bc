"""``python -m imagebuild.lock xrt|pjrt``: regenerate ``requirements/image-RUNTIME.lock``.

The lock holds every package the Dockerfile installs on top of the base image, transitive ones
included, each with its version and the sha256 of the one file pip chose for the image's
platform (Linux x86-64, the base's CPython). It is resolved by pip itself inside the stand-in
of the base (``make standin-base``), which has the base's interpreter and the packages that
matter (``standin/*.Dockerfile``): ``pip install --dry-run --report`` of
``requirements/image-RUNTIME.txt`` lists what pip would install there. Packages the resolution
needs that the stand-in already has are *assumed from the base*; the lock's header lists them,
and the Dockerfile checks them at build time (``pip install --no-index`` of the top-level pins
after the lock: pip names any requirement the base does not satisfy).

The existing lock constrains the resolution: every package it holds stays at its version
(pip's ``-c``), except the top-level pins of ``requirements/image-RUNTIME.txt``, which say
their own version. So a run after editing one pin moves only what that pin needs, and a run
with nothing edited writes the same lock. ``--upgrade`` (``make lock-images UPGRADE=1``)
resolves from scratch, to the newest versions the pins allow.

Needs a Docker engine (``DOCKER``, ``DOCKER_HOST``) and the stand-in image; a CA bundle pip
must trust (``PIP_CERT``) is mounted read-only, never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Tuple

from imagebuild.sbom import normalize, read_lock

REPO = Path(__file__).resolve().parent.parent
PYTHONS = {"xrt": "3.7", "pjrt": "3.10"}
STANDIN = "tpu-standin:{}"
# pip's --dry-run and --report came with 22.2; the last pip for Python 3.7 is 24.0. Only the
# throwaway resolving container gets it: the images keep their base's pip.
RESOLVER_PIP = "pip==24.0"
_SCRIPT = """set -e
python -m pip list --format=json > /tmp/base.json
python -m pip install --quiet --disable-pip-version-check {pip} >&2
for mode in install all; do
  extra=; [ $mode = all ] && extra=--ignore-installed
  python -m pip install --quiet --disable-pip-version-check --dry-run $extra \
    --report /tmp/$mode.json -r /req/image-{runtime}.txt -c /constraints/kept.txt >&2
done
python -c 'import json; print(json.dumps({{n: json.load(open("/tmp/%s.json" % n))
  for n in ("base", "install", "all")}}))'
"""

Pin = Tuple[str, str, str]  # (name, version, sha256)


def kept_pins(runtime: str, root: Path = REPO) -> List[str]:
    """``name==version`` of every package the existing lock holds, but for the top-level pins
    (they name their own version): the constraints that keep a re-lock where it was."""
    lock = root / "requirements" / "image-{}.lock".format(runtime)
    if not lock.is_file():
        return []
    pins_text = (root / "requirements" / "image-{}.txt".format(runtime)).read_text()
    top_level = {normalize(line.split("==")[0].strip()) for line in pins_text.splitlines()
                 if "==" in line and not line.lstrip().startswith("#")}
    return ["{}=={}".format(name, version) for name, (version, _) in
            sorted(read_lock(str(lock)).items()) if name not in top_level]


def resolve(runtime: str, docker: str = "docker", kept: Iterable[str] = ()
            ) -> Dict[str, object]:
    """pip's reports from inside the stand-in: ``base`` (pip list), ``install`` (what a
    plain install adds) and ``all`` (the whole resolution, as if nothing were installed),
    each constrained to the ``kept`` pins."""
    with tempfile.TemporaryDirectory(prefix="lock-constraints-") as constraints:
        Path(constraints, "kept.txt").write_text("".join(pin + "\n" for pin in kept))
        return _resolve(runtime, docker, constraints)


def _resolve(runtime: str, docker: str, constraints: str) -> Dict[str, object]:
    result = run_in_standin(runtime, docker, _SCRIPT.format(pip=RESOLVER_PIP, runtime=runtime),
                            {str(REPO / "requirements"): "/req", constraints: "/constraints"})
    if result.returncode != 0:
        raise SystemExit("imagebuild.lock: resolving in {} failed: {}\nHINT: where a pin you "
                         "moved needs another version of a locked package, re-resolve from "
                         "scratch: make lock-images UPGRADE=1".format(
                             STANDIN.format(runtime), result.stderr.strip()[-2000:]))
    return json.loads(result.stdout)


def run_in_standin(runtime: str, docker: str, script: str, mounts: Dict[str, str]
                   ) -> subprocess.CompletedProcess:
    """``sh -c script`` in a throwaway container of the stand-in, on the host's network, with
    ``mounts`` (host folder -> container folder) read-only and ``PIP_CERT``'s bundle."""
    command = [docker, "run", "--rm", "--network", "host", "--entrypoint", "sh"]
    for host, container in sorted(mounts.items()):
        command += ["-v", "{}:{}:ro".format(host, container)]
    cert = os.environ.get("PIP_CERT")
    if cert:
        command += ["-v", "{}:/tmp/pip-cert.pem:ro".format(cert),
                    "-e", "PIP_CERT=/tmp/pip-cert.pem"]
    command += [STANDIN.format(runtime), "-c", script]
    return subprocess.run(command, capture_output=True, text=True)


def pins(report: Dict[str, object]) -> List[Pin]:
    """(name, version, sha256) of each package a pip ``--report`` installs, sorted by name."""
    found = []
    for item in report["install"]:
        info = item["download_info"]
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not digest:
            raise SystemExit("imagebuild.lock: no sha256 for {} ({})".format(
                item["metadata"]["name"], info.get("url")))
        found.append((normalize(item["metadata"]["name"]), item["metadata"]["version"], digest))
    return sorted(found)


def locked_pins(reports: Dict[str, object]) -> List[Pin]:
    """What the lock installs: everything a plain install adds in the stand-in, and every
    top-level pin even where the stand-in has it already (the real base may have another
    version; the image gets the pinned one either way)."""
    added = pins(reports["install"])
    names = {name for name, _, _ in added}
    requested = pins({"install": [item for item in reports["all"]["install"]
                                  if item.get("requested")]})
    return sorted(added + [pin for pin in requested if pin[0] not in names])


def assumed(reports: Dict[str, object]) -> List[Tuple[str, str]]:
    """(name, version in the stand-in) of what the whole resolution needs that the lock does
    not install: what the lock assumes the base provides.

    Only what the stand-in has: whatever else the lock's packages need, a plain install adds,
    so it is locked. A package the whole resolution names beyond both comes from resolving a
    base package afresh (torch from the index brings its CUDA wheels, which a pin that needs
    torch, such as timm, drags in): the base's own business, not an assumption of the lock."""
    locked = {name for name, _, _ in locked_pins(reports)}
    needed = {name for name, _, _ in pins(reports["all"])}
    base = {normalize(entry["name"]): entry["version"] for entry in reports["base"]}
    return sorted((name, base[name]) for name in needed - locked if name in base)


def render(runtime: str, locked: Iterable[Pin], from_base: Iterable[Tuple[str, str]]) -> str:
    lines = [
        "# Every package the {} image's Dockerfile installs on top of its base, with the sha256 "
        "of the".format(runtime),
        "# file pip chose (Linux x86-64, CPython {}). Generated by `make lock-images` "
        "(imagebuild/lock.py)".format(PYTHONS[runtime]),
        "# from requirements/image-{}.txt inside the stand-in {}; do not edit by hand.".format(
            runtime, STANDIN.format(runtime)),
        "# The Dockerfile installs it with --require-hashes --no-deps, then checks that the "
        "base provides",
        "# the rest. Assumed from the base (the stand-in's versions):",
    ]
    assumed_text = ", ".join("{}=={}".format(name, version) for name, version in from_base)
    words, line = assumed_text.split(" "), "#  "
    for word in words:
        if len(line) + len(word) + 1 > 96:
            lines.append(line)
            line = "#  "
        line += " " + word
    lines.append(line)
    for name, version, digest in locked:
        lines.append("{}=={} \\\n    --hash=sha256:{}".format(name, version, digest))
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagebuild.lock", description=__doc__)
    parser.add_argument("runtimes", nargs="+", choices=sorted(PYTHONS))
    parser.add_argument("--upgrade", action="store_true",
                        help="resolve from scratch instead of keeping the existing lock's pins")
    args = parser.parse_args(argv)
    docker = os.environ.get("DOCKER", "docker")
    for runtime in args.runtimes:
        reports = resolve(runtime, docker, [] if args.upgrade else kept_pins(runtime))
        path = REPO / "requirements" / "image-{}.lock".format(runtime)
        locked = locked_pins(reports)
        path.write_text(render(runtime, locked, assumed(reports)))
        print("{}: {} packages".format(path.relative_to(REPO), len(locked)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
