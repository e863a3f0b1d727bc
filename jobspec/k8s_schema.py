"""Check a JobSet manifest against the JobSet CRD's own OpenAPI v3 schema and its pod
template (and every ``metadata``) against Kubernetes' core/v1 schema, both vendored in
``jobspec/schemas`` (README there: the release tag and version, and how to refresh them).

What ``kubectl apply`` would refuse before anything runs, one finding per problem with its
field path: a field the schema does not have (the API server's strict field validation,
kubectl's default, refuses it; "did you mean" when a name is close), a wrong type, a value
outside an enum, a missing required field. A YAML ``null`` counts as a field left out, as
kubectl's apply does.

The CRD also carries CEL rules (``x-kubernetes-validations``) that only the API server can
run: each one that applies to a field of the manifest is listed as a warning "not checked",
never passed in silence.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import os
from typing import Any, Dict, Iterator, List, Tuple

import yaml

from jobspec.findings import ERROR, WARNING, Finding, join

JOBSET_RELEASE = "v0.12.0"  # kubernetes-sigs/jobset tag of the vendored CRD
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
KUBERNETES_VERSION = "1.34"
_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
_CRD_FILE = os.path.join(_DIR, "jobset.x-k8s.io_jobsets.yaml")
_CORE_FILE = os.path.join(_DIR, "k8s-core-v{}.json".format(KUBERNETES_VERSION))
_CORE_ID = "urn:jobspec:k8s-core-v{}".format(KUBERNETES_VERSION)
_POD_TEMPLATE = "io.k8s.api.core.v1.PodTemplateSpec"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_CEL_SHOWN = 90  # characters of a CEL rule quoted in its "not checked" line


def check_jobset_schema(manifest: Dict[str, Any]) -> List[Finding]:
    """Schema findings for a parsed JobSet manifest (a mapping), sorted by field path, then
    the CEL rules that were not checked."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(_closed_crd_schema(), registry=_registry())
    instance = _without_nulls(manifest)
    findings = [finding for error in validator.iter_errors(instance)
                for finding in _findings(error)]
    findings.sort(key=lambda finding: finding.path)
    return findings + _cel_not_checked(instance, _crd_schema(), "")


@functools.lru_cache(maxsize=None)
def _crd_schema() -> Dict[str, Any]:
    """The CRD's schema of ``v1alpha2`` as published (CEL rules included)."""
    with open(_CRD_FILE) as handle:  # 0.8 MB: libyaml's loader where PyYAML has it (25x)
        crd = yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    for version in crd["spec"]["versions"]:
        if version["name"] == JOBSET_API.split("/")[1]:
            return version["schema"]["openAPIV3Schema"]
    raise LookupError("{} has no {}".format(_CRD_FILE, JOBSET_API))  # a broken vendoring


@functools.lru_cache(maxsize=None)
def _core_schema() -> Dict[str, Any]:
    with open(_CORE_FILE) as handle:
        return json.load(handle)


@functools.lru_cache(maxsize=None)
def _core_names() -> Dict[int, str]:
    """Definition name by the identity of its schema object (names the object that holds an
    unknown field)."""
    return {id(schema): name.rsplit(".", 1)[-1]
            for name, schema in _core_schema()["$defs"].items()}


def _registry() -> Any:
    from referencing import Registry, Resource

    return Registry().with_resource(_CORE_ID, Resource.from_contents(_core_schema()))


@functools.lru_cache(maxsize=None)
def _closed_crd_schema() -> Dict[str, Any]:
    """The CRD schema with unknown fields refused, and the pod template and each ``metadata``
    replaced by core/v1's definitions (the CRD has them only as open objects or copies)."""
    schema = copy.deepcopy(_crd_schema())
    _close(schema)
    schema["properties"]["metadata"] = _core_ref(_OBJECT_META)
    schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind",
                                                                   "metadata", "spec"})
    job = schema["properties"]["spec"]["properties"]["replicatedJobs"]["items"]["properties"][
        "template"]["properties"]
    job["metadata"] = _core_ref(_OBJECT_META)
    job["spec"]["properties"]["template"] = _core_ref(_POD_TEMPLATE)
    return schema


