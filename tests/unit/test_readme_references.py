"""The README's Guarantees name the tests that show each promise: every name must exist.

A renamed or deleted test would otherwise leave a promise pointing at nothing, and the
promise would read as shown when it is not.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_REFERENCE = re.compile(r"`((?:tests|bench)/[\w/]+\.py)(?:::(\w+)(?:::(\w+))?)?(?:\[[^\]`]*\])?`")


def references() -> list[tuple[str, str | None, str | None]]:
    return sorted(set(_REFERENCE.findall(README.read_text(encoding="utf-8"))))


@functools.cache
def defined_names(path: Path) -> frozenset[str]:
    """Top-level functions and classes, and ``Class::method`` for methods (each file
    parsed once: the README names the same files many times)."""
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
    return frozenset(names)


def test_the_readme_names_tests() -> None:
    assert len([r for r in references() if r[1]]) > 50


@pytest.mark.parametrize(("path", "name", "member"), references(), ids=lambda v: v or "-")
def test_every_test_the_readme_names_exists(path: str, name: str, member: str) -> None:
    file = ROOT / path
    assert file.is_file(), f"README names {path}, which does not exist"
    if name:
        wanted = f"{name}::{member}" if member else name
        assert wanted in defined_names(file), f"README names {path}::{wanted}, not defined there"
