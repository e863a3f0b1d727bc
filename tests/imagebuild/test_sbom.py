"""imagebuild/sbom.py: a CycloneDX 1.6 document of what is installed, valid against the
format's published JSON schema (shipped in cyclonedx-python-lib), the locked packages with
their hashes, licences where the metadata states them, the Debian packages dpkg lists, the base
image reference and the project's code, what it cannot know marked in ``compositions``, package
URLs encoded as the purl reference implementation (packageurl-python) encodes them, the same
bytes for the same packages."""

import json
import subprocess
import sys

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from conftest import REPO
from imagebuild.sbom import (
    base_component,
    bom,
    installed_metadata,
    licenses,
    os_components,
    project_component,
    purl,
    read_dpkg_status,
    read_lock,
    read_os_release,
)

SHA = "ab" * 32


def validation_error(document):
    """None when ``document`` is a valid CycloneDX 1.6 JSON BOM, else the schema's complaint."""
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document))
    return None if error is None else str(error).splitlines()[0]


def site(tmp_path, *packages):
    """A site-packages folder holding ``(name, version, extra METADATA lines)`` dist-infos."""
    for name, version, extra in packages:
        info = tmp_path / "{}-{}.dist-info".format(name.replace("-", "_"), version)
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}\n"
                                       .format(name, version, extra))
    return str(tmp_path)


def write_lock(path, *entries):
    path.write_text("# header\n" + "".join("{}=={} \\\n    --hash=sha256:{}\n".format(*e)
                                           for e in entries))
    return path


def test_a_valid_document_listing_locked_and_base_packages(tmp_path):
    packages = site(tmp_path, ("Google_Cloud-Storage", "2.10.0", "License: Apache 2.0"),
                    ("numpy", "1.21.6", "Classifier: License :: OSI Approved :: BSD License"),
                    ("dumb-init", "1.2.5.post1", "License-Expression: MIT"))
    lock = read_lock(write_lock(tmp_path / "x.lock", ("google-cloud-storage", "2.10.0", SHA),
                                ("dumb-init", "1.2.5.post1", SHA)))
    document = bom("xrt", lock, installed_metadata([packages]))
    assert validation_error(document) is None
    by_name = {c["name"]: c for c in document["components"]}
    assert sorted(by_name) == ["dumb-init", "google-cloud-storage", "numpy"]
    assert by_name["google-cloud-storage"]["hashes"] == [{"alg": "SHA-256", "content": SHA}]
    assert by_name["google-cloud-storage"]["purl"] == "pkg:pypi/google-cloud-storage@2.10.0"
    assert "hashes" not in by_name["numpy"]
    assert [p["value"] for c in document["components"] for p in c["properties"]] == [
        "lock", "lock", "base"]
    assert by_name["dumb-init"]["licenses"] == [{"expression": "MIT"}]
    assert by_name["numpy"]["licenses"] == [{"license": {"name": "BSD License"}}]


def test_the_schema_check_can_fail():
    assert "required" in validation_error({"bomFormat": "CycloneDX", "specVersion": "1.6",
                                           "version": 1, "components": [{"name": "x"}]})


def test_the_same_packages_give_the_same_bytes(tmp_path):
    packages = [site(tmp_path, ("absl-py", "1.4.0", ""))]
    lock = read_lock(write_lock(tmp_path / "x.lock", ("absl-py", "1.4.0", SHA)))
    first = json.dumps(bom("pjrt", lock, installed_metadata(packages)))
    assert json.dumps(bom("pjrt", lock, installed_metadata(packages))) == first
    assert "timestamp" not in first
    assert json.dumps(bom("xrt", lock, installed_metadata(packages))) != first


@pytest.mark.parametrize("text, expected", [
    ("License: Apache License, Version 2.0", [{"license": {"name":
                                                          "Apache License, Version 2.0"}}]),
    ("License: UNKNOWN", []),
    ("License: " + "x" * 500, []),  # the licence's text, not its name
    ("", []),
])
def test_licences(tmp_path, text, expected):
    metadata = installed_metadata([site(tmp_path, ("p", "1", text))])["p"]
    assert licenses(metadata) == expected


def run_sbom(tmp_path, lock):
    return subprocess.run([sys.executable, str(REPO / "imagebuild" / "sbom.py"), str(lock),
                           "pjrt"], capture_output=True, text=True)


