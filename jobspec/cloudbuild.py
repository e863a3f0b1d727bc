"""The cloudbuild.yaml rules that ``check-jsonschema --builtin-schema vendor.cloudbuild``
misses: every step names its builder image (``name``) and pins it (an explicit version tag or
a digest: a bare name or ``:latest`` moves under the build), and user-defined substitutions
start with ``_`` (Cloud Build rejects others)."""

from __future__ import annotations

import re
from typing import Any, List

from jobspec.findings import ERROR, Finding

# Built-in substitutions Cloud Build provides; anything else must start with "_".
BUILT_IN = {"PROJECT_ID", "PROJECT_NUMBER", "LOCATION", "BUILD_ID", "REPO_NAME", "REPO_FULL_NAME",
            "BRANCH_NAME", "TAG_NAME", "REVISION_ID", "COMMIT_SHA", "SHORT_SHA",
            "TRIGGER_NAME", "TRIGGER_BUILD_CONFIG_PATH", "SERVICE_ACCOUNT_EMAIL",
            "SERVICE_ACCOUNT", "REF_NAME"}
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
EXAMPLE_BUILDER = "gcr.io/cloud-builders/docker:24.0.9"
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def is_pinned(image: str) -> bool:
    """True when ``image`` names one version: a digest, or a tag other than ``latest``."""
    if _DIGEST.search(image):
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def check_cloudbuild(build: Any) -> List[Finding]:
    if not isinstance(build, dict):
        return [Finding(ERROR, "(top)", "not a mapping", "see cloudbuild.yaml")]
    findings = []
    for index, step in enumerate(build.get("steps") or []):
        if not isinstance(step, dict) or not step.get("name"):
            findings.append(Finding(ERROR, "steps[{}].name".format(index), "is missing",
                                    "name the builder image, e.g. " + EXAMPLE_BUILDER))
        elif not is_pinned(str(step["name"])):
            findings.append(Finding(ERROR, "steps[{}].name".format(index),
                                    "builder {} is not pinned".format(step["name"]),
                                    "name a version tag or a digest, e.g. " + EXAMPLE_BUILDER))
    for key in build.get("substitutions") or {}:
        if not str(key).startswith("_"):
            findings.append(Finding(ERROR, "substitutions.{}".format(key),
                                    "user substitutions must start with '_'",
                                    "rename it to _{}".format(key)))
    # "$$" is Cloud Build's escape for a literal "$" (shell variables in a bash step).
    for name in sorted(set(_REFERENCE.findall(_text(build).replace("$$", "")))):
        if not name.startswith("_") and name not in BUILT_IN:
            findings.append(Finding(ERROR, "${}".format(name), "is neither built in nor a "
                                    "user substitution", "rename it to _{}".format(name)))
    return findings


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(_text(item) for key, item in value.items() if key != "substitutions"
                        ) + " " + " ".join(_text(v) for v in (value.get("substitutions") or {}
                                                                    ).values())
    if isinstance(value, list):
        return " ".join(_text(item) for item in value)
    return str(value)
