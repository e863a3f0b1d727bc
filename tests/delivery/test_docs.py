"""The documentation's relative links resolve: README.md and every page under docs/.

A link resolves when its file exists relative to the page that links it and, when it names an
``#anchor``, that page has a heading whose GitHub slug is the anchor (an in-page ``#anchor``
is looked up in the linking page itself). External links (``https:``, ``mailto:``) are not
fetched: the tests run offline. Links inside fenced code blocks and inline code are not links
on GitHub either, so they are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple
from urllib.parse import unquote

import pytest

from conftest import REPO

PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1", re.DOTALL)
# [text](target) and ![alt](target), with an optional "title"; the text may wrap lines.
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"   # the text, one level of brackets inside it
    r"\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target, a reference definition at the start of a line.
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _blank(match: re.Match) -> str:
    """The matched text with every character but newlines replaced by a space, so offsets
    and line numbers stay where they were."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """``text`` with fenced code blocks and inline code blanked out (same length, same lines):
    what is left is what GitHub renders as Markdown rather than as code."""
    lines, fence = [], None
    for line in text.split("\n"):
        opener = _FENCE.match(line)
        if fence is None and opener:
            fence = opener.group(1)
            lines.append("")
        elif fence is not None:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence):
                fence = None
            lines.append("")
        else:
            lines.append(line)
    # Padding keeps each line's length, so a link's column and line are those of the file.
    return _CODE_SPAN.sub(_blank, "\n".join(lines))


def links(text: str) -> Iterator[Tuple[int, str]]:
    """(line number, target) of every link in a Markdown text, in order."""
    body = prose(text)
    found = [(m.start(), m.group(1)) for m in _INLINE_LINK.finditer(body)]
    found += [(m.start(), m.group(1)) for m in _REFERENCE.finditer(body)]
    for offset, target in sorted(found):
        yield body.count("\n", 0, offset) + 1, target


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text, before duplicates are numbered: link and image
    markup keeps its text, then lower-case, characters other than letters, digits, spaces,
    hyphens and underscores dropped, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def anchors(text: str) -> Set[str]:
    """Every anchor a Markdown text offers: its headings' slugs, a repeated slug numbered -1,
    -2, ... in order as GitHub does, and explicit ``<a name=...>``/``<a id=...>`` anchors."""
    seen: Dict[str, int] = {}
    found = set(_HTML_ANCHOR.findall(text))
    for line in prose(text).split("\n"):
        heading = _HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2) or "")
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else "{}-{}".format(base, count))
    return found


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when it is inside it, else as it is."""
    return path.relative_to(root).as_posix() if root in path.parents else str(path)


def broken_links(page: Path, root: Path = REPO) -> List[str]:
    """One message per link of ``page`` that does not resolve: the page (relative to
    ``root``), the line, the link as written and what is wrong with it."""
    problems = []
    root, page = root.resolve(), page.resolve()
    text = page.read_text(encoding="utf-8")
    name = _shown(page, root)
    for line, target in links(text):
        if not target or _EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        where = "{}:{}: link {!r}".format(name, line, target)
        linked = (page.parent / unquote(path)).resolve() if path else page
        if not linked.exists():
            problems.append("{}: no file {}".format(where, linked))
            continue
        if not anchor:
            continue
        if not linked.is_file() or linked.suffix.lower() != ".md":
            problems.append("{}: an anchor into {}, no Markdown page".format(where, linked))
        elif unquote(anchor) not in anchors(linked.read_text(encoding="utf-8")):
            problems.append("{}: no heading in {} has the anchor #{}".format(
                where, _shown(linked, root), anchor))
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page):
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme():
    readme = REPO / "README.md"
    targets = {(readme.parent / t.partition("#")[0]).resolve()
               for _, t in links(readme.read_text(encoding="utf-8"))}
    orphans = [page.name for page in PAGES[1:] if page.resolve() not in targets]
    assert not orphans, "docs pages the README does not link: {}".format(orphans)


def test_the_readme_keeps_the_two_commands():
    # CI (.ci/run) and the project's hooks look for `make test` in the README's command block.
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "## Two commands" in text
    assert re.search(r"^make run +#", text, re.MULTILINE)
    assert re.search(r"^make test +#", text, re.MULTILINE)


@pytest.mark.parametrize("heading, expected", [
    ("Build, push, submit", "build-push-submit"),
    ("ImageNet data: shards, streamed", "imagenet-data-shards-streamed"),
    ("Signals and PID 1", "signals-and-pid-1"),
    ("`make test` is deterministic", "make-test-is-deterministic"),
    ("Lazy vs compiled steps (x2.5)", "lazy-vs-compiled-steps-x25"),
    ("snake_case and kebab-case", "snake_case-and-kebab-case"),
    ("See [the trainers](docs/trainers.md)", "see-the-trainers"),
    ("Zürich  twice", "zürich--twice"),
])
def test_slug_follows_githubs_rule(heading, expected):
    assert slug(heading) == expected


def test_repeated_headings_are_numbered_and_code_is_no_heading():
    text = "# Tests\n## Tests\n### Tests\n```sh\n# not a heading\n```\n## Closed ##\n"
    assert anchors(text) == {"tests", "tests-1", "tests-2", "closed"}


def test_a_broken_link_is_named_with_its_file_and_line(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## Exit codes\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n"
        "[fine](other.md#exit-codes) and [fine too](#page), [web](https://example.com/x#y)\n"
        "[missing file](gone.md)\n"
        "```\n[in a code block](gone.md)\n```\n"
        "`[inline code](gone.md)` and [missing\nanchor](other.md#exit-code)\n"
        "[in-page](#nowhere) ![image](../pic.png)\n"
        "[ref]: ./also-gone.md\n")
    assert broken_links(page, root=tmp_path) == [
        "docs/page.md:3: link 'gone.md': no file {}".format(tmp_path / "docs" / "gone.md"),
        "docs/page.md:7: link 'other.md#exit-code': no heading in docs/other.md has the "
        "anchor #exit-code",
        "docs/page.md:9: link '#nowhere': no heading in docs/page.md has the anchor #nowhere",
        "docs/page.md:9: link '../pic.png': no file {}".format(tmp_path / "pic.png"),
        "docs/page.md:10: link './also-gone.md': no file {}".format(
            tmp_path / "docs" / "also-gone.md"),
    ]
