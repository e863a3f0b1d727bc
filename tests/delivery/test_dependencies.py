"""Every package the project's code imports is declared where its users install from, not
left to whichever package happens to bring it: pyproject.toml for launcher/ and trainer/ (the
image's code) and for python -m jobspec, requirements/dev.in (pinned) for all of them."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from importlib import metadata
from typing import Dict, Set

import pytest

from conftest import REPO

# What the base images provide and pyproject.toml leaves to them (its comment says why).
FROM_THE_BASE = {"torch", "torch-xla", "torchvision", "numpy", "pillow", "setuptools"}
FIRST_PARTY = {"launcher", "trainer", "jobspec", "imagebuild", "__future__"}


def imported_modules(package: str) -> Set[str]:
    """The absolute imports of ``package``'s files outside the standard library: the top-level
    name, or two levels in the ``google`` namespace (``google.api_core``, ``google.cloud``'s
    ``storage``), where one name stands for many distributions."""
    found = set()
    for path in (REPO / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module + "." + alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] in sys.stdlib_module_names or parts[0] in FIRST_PARTY:
                    continue
                depth = 3 if parts[:2] == ["google", "cloud"] else 2 if parts[0] == "google" else 1
                found.add(".".join(parts[:depth]))
    return found


def distribution_of(module: str) -> str:
    """The installed distribution that holds ``module`` (normalised name)."""
    owners = metadata.packages_distributions().get(module.split(".")[0], [])
    if len(owners) > 1:  # a namespace: the one whose files hold the module's folder
        origin = importlib.util.find_spec(module).submodule_search_locations[0]
        owners = [dist for dist in owners if any(
            str(dist_file.locate()).startswith(origin)
            for dist_file in metadata.distribution(dist).files or ())]
    assert len(owners) == 1, (module, owners)
    return normalise(owners[0])


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> Dict[str, Set[str]]:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(specs):
        return {normalise(re.split(r"[<>=!~\[; ]", spec)[0]) for spec in specs}

    groups = {"": names(project["dependencies"])}
    groups.update({group: names(specs) for group, specs in
                   project["optional-dependencies"].items()})
    return groups


@pytest.mark.parametrize("package, groups", [("launcher", ("", "tpu-node")),
                                             ("trainer", ("",)),
                                             ("jobspec", ("jobspec",))])
def test_every_imported_package_is_declared(package, groups):
    declared_groups = declared()
    wanted = set().union(*(declared_groups[group] for group in groups))
    missing = {module: distribution_of(module) for module in imported_modules(package)}
    missing = {module: dist for module, dist in missing.items()
               if dist not in wanted | FROM_THE_BASE}
    assert not missing, "{} imports packages pyproject.toml does not declare: {}".format(
        package, missing)


def test_every_declared_package_is_pinned_for_development():
    pinned = {normalise(line.split("==")[0]) for line in
              (REPO / "requirements" / "dev.in").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    declared_groups = declared()
    assert set().union(*declared_groups.values()) - pinned == set()


def test_the_scan_sees_namespace_packages_apart():
    assert distribution_of("google.api_core") == "google-api-core"
    assert distribution_of("google.cloud.storage") == "google-cloud-storage"
    assert "google.api_core" in imported_modules("trainer")
