"""imagebuild/pin_bases.py's rewrite: every place that names a base gets the same digest, a
second pin moves it, and the files still agree with jobspec's table (the registry side runs in
the container tier: tests/images/test_reproducible.py)."""

import re
import shutil

import pytest

from conftest import REPO
from imagebuild.pin_bases import FILES, PinError, current_bases, pin, without_digest
from jobspec.images import DEFAULT_BASES

DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


@pytest.fixture
def checkout(tmp_path):
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(str(REPO / name), str(tmp_path / name))
    return tmp_path


def references(root, tagged):
    """Every reference to ``tagged`` in the four files, with what follows it."""
    pattern = re.compile(re.escape(tagged) + r"(@sha256:[0-9a-f]{64})?")
    return {name: pattern.findall((root / name).read_text()) for name in FILES}


def test_the_checkout_names_the_bases_jobspec_names():
    assert {runtime: without_digest(ref) for runtime, ref in current_bases(REPO).items()} == \
        {runtime: without_digest(ref) for runtime, ref in DEFAULT_BASES.items()}


@pytest.mark.parametrize("runtime", sorted(DEFAULT_BASES))
def test_every_reference_is_pinned_and_moved_together(checkout, runtime):
    tagged = without_digest(DEFAULT_BASES[runtime])
    assert pin(checkout, tagged, DIGEST_A) != []
    found = references(checkout, tagged)
    assert all(found[name] for name in ("Makefile", "cloudbuild.yaml", "jobspec/images.py"))
    assert {digest for digests in found.values() for digest in digests} == {"@" + DIGEST_A}
    pin(checkout, tagged, DIGEST_B)
    assert {d for ds in references(checkout, tagged).values() for d in ds} == {"@" + DIGEST_B}
    assert current_bases(checkout)[runtime] == tagged + "@" + DIGEST_B


def test_a_checkout_without_bases_is_one_line(tmp_path):
    (tmp_path / "Makefile").write_text("all:\n")
    with pytest.raises(PinError, match="names no BASE_IMAGE_<runtime>"):
        current_bases(tmp_path)
