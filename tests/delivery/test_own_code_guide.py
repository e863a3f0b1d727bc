"""docs/own-code.md shows the examples' files exactly as they are in docs/examples/, which the
container tier builds and runs (tests/images/test_own_code.py, test_your_model.py): the page
cannot drift from what is tested."""

import re

import pytest

from conftest import REPO

GUIDE = REPO / "docs" / "own-code.md"
EXAMPLES = REPO / "docs" / "examples"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def code_blocks(text):
    """(language, body) of each fenced block of a Markdown page."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(text)]


# Each language's blocks on the page, in the page's order: your model, trainer.train, your
# own script.
SHOWN = {"dockerfile": ["your-model/Dockerfile", "train-api/Dockerfile", "own-code/Dockerfile"],
         "python": ["your-model/mymodels/tiny.py", "train-api/train.py", "own-code/train.py"]}


@pytest.mark.parametrize("language", sorted(SHOWN))
def test_the_guide_shows_the_tested_files_whole(language):
    shown = [body for lang, body in code_blocks(GUIDE.read_text()) if lang == language]
    assert len(shown) == len(SHOWN[language])
    for body, name in zip(shown, SHOWN[language]):
        assert body == (EXAMPLES / name).read_text(), "docs/own-code.md's {} block differs " \
            "from docs/examples/{}".format(language, name)


def test_code_blocks_are_found_whole():
    page = "text\n```python\na = 1\n\nb = 2\n```\nmore\n```sh\nls\n```\n"
    assert code_blocks(page) == [("python", "a = 1\n\nb = 2\n"), ("sh", "ls\n")]
