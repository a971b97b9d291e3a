"""The project's Markdown renders as written, and its pages hold together.

* Every code fence closes cleanly (issue 15). A closing fence with text after it is no
  closing fence: from there on, the rest of the file rendered as one code block. Each file
  is parsed with a CommonMark parser (markdown-it-py), and each fenced block must end on a
  bare fence of its own kind and hold no line that looks like one (a fence meant to close
  it, or the next block's opening, swallowed).
* Every relative link of the README and ``docs/`` resolves (issue 22): the file it names
  exists, and so does the heading its ``#anchor`` names (GitHub's anchors). The README is a
  quick start that points into ``docs/``: a page moved, renamed or retitled must not leave
  a link to nothing.
* The README stays a quick start: at most 200 lines.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("fixtures/**/README.md")]
)
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md")])
README_MAX_LINES = 200


def fence_problems(text: str) -> list[str]:
    """What is wrong with the fenced code blocks of ``text``, one line per problem."""
    lines = text.splitlines()
    problems = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        char, length = token.markup[0], len(token.markup)
        fence = re.compile(rf"\s*{re.escape(char)}{{{length},}}")
        last = lines[end - 1] if end - 1 > start else ""
        if end - 1 == start or not fence.fullmatch(last.rstrip()):
            problems.append(
                f"line {start + 1}: the block opened here never closes (it runs to line {end})"
            )
            continue
        problems.extend(
            f"line {n + 1}: a fence inside the block opened at line {start + 1} (a closing "
            "fence with text after it?)"
            for n in range(start + 1, end - 1)
            if fence.match(lines[n])
        )
    return problems


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_fence_closes_cleanly(path: Path) -> None:
    assert fence_problems(path.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_closing_fence_with_text_after_it() -> None:
    broken = "# x\n\n```sh\nmake\n``` then\n\ntext\n\n```sh\nmake test\n```\n\nmore text\n"
    assert fence_problems(broken) == [
        "line 5: a fence inside the block opened at line 3 (a closing fence with text after it?)",
        "line 9: a fence inside the block opened at line 3 (a closing fence with text after it?)",
    ]
    unclosed = "```sh\nmake\n``` then\n\nthe rest of the file\n"
    assert fence_problems(unclosed) == [
        "line 1: the block opened here never closes (it runs to line 5)"
    ]
    fine = "- a list:\n  ```sh\n  make\n  ```\n\n````md\n```sh\nshown\n```\n````\n"
    assert fence_problems(fine) == []


def _inline_text(token: Token) -> str:
    return "".join(child.content for child in token.children or ())


@functools.cache  # the link check asks it of the same long file for every link
def anchors(text: str) -> frozenset[str]:
    """The anchors GitHub gives the headings of ``text``: the heading's text, lower-cased,
    without punctuation, spaces made dashes; a repeated one gets ``-1``, ``-2``..."""
    seen: Counter[str] = Counter()
    found = set()
    tokens = MarkdownIt("commonmark").parse(text)
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        slug = re.sub(r"[^\w\- ]", "", _inline_text(inline).strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return frozenset(found)


def link_targets(text: str) -> list[str]:
    """Every link and image target of ``text``, in order."""
    targets = []
    for token in MarkdownIt("commonmark").parse(text):
        for child in token.children or ():
            if child.type == "link_open":
                targets.append(str(child.attrs["href"]))
            elif child.type == "image":
                targets.append(str(child.attrs["src"]))
    return targets


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` that lead nowhere, one line each."""
    problems = []
    text = page.read_text(encoding="utf-8")
    for target in link_targets(text):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue  # the web: not ours to check here
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not path.exists():
            problems.append(f"{target}: no such file")
        elif parts.fragment and (
            path.suffix != ".md"
            or unquote(parts.fragment) not in anchors(path.read_text(encoding="utf-8"))
        ):
            problems.append(f"{target}: no heading with that anchor")
    return problems


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_pages_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_check_finds_a_link_to_nothing(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# The other page\n\n## A `code` part: here\n\n## A\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## A\n\n[ok](other.md) [ok](other.md#a-code-part-here) [ok](#a) "
        "[ok](other.md#a) [ok](https://example.com/missing.md)\n\n"
        "[gone](missing.md) [no anchor](other.md#nowhere) [self](#a-1) ![img](gone.png)\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with that anchor",
        "#a-1: no heading with that anchor",
        "gone.png: no such file",
    ]
    assert anchors("# A\n\n# A\n") == {"a", "a-1"}


def test_the_readme_stays_a_quick_start() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail to docs/"


def test_the_readme_links_every_page_of_the_docs() -> None:
    readme = set(link_targets((ROOT / "README.md").read_text(encoding="utf-8")))
    pages = {f"docs/{page.name}" for page in ROOT.glob("docs/*.md")}
    assert pages - readme == set()


def test_every_install_hint_works_in_a_clone() -> None:
    """Before: the docs and the error messages said ``pip install 'codex-presence[notify]'``,
    which fails: the package is on no index. In a clone it is ``.venv/bin/pip install
    '.[notify]'``."""
    sources = [*PAGES, *ROOT.glob("docs/deploy/*"), *ROOT.glob("codex_presence/**/*.py")]
    wrong = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"pip install [\"']?codex-presence", line)
    ]
    assert wrong == []


def test_the_docs_examples_keep_their_own_ports() -> None:
    """An example that starts a broker names its own port, and no two pages share one:
    docs/broker.md's Redis example reused the README broker's 8765."""
    owners: dict[int, set[str]] = {}
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for fence in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
            for line in re.findall(r"codex-presence broker [^\n]*", fence):
                port = re.search(r"--port (\d+)", line)
                default = 8765  # the broker's own, which the README's example takes
                owners.setdefault(int(port.group(1)) if port else default, set()).add(path.name)
    shared = {port: pages for port, pages in owners.items() if len(pages) > 1}
    assert shared == {}


def test_the_docs_tokens_go_to_private_ignored_files() -> None:
    """A token that ``team init``, ``add`` or ``rotate`` prints and an example writes to a
    file goes to a file made under ``umask 077`` whose name the clone's .gitignore ignores:
    docs/broker.md's ``team add ... > scout.tsv`` wrote a token readable by others, and
    ``git add .`` in the clone would have taken it."""
    import fnmatch

    ignored = [
        line.strip()
        for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for fence in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
            command = fence.replace("\\\n", " ")
            for line in command.splitlines():
                if not re.search(r"codex-presence team (init|add|rotate)\b.*>", line):
                    continue
                target = re.findall(r">\s*(\S+?)\)?(?:\s|$)", line)[-1]
                found.append(target)
                assert "umask 077" in line, (path.name, line)
                assert any(fnmatch.fnmatch(Path(target).name, p) for p in ignored), (
                    path.name,
                    target,
                )
    assert found  # the check saw the examples