def _core_ref(name: str) -> Dict[str, str]:
    return {"$ref": "{}#/$defs/{}".format(_CORE_ID, name)}


def _close(schema: Any) -> None:
    """``additionalProperties: false`` on every object schema that lists its fields and does
    not keep unknown ones (a structural schema prunes them; strict validation refuses them)."""
    if not isinstance(schema, dict):
        return
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        schema["additionalProperties"] = False
    for key in ("properties", "patternProperties"):
        for item in schema.get(key, {}).values():
            _close(item)
    for key in ("items", "additionalProperties"):
        _close(schema.get(key))
    for key in ("allOf", "anyOf", "oneOf"):
        for item in schema.get(key, []):
            _close(item)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _findings(error: Any) -> List[Finding]:
    path = _path(error.absolute_path)
    kind, schema, instance = error.validator, error.schema, error.instance
    if kind == "additionalProperties" and isinstance(instance, dict):
        known = sorted(schema.get("properties", {}))
        owner = _core_names().get(id(schema))
        where = "core/v1 {}".format(owner) if owner else "the JobSet API here"
        return [Finding(ERROR, join(path, key), "is not a field of {}".format(where),
                        _did_you_mean(str(key), known, "remove it"))
                for key in instance if key not in known]
    if kind == "required" and isinstance(instance, dict):
        return [Finding(ERROR, join(path, key), "is required", "add {}".format(key))
                for key in error.validator_value if key not in instance]
    where = path or "(top)"
    if kind == "type":
        wanted = error.validator_value
        wanted = [name for name in (wanted if isinstance(wanted, list) else [wanted])
                  if name != "null"]
        return [Finding(ERROR, where, "is {}, the schema wants {}".format(
            _kind(instance), " or ".join(_article(name) for name in wanted)),
            "write it as {}".format(" or ".join(_article(name) for name in wanted)))]
    if kind == "enum":
        allowed = [str(value) for value in error.validator_value]
        return [Finding(ERROR, where, "{!r} is not one of {}".format(instance, ", ".join(
            allowed)), _did_you_mean(str(instance), allowed, "use one of them"))]
    if kind in ("anyOf", "oneOf"):
        return [Finding(ERROR, where, "is {}, which fits none of the types the schema "
                        "allows".format(_kind(instance)),
                        "see the field in the JobSet or Kubernetes API reference")]
    return [Finding(ERROR, where, " ".join(str(error.message).split())[:200],
                    "see the field in the JobSet or Kubernetes API reference")]


def _cel_not_checked(value: Any, schema: Any, path: str) -> List[Finding]:
    """A warning for each CEL rule of the CRD on a field present in ``value``."""
    if not isinstance(schema, dict):
        return []
    findings = [_cel_finding(rule, path) for rule in schema.get("x-kubernetes-validations", ())
                if isinstance(rule, dict)]
    for key, item, sub in _children(value, schema):
        findings += _cel_not_checked(item, sub, join(path, key) if isinstance(key, str)
                                     else "{}[{}]".format(path, key))
    return findings


def _children(value: Any, schema: Dict[str, Any]) -> Iterator[Tuple[Any, Any, Any]]:
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                yield key, item, properties[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield index, item, schema["items"]


def _cel_finding(rule: Dict[str, Any], path: str) -> Finding:
    text = " ".join(str(rule.get("rule", "")).split())
    if len(text) > _CEL_SHOWN:
        text = text[:_CEL_SHOWN] + "..."
    when = " (on update)" if "oldSelf" in text else ""
    message = rule.get("message")
    return Finding(WARNING, path or "(top)", "not checked: the CRD's CEL rule{} {!r}{}".format(
        when, text, " ({})".format(message) if message else ""),
        "the API server checks it at kubectl apply; this checker cannot run CEL")


def _path(parts: Any) -> str:
    path = ""
    for part in parts:
        path = "{}[{}]".format(path, part) if isinstance(part, int) else join(path, part)
    return path


def _did_you_mean(word: str, choices: List[str], otherwise: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return "did you mean {}?".format(close[0]) if close else otherwise


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _article(name: str) -> str:
    return {"object": "a mapping", "array": "a list", "integer": "a whole number",
            "number": "a number", "string": "a string", "boolean": "true or false"}.get(
                name, name)