def test_a_lock_not_installed_as_written_is_refused(tmp_path):
    result = run_sbom(tmp_path, write_lock(tmp_path / "x.lock", ("pytest", "0.0.1", SHA)))
    assert result.returncode == 65 and result.stdout == ""
    assert result.stderr.strip() == ("sbom.py: locked but not installed at the locked version:"
                                     " pytest")


def test_the_script_describes_this_interpreter(tmp_path):
    import pytest as installed

    lock = write_lock(tmp_path / "x.lock", ("pytest", installed.__version__, SHA))
    result = run_sbom(tmp_path, lock)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert validation_error(document) is None
    [entry] = [c for c in document["components"] if c["name"] == "pytest"]
    assert entry["hashes"][0]["content"] == SHA


@pytest.mark.parametrize("kind, namespace, name, version, qualifiers", [
    ("pypi", None, "torch", "2.9.0+cu128", {}),
    ("pypi", None, "dumb-init", "1.2.5.post1", {}),
    ("deb", "debian", "libstdc++6", "12.2.0-14+deb12u1", {"arch": "amd64",
                                                         "distro": "debian-12"}),
    ("deb", "debian", "bsdutils", "1:2.38.1-5+b1", {"arch": "amd64"}),
    ("deb", "debian", "libc6", "2.36-9~bpo 1", {"arch": "amd64"}),
    ("docker", "tpu-pytorch", "xla", "r1.11_3.7", {"repository_url": "gcr.io"}),
    ("docker", None, "tpu-standin", "sha256:" + "a" * 64, {"tag": "xrt"}),
])
def test_package_urls_are_encoded_as_the_reference_implementation_does(
        kind, namespace, name, version, qualifiers):
    expected = PackageURL(type=kind, namespace=namespace, name=name, version=version,
                          qualifiers=qualifiers).to_string()
    assert purl(kind, name, version, namespace, qualifiers) == expected
    assert "+" not in expected.split("?")[0]


DPKG_STATUS = """Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u10
Description: GNU C Library
 a continuation line: with a colon

Package: old-tool
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: bsdutils
Status: install ok installed
Architecture: amd64
Version: 1:2.38.1-5+b1
"""
OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'


def os_files(tmp_path):
    (tmp_path / "status").write_text(DPKG_STATUS)
    (tmp_path / "os-release").write_text(OS_RELEASE)
    return tmp_path / "status", tmp_path / "os-release"


