"""Shared test configuration: anyio's pytest plugin runs async tests on asyncio."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.codex_driver import require_codex


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def codex() -> Path:
    """The real codex 0.169.0 binary (fails under CI=true when it is missing)."""
    return require_codex()


@pytest.fixture(autouse=True)
def _isolated_logging() -> Iterator[None]:
    """A command run in-process (``main([...])``) points the package logger at the
    stderr of that moment; put it back afterwards, so later tests do not log into a
    capture file that pytest has closed."""
    logger = logging.getLogger("codex_presence")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
