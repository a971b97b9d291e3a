"""The project's Markdown renders as written (issue 15): every code fence closes cleanly.

A closing fence with text after it is no closing fence: from there on, the rest of the file
rendered as one code block. Each file is parsed with a CommonMark parser (markdown-it-py),
and each fenced block must end on a bare fence of its own kind and hold no line that looks
like one (a fence meant to close it, or the next block's opening, swallowed).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("fixtures/**/README.md")]
)


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