def test_the_installed_debian_packages_and_the_distribution(tmp_path):
    status, release = os_files(tmp_path)
    found = os_components(read_dpkg_status(str(status)), read_os_release(str(release)))
    assert [(c["type"], c["name"], c["version"]) for c in found] == [
        ("operating-system", "debian", "12"), ("library", "libc6", "2.36-9+deb12u10"),
        ("library", "bsdutils", "1:2.38.1-5+b1")]  # the config-files-only package is not
    assert found[1]["purl"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=debian-12"
    assert found[1]["properties"] == [{"name": "tpu-xla:source", "value": "os"}]
    assert read_dpkg_status(str(tmp_path / "none")) is None


def test_a_bundled_debian_package_is_listed_as_bundled(tmp_path):
    # The pjrt image's libjpeg-turbo: copied next to the region decoder by a build stage, not
    # installed in the image, so not in its dpkg status.
    lock = write_lock(tmp_path / "x.lock")
    status, release = os_files(tmp_path)
    bundled = tmp_path / "bundled"
    bundled.write_text("Package: libjpeg62-turbo\nStatus: install ok installed\n"
                       "Architecture: amd64\nVersion: 1:2.1.5-2\n")
    # A base that has the package installed as well: two components, two bom-refs.
    status.write_text(status.read_text() + "\n" + bundled.read_text())
    result = subprocess.run([sys.executable, str(REPO / "imagebuild" / "sbom.py"), str(lock),
                             "pjrt", "--dpkg-status", str(status), "--os-release", str(release),
                             "--bundled-dpkg-status", str(bundled)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    components = json.loads(result.stdout)["components"]
    references = [c["bom-ref"] for c in components]
    assert len(references) == len(set(references))
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(result.stdout)
    assert error is None, str(error).splitlines()[0]
    found = {(c["name"], c["properties"][0]["value"]): (c["purl"], c["properties"])
             for c in components if c.get("purl", "").startswith("pkg:deb/")}
    assert ("libjpeg62-turbo", "os") in found
    assert found["libjpeg62-turbo", "bundled"] == (
        "pkg:deb/debian/libjpeg62-turbo@1:2.1.5-2?arch=amd64&distro=debian-12",
        [{"name": "tpu-xla:source", "value": "bundled"}])
    assert found["libc6", "os"][1] == [{"name": "tpu-xla:source", "value": "os"}]
    # The distribution is listed once, from the image's own os-release.
    assert [c["name"] for c in json.loads(result.stdout)["components"]
            if c["type"] == "operating-system"] == ["debian"]


@pytest.mark.parametrize("reference, name, version, digest, expected_purl", [
    ("gcr.io/tpu-pytorch/xla:r1.11_3.7", "gcr.io/tpu-pytorch/xla", "r1.11_3.7", None,
     "pkg:docker/tpu-pytorch/xla@r1.11_3.7?repository_url=gcr.io"),
    ("gcr.io/tpu-pytorch/xla:r1.11_3.7@sha256:" + "b" * 64, "gcr.io/tpu-pytorch/xla",
     "r1.11_3.7", "b" * 64, "pkg:docker/tpu-pytorch/xla@sha256:" + "b" * 64 +
     "?repository_url=gcr.io&tag=r1.11_3.7"),
    ("localhost:5000/tpu-standin:xrt", "localhost:5000/tpu-standin", "xrt", None,
     "pkg:docker/tpu-standin@xrt?repository_url=localhost:5000"),
    ("tpu-standin:pjrt", "tpu-standin", "pjrt", None, "pkg:docker/tpu-standin@pjrt"),
])
def test_the_base_image_reference(reference, name, version, digest, expected_purl):
    entry = base_component(reference)
    assert (entry["name"], entry["version"], entry["purl"]) == (name, version, expected_purl)
    assert entry.get("hashes") == (None if digest is None else
                                   [{"alg": "SHA-256", "content": digest}])
    assert {"name": "tpu-xla:reference", "value": reference} in entry["properties"]


def test_the_project_is_identified_by_its_files(tmp_path):
    code = tmp_path / "launcher"
    (code / "__pycache__").mkdir(parents=True)
    (code / "__main__.py").write_text("print(1)\n")
    first = project_component([str(code)])["hashes"]
    (code / "__pycache__" / "x.pyc").write_bytes(b"compiled")
    assert project_component([str(code)])["hashes"] == first  # bytecode is not the code
    (code / "__main__.py").write_text("print(2)\n")
    assert project_component([str(code)])["hashes"] != first


def test_what_it_cannot_know_is_marked_and_the_whole_is_valid(tmp_path):
    status, release = os_files(tmp_path)
    (tmp_path / "site-packages").mkdir()
    packages = site(tmp_path / "site-packages", ("numpy", "1.21.6", ""))
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "x.py").write_text("")
    extra = os_components(read_dpkg_status(str(status)), read_os_release(str(release)))
    extra += [base_component("gcr.io/tpu-pytorch/xla:r1.11_3.7"),
              project_component([str(tmp_path / "app")])]
    document = bom("xrt", {}, installed_metadata([packages]), extra)
    assert validation_error(document) is None
    refs = [c["bom-ref"] for c in document["components"]]
    assert len(refs) == len(set(refs)) == 6
    assert document["compositions"] == [
        {"aggregate": "incomplete", "assemblies": ["image"]},
        {"aggregate": "unknown", "dependencies": sorted(refs)}]


def test_the_script_says_what_it_could_not_read(tmp_path):
    lock = write_lock(tmp_path / "x.lock")
    status, release = os_files(tmp_path)
    result = subprocess.run([sys.executable, str(REPO / "imagebuild" / "sbom.py"), str(lock),
                             "pjrt", "--dpkg-status", str(tmp_path / "none"),
                             "--os-release", str(release)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    notes = {p["name"]: p["value"] for p in json.loads(result.stdout)["metadata"]["properties"]}
    assert notes == {"tpu-xla:os-packages": "not listed: no {}".format(tmp_path / "none"),
                     "tpu-xla:base-image": "not named (no --base)"}
    missing = subprocess.run([sys.executable, str(REPO / "imagebuild" / "sbom.py"), str(lock),
                              "pjrt", "--project", str(tmp_path / "nowhere")],
                             capture_output=True, text=True)
    assert missing.returncode == 66 and missing.stdout == ""
    assert missing.stderr.strip() == "sbom.py: --project {} is not a folder".format(
        tmp_path / "nowhere")
