"""Shared test configuration: anyio's pytest plugin runs async tests on asyncio."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.codex_driver import require_codex


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def codex() -> Path:
    """The real codex 0.169.0 binary (fails under CI=true when it is missing)."""
    return require_codex()
