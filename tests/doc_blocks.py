"""The shell blocks of README.md and docs/*.md, as a reader copies them: shared by the delivery
test that runs them (``tests/delivery/test_doc_commands.py``) and the container tests that run
the ones needing a Docker engine (``tests/images/test_own_code.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, NamedTuple

from conftest import REPO

PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
# A fenced block a reader pastes into a shell: ```sh, ```bash or ```shell.
_SHELL_FENCE = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


class Block(NamedTuple):
    """One shell block: the page (relative to the checkout), its first line there, its text."""

    page: str
    line: int
    text: str

    @property
    def name(self) -> str:
        return "{}:{}".format(self.page, self.line)


_HEREDOC = re.compile(r"""<<-?\s*(['"]?)(\w+)\1""")


def commands(text: str) -> Iterator[str]:
    """The commands of a block, one per logical line (a line ending in a backslash continues
    on the next, a here-document runs to its end word), without blank and comment lines."""
    logical, until = "", None
    for line in text.splitlines():
        if until is not None:
            logical += line + "\n"
            if line.strip() == until:
                yield logical.rstrip("\n")
                logical, until = "", None
            continue
        if line.endswith("\\"):
            logical += line + "\n"
            continue
        logical += line
        heredoc = _HEREDOC.search(line)
        if heredoc:
            logical, until = logical + "\n", heredoc.group(2)
        elif logical.strip() and not logical.lstrip().startswith("#"):
            yield logical
            logical = ""
        else:
            logical = ""


def checked(text: str) -> str:
    """A bash script running the commands of ``text`` that stops at the first one that fails
    (``a && b`` included, which ``set -e`` would let pass) or uses an unset variable, with
    its status and a line naming it."""
    script = ["set -u"]
    for number, command in enumerate(commands(text), 1):
        script += [command, "status=$?; if [ $status != 0 ]; then echo \"command {} of the "
                   "block failed ($status)\" >&2; exit $status; fi".format(number)]
    return "\n".join(script) + "\n"


def shell_blocks(pages: List[Path] = PAGES) -> List[Block]:
    """Every shell block of ``pages``, in page order."""
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in _SHELL_FENCE.finditer(text):
            found.append(Block(page.relative_to(REPO).as_posix(),
                               text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def block_containing(marker: str, page: str = "") -> Block:
    """The one shell block (of ``page``, when given) whose text contains ``marker``: a test
    fails when none or several do, so a list of blocks keyed by markers cannot go stale."""
    matching = [block for block in shell_blocks()
                if marker in block.text and block.page.startswith(page)]
    if len(matching) != 1:
        raise LookupError("{} shell blocks contain {!r}: {}".format(
            len(matching), marker, [block.name for block in matching]))
    return matching[0]
