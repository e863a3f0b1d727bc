"""docs/own-code.md shows the example's files exactly as they are in docs/examples/own-code/,
which the container tier builds and runs (tests/images/test_own_code.py): the page cannot
drift from what is tested."""

import re

import pytest

from conftest import REPO

GUIDE = REPO / "docs" / "own-code.md"
EXAMPLE = REPO / "docs" / "examples" / "own-code"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def code_blocks(text):
    """(language, body) of each fenced block of a Markdown page."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(text)]


@pytest.mark.parametrize("language, name", [("dockerfile", "Dockerfile"),
                                            ("python", "train.py")])
def test_the_guide_shows_the_tested_file_whole(language, name):
    shown = [body for lang, body in code_blocks(GUIDE.read_text()) if lang == language]
    assert shown == [(EXAMPLE / name).read_text()], "docs/own-code.md's {} block differs " \
        "from docs/examples/own-code/{}".format(language, name)


def test_code_blocks_are_found_whole():
    page = "text\n```python\na = 1\n\nb = 2\n```\nmore\n```sh\nls\n```\n"
    assert code_blocks(page) == [("python", "a = 1\n\nb = 2\n"), ("sh", "ls\n")]
