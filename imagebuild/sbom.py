"""``python sbom.py LOCK RUNTIME [--base REF] [--project DIR]... [--bundled-dpkg-status FILE]
> sbom.cdx.json``: a CycloneDX
1.6 JSON bill of materials of the image, written during the image build.

Components:

- every Python distribution installed in this interpreter (name, version, package URL, licence
  where its metadata states one); those the lock installed also carry the lock's sha256 and
  the property ``tpu-xla:source=lock``, the base's own ``tpu-xla:source=base``;
- every Debian package ``dpkg`` lists as installed (``/var/lib/dpkg/status``), with
  ``tpu-xla:source=os``, and the distribution itself from ``/etc/os-release``;
- every Debian package a build stage copied files of into the project
  (``--bundled-dpkg-status``: the pjrt image's libjpeg-turbo, next to the region decoder in
  ``/app/trainer/data``), with ``tpu-xla:source=bundled``;
- the base image as the build named it (``--base``; its digest as a hash when it is pinned by
  one);
- the project: the files under each ``--project`` folder (``/app/launcher``, ``/app/trainer``),
  identified by the sha256 of their sorted paths and contents.

What it cannot know is said in ``compositions``: the image's contents are ``incomplete``
(files no package manager owns, such as a conda env's non-Python packages or a hand-built
interpreter, are not listed), and the dependency graph between components is ``unknown`` (not
recorded). Package URLs are percent-encoded as the purl specification asks (``+`` is ``%2B``).

The document is a pure function of its inputs: no timestamp, and a serial number derived from
its content, so two builds that install the same packages write the same bytes.

Runs with the image's own Python (3.7 in the xrt image) and only its standard library.
Exit codes: 0 written, 64 usage, 65 the lock is not installed as written, 66 an input that
cannot be read.
"""

import argparse
import email.parser
import hashlib
import json
import os
import re
import sys
import uuid
from urllib.parse import quote

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


def purl(kind, name, version, namespace=None, qualifiers=None):
    """A package URL with each part percent-encoded as the purl specification asks (``+`` as
    ``%2B``; ``:`` and ``/`` inside a part kept, as the reference implementation keeps them)."""
    def encode(value):
        return quote(value, safe="/").replace("%3A", ":")

    text = "pkg:{}/".format(kind)
    if namespace:
        text += "/".join(encode(part) for part in namespace.split("/")) + "/"
    text += encode(name)
    if version:
        text += "@" + encode(version)
    pairs = sorted((key, value) for key, value in (qualifiers or {}).items() if value)
    if pairs:
        text += "?" + "&".join("{}={}".format(key, encode(value)) for key, value in pairs)
    return text


def component(name, metadata, locked):
    """A Python distribution's component."""
    version = metadata.get("Version", "")
    reference = purl("pypi", name, version)
    entry = {"type": "library", "bom-ref": reference, "name": name, "version": version,
             "purl": reference}
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


def read_os_release(path):
    """{KEY: value} of an ``os-release`` file, or {} when there is none."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            found[key.strip()] = value.strip().strip("\"'")
    return found


def read_dpkg_status(path):
    """[{Field: value}] of the packages dpkg lists as installed in ``path`` (its status file),
    or None when there is no such file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    parser = email.parser.HeaderParser()
    packages = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not paragraph.strip():
            continue
        fields = parser.parsestr(paragraph.strip() + "\n")
        if (fields.get("Status") or "").split()[-1:] == ["installed"] and fields.get("Package"):
            packages.append({key: fields[key] for key in ("Package", "Version", "Architecture")
                             if fields.get(key)})
    return packages


def os_components(packages, os_release, source="os"):
    """The distribution and its installed Debian packages as components (``source``: "os",
    or "bundled" for a package whose files were copied into the project's folders by a build
    stage, not installed)."""
    vendor = os_release.get("ID", "debian")
    distro = "{}-{}".format(vendor, os_release["VERSION_ID"]) \
        if os_release.get("VERSION_ID") else None
    found = []
    if os_release and source == "os":
        found.append({"type": "operating-system", "bom-ref": "os", "name": vendor,
                      "version": os_release.get("VERSION_ID", ""),
                      "description": os_release.get("PRETTY_NAME", vendor)})
    for package in packages:
        name, version = package["Package"], package.get("Version", "")
        reference = purl("deb", name, version, vendor, {
            "arch": package.get("Architecture"), "distro": distro})
        # A bundled copy of a package the image also has installed is another component.
        found.append({"type": "library", "name": name,
                      "bom-ref": reference if source == "os" else source + ":" + reference,
                      "version": version, "purl": reference,
                      "properties": [{"name": "tpu-xla:source", "value": source}]})
    return found


