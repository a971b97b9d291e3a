"""The unit tier is pure by construction: during each of its tests, opening a socket
(wrapping one that exists, an event loop's self-pipe, is fine), starting a process or a
thread, and sleeping raise :class:`ImpureTest`, naming what was tried. A test that needs
one of them belongs to the integration tier, ``tests/`` (docs/development.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest


class ImpureTest(AssertionError):
    """A unit test tried what only the integration tier may do."""


def _refusing(what: str) -> Callable[..., Any]:
    def refused(*args: object, **kwargs: object) -> Any:
        raise ImpureTest(f"tests/unit is pure: no {what} here (move the test to tests/)")

    return refused


_new_socket = socket.socket.__init__


def _socket_init(self: socket.socket, *args: Any, **kwargs: Any) -> None:
    fileno = kwargs.get("fileno", args[3] if len(args) > 3 else None)
    if fileno is None:
        _refusing("socket")()
    _new_socket(self, *args, **kwargs)


@pytest.fixture(autouse=True)
def pure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each unit test runs with sockets, processes, threads and sleeps refused."""
    monkeypatch.setattr(socket.socket, "__init__", _socket_init)
    monkeypatch.setattr(subprocess.Popen, "__init__", _refusing("subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refusing(f"os.{name}"))
    monkeypatch.setattr(threading.Thread, "start", _refusing("thread"))
    monkeypatch.setattr(time, "sleep", _refusing("time.sleep"))


def test_the_unit_tier_refuses_what_is_not_pure() -> None:
    for attempt in (
        lambda: socket.socket(),
        lambda: socket.create_connection(("127.0.0.1", 9)),
        lambda: subprocess.run(["true"], check=False),
        lambda: threading.Thread(target=print).start(),
        lambda: time.sleep(0),
    ):
        with pytest.raises(ImpureTest):
            attempt()
    left, right = socket.socketpair()  # wrapping descriptors that exist: allowed
    left.close()
    right.close()
