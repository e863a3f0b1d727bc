"""Check a parsed YAML value against a schema of a Google API description (the discovery
documents google-api-python-client ships), recursively: every field's type (object, array,
string, integer, integer-as-string ``int64``, number, boolean, enum, ``google-duration``),
names the schema does not have (with "did you mean"), and the fields its descriptions mark
"Required.".

It accepts and refuses what gcloud's ``--config`` does: gcloud loads the YAML and decodes it
with apitools (``encoding.DictToMessage``), which takes a single value where the API has a
list (a one-element list), reads an empty value as a field left out, and refuses a YAML
number or boolean where the API has a string
("Expected type <class 'str'> for field tpuTfVersion, found 2.11"): an unquoted ``2.11`` is
a float, and ``2.10`` would even become ``2.1``. A duration passes gcloud as any string but
the API refuses anything but seconds (``"604800s"``).

This knows only what the API description says; the TPU rules are in ``jobspec.rules``.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Dict, FrozenSet, List

from jobspec.api import schemas
from jobspec.findings import ERROR, Finding, join

_INTEGER = re.compile(r"[-+]?\d+")
_NUMBER_FORMATS = ("double", "float")
# google.protobuf.Duration in JSON: seconds with up to 9 fractional digits and an "s".
_DURATION = re.compile(r"-?\d+(\.\d{1,9})?s")


def check_shape(value: Any, document: str, schema: str, supplied: FrozenSet[str] = frozenset()
                ) -> List[Finding]:
    """Findings for ``value`` as an instance of ``schema`` in API description ``document``.
    ``supplied``: required fields that come from elsewhere (gcloud's command line fills in
    ``jobId`` and ``region``), so their absence from the file is fine."""
    return _Walk(document, supplied).object(value, schema, "")


class _Walk:
    """One walk over a file: the API description and the fields supplied from elsewhere."""

    def __init__(self, document: str, supplied: FrozenSet[str]) -> None:
        self.document, self.supplied = document, supplied

    def object(self, value: Any, schema: str, path: str) -> List[Finding]:
        if not isinstance(value, dict):
            return [_wrong_type(path or "(top)", value, "an object (a YAML mapping)")]
        properties: Dict[str, dict] = schemas(self.document)[schema].get("properties", {})
        findings = []
        for key, item in value.items():
            if item is None:  # gcloud reads an empty value as a field left out
                continue
            if key in properties:
                findings += self.field(item, properties[key], join(path, key))
                continue
            close = difflib.get_close_matches(str(key), sorted(properties), n=1, cutoff=0.6)
            findings.append(Finding(ERROR, join(path, key), "is not a field of {}".format(
                _short(schema)), "did you mean {}?".format(close[0]) if close else "remove it"))
        for key, spec in sorted(properties.items()):
            if (spec.get("description", "").startswith("Required")
                    and value.get(key) is None and key not in self.supplied):
                findings.append(Finding(ERROR, join(path, key), "is required by the API",
                                        "add {}".format(key)))
        return findings

    def field(self, value: Any, spec: dict, path: str) -> List[Finding]:
        if "$ref" in spec:
            return self.object(value, spec["$ref"], path)
        kind = spec.get("type")
        if kind == "array":
            if not isinstance(value, list):  # gcloud reads a single value as a list of one
                return self.field(value, spec.get("items", {}), path)
            return [finding for index, item in enumerate(value)
                    for finding in self.field(item, spec.get("items", {}),
                                              "{}[{}]".format(path, index))]
        if kind == "object":
            if not isinstance(value, dict):
                return [_wrong_type(path, value, "a mapping")]
            values = spec.get("additionalProperties", {})
            return [finding for key, item in value.items()
                    for finding in self.field(item, values, join(path, key))]
        return _scalar(value, spec, path)


def _scalar(value: Any, spec: dict, path: str) -> List[Finding]:
    kind, form = spec.get("type"), spec.get("format")
    if kind == "boolean" and not isinstance(value, bool):
        return [_wrong_type(path, value, "true or false")]
    if kind == "integer" or form in ("int64", "uint64"):
        if isinstance(value, bool) or not (isinstance(value, int) or (
                isinstance(value, str) and _INTEGER.fullmatch(value.strip()))):
            return [_wrong_type(path, value, "a whole number")]
        return []
    if kind == "number" or form in _NUMBER_FORMATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return [_wrong_type(path, value, "a number")]
        return []
    if kind == "string":
        if isinstance(value, (bool, int, float)):  # gcloud refuses these (module docstring)
            return [Finding(ERROR, path, "is {} {}, the API wants a string".format(
                _article(value), _kind(value)), 'write it in quotes: "{}"'.format(
                    str(value).lower() if isinstance(value, bool) else value))]
        if not isinstance(value, str):
            return [_wrong_type(path, value, "a string")]
        if form == "google-duration" and not _DURATION.fullmatch(value.strip()):
            return [Finding(ERROR, path, "{!r} is not a duration the API reads".format(value),
                            'write it in seconds, e.g. "604800s" for 7 days')]
        allowed = [name for name in spec.get("enum", ()) if "UNSPECIFIED" not in name]
        if allowed and str(value) not in allowed:
            close = difflib.get_close_matches(str(value), allowed, n=1)
            return [Finding(ERROR, path, "{!r} is not one of the API's values".format(value),
                            "did you mean {}?".format(close[0]) if close else
                            "use one of {}".format(", ".join(allowed)))]
    return []


def _wrong_type(path: str, value: Any, wanted: str) -> Finding:
    return Finding(ERROR, path, "is {} {}, the API wants {}".format(
        _article(value), _kind(value), wanted), "write it as {}".format(wanted))


def _kind(value: Any) -> str:
    if value is None:
        return "empty value"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


def _article(value: Any) -> str:
    return "an" if value is None else "a"


def _short(schema: str) -> str:
    return schema.split("__")[-1].replace("GoogleCloudAiplatformV1", "")
