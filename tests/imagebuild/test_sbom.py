"""imagebuild/sbom.py: a CycloneDX 1.6 document of what is installed, valid against the
format's published JSON schema (shipped in cyclonedx-python-lib), the locked packages with
their hashes, licences where the metadata states them, the same bytes for the same packages."""

import json
import subprocess
import sys

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from conftest import REPO
from imagebuild.sbom import bom, installed_metadata, licenses, read_lock

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
