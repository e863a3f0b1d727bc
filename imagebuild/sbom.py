"""``python sbom.py LOCK RUNTIME > sbom.cdx.json``: a CycloneDX 1.6 JSON bill of materials of
the Python packages installed in this interpreter, written during the image build.

Every installed distribution is a component (name, version, package URL, licence where its
metadata states one); those the lock installed also carry the lock's sha256 and the property
``tpu-xla:source=lock``, the base's own ``tpu-xla:source=base``. The document is a pure
function of what is installed: no timestamp, and a serial number derived from its content, so
two builds that install the same packages write the same bytes.

Runs with the image's own Python (3.7 in the xrt image) and only its standard library.
"""

import email.parser
import json
import os
import re
import sys
import uuid

SPEC_VERSION = "1.6"
LICENSE_CLASSIFIER = "License :: "
MAX_LICENSE_NAME = 120  # a longer License field is the licence's text, not its name


def normalize(name):
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    """{normalized name: (version, sha256)} of a lock file written by imagebuild/lock.py."""
    with open(path) as handle:
        text = handle.read().replace("\\\n", " ")
    entries = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        spec, _, digest = line.partition("--hash=sha256:")
        name, _, version = spec.strip().partition("==")
        entries[normalize(name)] = (version.strip(), digest.strip())
    return entries


def installed_metadata(paths=None):
    """{normalized name: parsed METADATA/PKG-INFO} of the distributions on ``sys.path``
    (first one wins, as for imports)."""
    found = {}
    parser = email.parser.HeaderParser()
    for entry in paths if paths is not None else sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for name in sorted(os.listdir(entry)):
            if name.endswith(".dist-info"):
                meta_path = os.path.join(entry, name, "METADATA")
            elif name.endswith(".egg-info"):
                meta_path = os.path.join(entry, name, "PKG-INFO")
                if not os.path.isdir(os.path.join(entry, name)):
                    meta_path = os.path.join(entry, name)
            else:
                continue
            try:
                with open(meta_path, encoding="utf-8", errors="replace") as handle:
                    metadata = parser.parse(handle)
            except OSError:
                continue
            if metadata.get("Name"):
                found.setdefault(normalize(metadata["Name"]), metadata)
    return found


def licenses(metadata):
    """CycloneDX licence choices from a distribution's metadata, or [] when it states none."""
    expression = (metadata.get("License-Expression") or "").strip()
    if expression:
        return [{"expression": expression}]
    stated = (metadata.get("License") or "").strip()
    if stated and "\n" not in stated and len(stated) <= MAX_LICENSE_NAME \
            and stated.upper() not in ("UNKNOWN", "NONE"):
        return [{"license": {"name": stated}}]
    names = [value[len(LICENSE_CLASSIFIER):].split(" :: ")[-1]
             for value in metadata.get_all("Classifier") or []
             if value.startswith(LICENSE_CLASSIFIER)]
    return [{"license": {"name": name}} for name in sorted(set(names))]


def component(name, metadata, locked):
    version = metadata.get("Version", "")
    purl = "pkg:pypi/{}@{}".format(name, version)
    entry = {"type": "library", "bom-ref": purl, "name": name, "version": version,
             "purl": purl}
    found = licenses(metadata)
    if found:
        entry["licenses"] = found
    lock_entry = locked.get(name)
    if lock_entry and lock_entry[0] == version:
        entry["hashes"] = [{"alg": "SHA-256", "content": lock_entry[1]}]
        entry["properties"] = [{"name": "tpu-xla:source", "value": "lock"}]
    else:
        entry["properties"] = [{"name": "tpu-xla:source", "value": "base"}]
    return entry


def bom(runtime, locked, installed):
    components = [component(name, installed[name], locked) for name in sorted(installed)]
    body = {"bomFormat": "CycloneDX", "specVersion": SPEC_VERSION, "version": 1,
            "metadata": {"component": {"type": "container", "bom-ref": "image",
                                       "name": "pytorch-xla-trainer", "version": runtime}},
            "components": components}
    digest = json.dumps(body, sort_keys=True).encode("utf-8")
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "tpu-xla-sbom:" + digest.hex())
    return dict(body, serialNumber="urn:uuid:{}".format(serial))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python sbom.py LOCK RUNTIME > sbom.cdx.json\n")
        return 64
    locked = read_lock(argv[0])
    installed = installed_metadata()
    missing = sorted(name for name, (version, _) in locked.items()
                     if name not in installed or installed[name].get("Version") != version)
    if missing:  # the lock was not installed as written: the SBOM would not describe it
        sys.stderr.write("sbom.py: locked but not installed at the locked version: {}\n".format(
            ", ".join(missing)))
        return 65
    json.dump(bom(argv[1], locked, installed), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
