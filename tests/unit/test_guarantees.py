"""The guarantees (docs/guarantees.md) name the tests that show each promise: every name must
exist.

A renamed or deleted test would otherwise leave a promise pointing at nothing, and the
promise would read as shown when it is not. The other pages (the README and the rest of
``docs/``) name tests, harnesses and benchmark scripts too; each of those must exist as well.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUARANTEES = ROOT / "docs" / "guarantees.md"
PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md")])
_REFERENCE = re.compile(r"`((?:tests|bench)/[\w/]+\.py)(?:::(\w+)(?:::(\w+))?)?(?:\[[^\]`]*\])?`")

Reference = tuple[str, str, str, str]
"""The page that names it, the file, the test or class (or ""), the method (or "")."""


def references(pages: list[Path]) -> list[Reference]:
    return sorted(
        {
            (page.relative_to(ROOT).as_posix(), *found)
            for page in pages
            for found in _REFERENCE.findall(page.read_text(encoding="utf-8"))
        }
    )


@functools.cache
def defined_names(path: Path) -> set[str]:
    """Top-level functions and classes, and ``Class::method`` for methods (each file
    parsed once: the pages name the same files many times)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def test_the_guarantees_name_tests() -> None:
    assert len([r for r in references([GUARANTEES]) if r[2]]) > 50


@pytest.mark.parametrize(
    ("page", "path", "name", "member"), references(PAGES), ids=lambda v: v or "-"
)
def test_every_test_the_docs_name_exists(page: str, path: str, name: str, member: str) -> None:
    file = ROOT / path
    assert file.is_file(), f"{page} names {path}, which does not exist"
    if name:
        wanted = f"{name}::{member}" if member else name
        assert wanted in defined_names(file), f"{page} names {path}::{wanted}, not defined there"
