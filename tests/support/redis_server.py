"""A real ``redis-server`` for a test: its own process on a free loopback port, persistence
off, stopped (or killed, or restarted on the same port) when the test says::

    with redis_server() as redis:
        with running_broker(team=TEAM, redis=redis.url) as broker: ...
        redis.restart()  # empty again: persistence is off

The process is ``bench/_redis.py``'s :class:`RedisServer` (the benchmarks start theirs
with it too, without the test dependencies); this module adds the tests' rule for the
binary, Debian's ``redis-server`` (``tests/run.sh`` installs it): without it a test is
skipped, and fails under ``CI=true``.

A test that only needs a Redis takes the ``redis_url`` fixture instead (tests/conftest.py):
one server per test session (per xdist worker), emptied before each test
(:meth:`~bench._redis.RedisServer.empty`). A test that stops, pauses or reconfigures its
server takes one of its own, as above.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench._redis import RedisServer, find_redis_server

__all__ = ["RedisServer", "redis_server", "require_redis_server"]


def require_redis_server() -> str:
    """The path of ``redis-server``; skips the test without it (fails under CI=true)."""
    path = find_redis_server()
    if path is None:
        msg = "redis-server is missing (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server for the block."""
    import tempfile

    binary = require_redis_server()
    with tempfile.TemporaryDirectory(prefix="codex-presence-redis-") as workdir:
        server = RedisServer(binary, Path(workdir))
        server.start()
        try:
            yield server
        finally:
            server.stop(kill=True)
