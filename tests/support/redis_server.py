"""A real ``redis-server`` for a test: its own process on a free loopback port, persistence
off, stopped (or killed, or restarted on the same port) when the test says::

    with redis_server() as redis:
        with running_broker(team=TEAM, redis=redis.url) as broker: ...
        redis.restart()  # empty again: persistence is off

The process is ``bench/_redis.py``'s :class:`RedisServer` (the benchmarks start theirs
with it too, without the test dependencies); this module adds the tests' rule for the
binary, Debian's ``redis-server`` (``tests/run.sh`` installs it): without it a test is
skipped, and fails under ``CI=true``. :func:`sentinel_setup` is the same for Redis behind
Sentinel (``bench/_sentinel.py``; Debian's ``redis-sentinel`` too). With ``tls=True`` either
speaks TLS only, with certificates made for the block (``bench/_tls.py``; Debian's
``openssl``), and its ``url`` is ``rediss://`` (``rediss+sentinel://``) trusting them.

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
from bench._sentinel import SentinelSetup, find_sentinel
from bench._tls import TlsFiles, find_openssl, make_tls_files

__all__ = [
    "RedisServer",
    "SentinelSetup",
    "redis_server",
    "require_redis_sentinel",
    "require_redis_server",
    "sentinel_setup",
]


def _required(path: str | None, package: str) -> str:
    if path is None:
        msg = f"{package} is missing (apt-get install {package})"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def require_redis_server() -> str:
    """The path of ``redis-server``; skips the test without it (fails under CI=true)."""
    return _required(find_redis_server(), "redis-server")


def require_redis_sentinel() -> str:
    """The path of ``redis-sentinel``; skips the test without it (fails under CI=true)."""
    return _required(find_sentinel(), "redis-sentinel")


def _tls_files(workdir: Path, tls: bool) -> TlsFiles | None:
    if not tls:
        return None
    return make_tls_files(workdir / "tls", _required(find_openssl(), "openssl"))


@contextmanager
def redis_server(*, tls: bool = False) -> Iterator[RedisServer]:
    """A fresh redis-server for the block (TLS only, with ``tls``)."""
    import tempfile

    binary = require_redis_server()
    with tempfile.TemporaryDirectory(prefix="codex-presence-redis-") as workdir:
        files = _tls_files(Path(workdir), tls)
        server = RedisServer(binary, Path(workdir), tls=files)
        server.start()
        try:
            yield server
        finally:
            server.stop(kill=True)


@contextmanager
def sentinel_setup(password: str = "", *, tls: bool = False) -> Iterator[SentinelSetup]:
    """A primary, a replica and three sentinels for the block (``bench/_sentinel.py``),
    Redis with ``password`` if one is given, everything over TLS with ``tls``."""
    import tempfile

    server, sentinel = require_redis_server(), require_redis_sentinel()
    with tempfile.TemporaryDirectory(prefix="codex-presence-sentinel-") as workdir:
        files = _tls_files(Path(workdir), tls)
        setup = SentinelSetup(server, sentinel, Path(workdir), password=password, tls=files)
        try:
            setup.start()
            yield setup
        finally:
            setup.stop()
