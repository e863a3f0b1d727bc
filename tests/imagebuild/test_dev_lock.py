"""The development lock is hash-checked like the image locks: every pin of
requirements/dev.lock carries the sha256 of its file, make venv installs it with
--require-hashes, every package dev.in names is in it, and imagebuild/dev_lock.py writes
that format from pip's own report (run here on two pins, without installing anything)."""

import re
import subprocess

from conftest import REPO
from imagebuild.dev_lock import main, render
from imagebuild.sbom import normalize, read_lock

LOCK = REPO / "requirements" / "dev.lock"


def test_every_pin_has_its_sha256_and_every_direct_dependency_is_pinned():
    locked = read_lock(str(LOCK))
    assert len(locked) > 100
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for _, digest in locked.values())
    wanted = {normalize(line.split("==")[0]): line.split("==")[1].strip()
              for line in (REPO / "requirements" / "dev.in").read_text().splitlines()
              if "==" in line and not line.startswith("#")}
    for name, version in wanted.items():
        name = name.split("[")[0]  # an extra's packages are pinned under their own names
        assert locked[name][0] == version, name


def test_make_venv_installs_the_lock_with_hash_checking():
    recipe = subprocess.run(["make", "-C", str(REPO), "-n", "-W", "requirements/dev.lock",
                             ".venv/.installed"], capture_output=True, text=True).stdout
    [install] = [line for line in recipe.splitlines() if "-r requirements/dev.lock" in line]
    assert "--require-hashes" in install and "--no-deps" in install


def test_the_lock_is_written_from_pips_report(tmp_path):
    frozen = tmp_path / "frozen.txt"
    locked = read_lock(str(LOCK))
    frozen.write_text("six=={}\nidna=={}\n".format(locked["six"][0], locked["idna"][0]))
    assert main([str(frozen), str(tmp_path / "dev.lock")]) == 0
    written = (tmp_path / "dev.lock").read_text()
    assert read_lock(str(tmp_path / "dev.lock")) == {name: locked[name]
                                                     for name in ("idna", "six")}
    assert written == render([("idna",) + locked["idna"], ("six",) + locked["six"]])
    assert written.startswith("# Fully pinned resolution of requirements/dev.in")
