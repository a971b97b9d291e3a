"""A real ``redis-server`` of its own: a process on a free loopback port, persistence off,
stopped, killed, paused or restarted on the same port when its owner says.

It lives in ``bench/`` because ``bench/broker.py --redis`` needs it and must run from the
project's own extras (``pip install -e '.[redis]'``), without the test dependencies: it is
standard library only. The tests use the same class (``tests/support/redis_server.py`` adds
the skip-or-fail rule for a missing binary and the ``with`` block)::

    server = RedisServer(find_redis_server() or sys.exit("no redis-server"), workdir)
    server.start()
    ... server.url ...
    server.stop()

The binary is ``$CODEX_PRESENCE_TEST_REDIS_SERVER`` or ``redis-server`` on ``PATH``
(Debian's; ``tests/run.sh`` installs it). A port cannot be handed to redis-server bound, so
one is picked free and the start is retried on another if someone took it meanwhile.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench._tls import TlsFiles

__all__ = ["RedisServer", "connect", "find_redis_server"]


def find_redis_server() -> str | None:
    """The path of ``redis-server``, or None when there is none."""
    return os.environ.get("CODEX_PRESENCE_TEST_REDIS_SERVER") or shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def connect(port: int, tls: ssl.SSLContext | None = None, timeout: float = 2) -> socket.socket:
    """A connection to the Redis (or sentinel) on loopback ``port``, over TLS with ``tls``."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls is None:
        return conn
    try:
        return tls.wrap_socket(conn, server_hostname="127.0.0.1")
    except BaseException:
        conn.close()
        raise


def _ping(port: int, tls: ssl.SSLContext | None = None) -> bool:
    try:
        with connect(port, tls, timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith((b"+PONG", b"-NOAUTH"))  # up, with a password
    except OSError:
        return False


class RedisServer:
    """One redis-server process (and its successors after :meth:`restart`)."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        args: tuple[str, ...] = (),
        *,
        tls: TlsFiles | None = None,
    ) -> None:
        self._binary = binary
        self._workdir = workdir
        self._args = args
        """More options (``--replicaof HOST PORT`` for a replica)."""
        self.tls = tls
        """With it, the server listens for TLS only (``rediss://``), on :attr:`port`."""
        self._context = tls.client_context() if tls is not None else None
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://127.0.0.1:{self.port}/0"

    def _listen(self, port: int) -> tuple[str, ...]:
        if self.tls is None:
            return ("--port", str(port))
        return ("--port", "0", "--tls-port", str(port), *self.tls.server_options())

    def ping(self) -> bool:
        """Whether it answers (a ``-NOAUTH`` is an answer)."""
        return _ping(self.port, self._context)

    def start(self) -> None:
        """Start on :attr:`port` (a free one the first time)."""
        for _ in range(5):
            port = self.port or _free_port()
            proc = subprocess.Popen(
                [
                    self._binary,
                    *self._listen(port),
                    "--bind", "127.0.0.1",
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", str(self._workdir),
                    "--loglevel", "warning",
                    *self._args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            deadline = time.monotonic() + 10
            while (
                proc.poll() is None
                and not _ping(port, self._context)
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            if proc.poll() is None and _ping(port, self._context):
                self.port, self.proc = port, proc
                return
            proc.kill()
            proc.wait(10)
            time.sleep(0.2)  # a restart keeps its port: give it time to free up
        raise RuntimeError("redis-server did not start")

    def stop(self, *, kill: bool = False) -> None:
        """Stop it (SIGKILL with ``kill``: no goodbye to its clients)."""
        if self.proc is None:
            return
        if kill:
            self.proc.kill()  # a paused one too
        else:
            self.proc.terminate()
        self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: a Redis that hangs (its connections stay open, nothing answers)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: it answers again, with everything it held."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, *, down_for: float = 0.0) -> None:
        """Kill it, wait ``down_for`` seconds, and start it again on the same port, empty."""
        self.stop(kill=True)
        time.sleep(down_for)
        self.start()

    def empty(self) -> None:
        """Forget everything a previous user left: the keys (``FLUSHALL``) and the cached
        scripts (``SCRIPT FLUSH``), as a fresh server would have none. Fails when the server
        is gone or no longer answers as it did (a test changed its configuration, e.g. a
        password: such a test takes a server of its own)."""
        assert self.proc is not None and self.proc.poll() is None, "redis-server is not running"
        with connect(self.port, self._context, timeout=10) as conn:
            conn.sendall(b"FLUSHALL\r\nSCRIPT FLUSH\r\n")
            answer = b""
            while answer.count(b"\r\n") < 2:
                chunk = conn.recv(256)
                if not chunk:
                    break
                answer += chunk
        if answer != b"+OK\r\n+OK\r\n":
            raise RuntimeError(f"redis-server could not be emptied: {answer!r}")
