"""Shared test configuration: anyio's pytest plugin runs async tests on asyncio, and the
Hypothesis profile (``dev``, few examples; ``ci`` under ``CI=true``: tests/support/depth.py)
is loaded before any test module is imported."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench._claude_driver import require_claude
from tests.support.codex_driver import codex_versions, fixtures_dir, require_codex
from tests.support.depth import load_profile
from tests.support.redis_server import RedisServer, redis_server

load_profile()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", params=codex_versions(), ids=lambda v: f"codex-{v}")
def codex_version(request: pytest.FixtureRequest) -> str:
    """Each codex version with fixtures (``fixtures/codex-<version>/``), in turn: a test
    that uses :func:`codex` runs once per version."""
    version: str = request.param
    return version


@pytest.fixture(scope="session")
def codex(codex_version: str) -> Path:
    """The real codex binary of :func:`codex_version` (fails under CI=true when it is
    missing or is another version)."""
    return require_codex(codex_version)


@pytest.fixture(scope="session")
def codex_fixtures(codex_version: str) -> Path:
    """The recordings and expectations of :func:`codex_version`."""
    return fixtures_dir(codex_version)


@pytest.fixture(scope="session")
def shared_redis() -> Iterator[RedisServer]:
    """One redis-server for the whole test session (each xdist worker has its own): a
    server start per test cost more than most tests that use it. Take it through
    :func:`redis_url` or :func:`store_url`, which empty it first."""
    with redis_server() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """Where a broker under test keeps its state, in turn: None (in memory, the default)
    and the URL of a real redis-server, emptied for this test (:func:`shared_redis`). A
    broker test that takes it runs once per store: the rules are the same in both."""
    if request.param == "memory":
        return None
    server: RedisServer = request.getfixturevalue("shared_redis")
    server.empty()
    return server.url


@pytest.fixture
def redis_url(shared_redis: RedisServer) -> str:
    """The URL of a real redis-server, emptied for this test (:func:`shared_redis`). A
    test that stops, pauses or reconfigures its server starts its own
    (``tests.support.redis_server.redis_server()``)."""
    shared_redis.empty()
    return shared_redis.url


@pytest.fixture(scope="session")
def claude() -> Path:
    """The real Claude Code 2.1.332 binary, with tmux (fails under CI=true when missing)."""
    return require_claude()


@pytest.fixture(autouse=True)
def _isolated_logging() -> Iterator[None]:
    """A command run in-process (``main([...])``) points the package logger at the
    stderr of that moment; put it back afterwards, so later tests do not log into a
    capture file that pytest has closed."""
    logger = logging.getLogger("codex_presence")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.level, logger.propagate = saved[0], saved[1], saved[2]
