"""``python -m imagebuild.pin_bases [--root DIR]`` (``make pin-bases``): pin each profile's base
image to the digest its tag points at now.

A base is named in four places that must agree (tests/delivery): the Makefile's
``BASE_IMAGE_xrt``/``BASE_IMAGE_pjrt``, the Dockerfile's default, cloudbuild.yaml's defaults
and the pairing table in jobspec/images.py. For each profile this asks the registry which
digest ``NAME:TAG`` points at now (its HTTP API, ``imagebuild.registry``: nothing is pulled,
where a pull of the pjrt base is about 7 GB) and rewrites every reference to that base in the
four files as ``NAME:TAG@sha256:...``. Docker then pulls and builds that image by its digest
alone: the tag in the reference is ignored (it is there for readers), so a tag pushed again
changes nothing, and only a digest the registry no longer serves fails the build. Run it
again to move the pins (a new digest of the same tag).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List

from imagebuild.registry import RegistryError, manifest_digest

REPO = Path(__file__).resolve().parent.parent
FILES = ("Makefile", "Dockerfile", "cloudbuild.yaml", "jobspec/images.py")
DIGEST = r"@sha256:[0-9a-f]{64}"


class PinError(Exception):
    """A base that cannot be pinned; the message is one line."""


def current_bases(root: Path) -> Dict[str, str]:
    """runtime -> the base reference the Makefile under ``root`` names."""
    makefile = (root / "Makefile").read_text()
    found = dict(re.findall(r"^BASE_IMAGE_(\w+) := (\S+)$", makefile, re.MULTILINE))
    if not found:
        raise PinError("{} names no BASE_IMAGE_<runtime> := ...".format(root / "Makefile"))
    return found


def without_digest(reference: str) -> str:
    return reference.split("@", 1)[0]


def registry_digest(reference: str) -> str:
    """``sha256:...`` of ``reference``'s tag as its registry serves it now, asked of the
    registry's API: nothing is pulled (``imagebuild.registry``)."""
    try:
        return manifest_digest(without_digest(reference))
    except RegistryError as error:
        raise PinError(str(error))


def pin(root: Path, tagged: str, digest: str) -> List[str]:
    """Rewrite every reference to ``tagged`` (pinned or not) under ``root`` as
    ``tagged@digest``; returns the files changed."""
    pattern = re.compile(re.escape(tagged) + "(" + DIGEST + ")?(?![\\w.:-])")
    changed = []
    for name in FILES:
        path = root / name
        text = path.read_text()
        new = pattern.sub(tagged + "@" + digest, text)
        if new != text:
            path.write_text(new)
            changed.append(name)
    return changed


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m imagebuild.pin_bases", description=__doc__)
    parser.add_argument("--root", type=Path, default=REPO,
                        help="the checkout whose files to rewrite (default: this one)")
    args = parser.parse_args(argv)
    try:
        for runtime, reference in sorted(current_bases(args.root).items()):
            tagged = without_digest(reference)
            digest = registry_digest(tagged)
            changed = pin(args.root, tagged, digest)
            print("{}: {}@{} ({})".format(runtime, tagged, digest,
                                          ", ".join(changed) or "already pinned"))
    except PinError as error:
        print("pin-bases: {}".format(error), file=sys.stderr)
        print("HINT: check the network and your access to the base's registry (gcloud auth "
              "login; gcloud auth print-access-token must work) and run make pin-bases again",
              file=sys.stderr)
        return 69
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