def base_component(reference):
    """The base image as ``docker build`` was told it (``NAME[:TAG][@sha256:DIGEST]``)."""
    name, _, digest = reference.partition("@")
    repository, tag = name, ""
    if ":" in name.rsplit("/", 1)[-1]:
        repository, tag = name.rsplit(":", 1)
    parts = repository.split("/")
    registry = parts.pop(0) if len(parts) > 1 and re.search(r"[.:]|^localhost$", parts[0]) \
        else None
    entry = {"type": "container", "bom-ref": "base-image", "name": repository,
             "version": tag or digest, "purl": purl(
                 "docker", parts[-1], digest or tag, "/".join(parts[:-1]) or None,
                 {"repository_url": registry, "tag": tag if digest else None}),
             "properties": [{"name": "tpu-xla:source", "value": "base-image"},
                            {"name": "tpu-xla:reference", "value": reference}]}
    if digest.startswith("sha256:"):
        entry["hashes"] = [{"alg": "SHA-256", "content": digest[len("sha256:"):]}]
    return entry


def tree_digest(folders):
    """sha256 of the sorted (path, content) pairs of every file under ``folders``."""
    digest = hashlib.sha256()
    files = []
    for folder in folders:
        for root, dirs, names in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            files.extend(os.path.join(root, name) for name in names)
    for path in sorted(files):
        with open(path, "rb") as handle:
            content = handle.read()
        digest.update(path.encode("utf-8") + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def project_component(folders):
    """The project's own code, identified by the digest of its files."""
    return {"type": "application", "bom-ref": "project", "name": "pytorch-xla-trainer-code",
            "description": "the launcher and the trainers, as copied into the image",
            "hashes": [{"alg": "SHA-256", "content": tree_digest(folders)}],
            "properties": [{"name": "tpu-xla:source", "value": "project"},
                           {"name": "tpu-xla:hash-of", "value":
                            "sorted paths and sha256 of the files under " + ", ".join(
                                sorted(folders))}]}


def bom(runtime, locked, installed, extra=(), notes=()):
    """The document: the Python distributions, then ``extra`` components (OS packages, base
    image, project), what it cannot know (``compositions``) and ``notes``, (name, value)
    properties of the document saying where a part came from or why it is missing."""
    components = [component(name, installed[name], locked) for name in sorted(installed)]
    components += sorted(extra, key=lambda entry: entry["bom-ref"])
    metadata = {"component": {"type": "container", "bom-ref": "image",
                              "name": "pytorch-xla-trainer", "version": runtime}}
    if notes:
        metadata["properties"] = [{"name": name, "value": value} for name, value in notes]
    body = {"bomFormat": "CycloneDX", "specVersion": SPEC_VERSION, "version": 1,
            "metadata": metadata,
            "components": components,
            # The image holds files no package manager owns (a conda env's non-Python
            # packages, a hand-built interpreter, the base's own sources), and the relations
            # between components are not recorded: say so rather than look complete.
            "compositions": [
                {"aggregate": "incomplete", "assemblies": ["image"]},
                {"aggregate": "unknown",
                 "dependencies": sorted(entry["bom-ref"] for entry in components)}]}
    digest = json.dumps(body, sort_keys=True).encode("utf-8")
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "tpu-xla-sbom:" + digest.hex())
    return dict(body, serialNumber="urn:uuid:{}".format(serial))


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="sbom.py", description="a CycloneDX SBOM of the image")
    parser.add_argument("lock")
    parser.add_argument("runtime")
    parser.add_argument("--base", help="the base image reference the build used")
    parser.add_argument("--project", action="append", default=[],
                        help="a folder of the project's own code (repeatable)")
    parser.add_argument("--dpkg-status", default="/var/lib/dpkg/status")
    parser.add_argument("--os-release", default="/etc/os-release")
    parser.add_argument("--bundled-dpkg-status",
                        help="dpkg's entries of packages a build stage copied files of into "
                             "the project (the pjrt image's libjpeg-turbo); absent: none")
    return parser.parse_args(argv)


def main(argv):
    try:
        args = parse_args(argv)
    except SystemExit as stop:  # argparse printed its one-line usage error
        return 0 if stop.code == 0 else 64
    locked = read_lock(args.lock)
    installed = installed_metadata()
    missing = sorted(name for name, (version, _) in locked.items()
                     if name not in installed or installed[name].get("Version") != version)
    if missing:  # the lock was not installed as written: the SBOM would not describe it
        sys.stderr.write("sbom.py: locked but not installed at the locked version: {}\n".format(
            ", ".join(missing)))
        return 65
    unreadable = [folder for folder in args.project if not os.path.isdir(folder)]
    if unreadable:
        sys.stderr.write("sbom.py: --project {} is not a folder\n".format(unreadable[0]))
        return 66
    packages = read_dpkg_status(args.dpkg_status)
    extra = os_components(packages or [], read_os_release(args.os_release))
    notes = [("tpu-xla:os-packages", "from " + args.dpkg_status if packages is not None
              else "not listed: no " + args.dpkg_status)]
    bundled = read_dpkg_status(args.bundled_dpkg_status) if args.bundled_dpkg_status else None
    extra += os_components(bundled or [], read_os_release(args.os_release), "bundled")
    if args.base:
        extra.append(base_component(args.base))
    else:
        notes.append(("tpu-xla:base-image", "not named (no --base)"))
    if args.project:
        extra.append(project_component(args.project))
    json.dump(bom(args.runtime, locked, installed, extra, notes), sys.stdout, indent=1,
              sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
