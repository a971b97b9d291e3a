"""Redis with Sentinel, for real: a primary, a replica and three sentinels on loopback,
each its own process on a free port, persistence off, in a directory of its own::

    setup = SentinelSetup(redis_server, redis_sentinel, workdir)
    setup.start()            # returns once every sentinel knows the replica and the others
    ... setup.url ...        # redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/presence
    setup.kill_primary()     # SIGKILL; setup.events then shows the sentinels' failover
    setup.stop()

The sentinels take the primary for down after :data:`DOWN_AFTER_MS` without an answer
(``down-after-milliseconds``; quorum 2 of 3) and give a failover :data:`FAILOVER_TIMEOUT_MS`
(``failover-timeout``) before another sentinel may try. :attr:`SentinelSetup.events` is what
the first sentinel published on its event channels (``+sdown``, ``+odown``,
``+switch-master``, ...), each with the ``time.monotonic()`` it was read at: the failover's
timeline, beside the one its owner measures.

Standard library only, like ``_redis.py`` (``bench/failover.py`` runs without the test
dependencies; ``tests/support/redis_server.py`` adds the tests' skip-or-fail rule). The
binaries are ``redis-server`` and ``redis-sentinel`` (Debian's packages of those names;
``$CODEX_PRESENCE_TEST_REDIS_SENTINEL`` overrides the latter).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from bench._redis import RedisServer, _free_port, connect

if TYPE_CHECKING:
    from bench._tls import TlsFiles

__all__ = ["DOWN_AFTER_MS", "FAILOVER_TIMEOUT_MS", "SentinelSetup", "command", "find_sentinel"]

DOWN_AFTER_MS = 1000
"""``down-after-milliseconds``: a primary silent this long is down for a sentinel."""
FAILOVER_TIMEOUT_MS = 5000
"""``failover-timeout``: how long a failover may take before another is tried."""
SERVICE = "presence"


def find_sentinel() -> str | None:
    """The path of ``redis-sentinel``, or None when there is none."""
    return os.environ.get("CODEX_PRESENCE_TEST_REDIS_SENTINEL") or shutil.which("redis-sentinel")


def _encode(*args: str) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _reply(reader: Any) -> Any:
    """One RESP2 reply read from the file ``reader``."""
    line = reader.readline()
    if not line:
        raise ConnectionError("closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else reader.read(size + 2)[:-2].decode()
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [_reply(reader) for _ in range(size)]
    raise RuntimeError(f"not RESP: {line!r}")


def command(port: int, *args: str, password: str = "", tls: ssl.SSLContext | None = None) -> Any:
    """``args`` sent to the Redis (or sentinel) on ``port`` (after ``AUTH password``; over
    TLS with ``tls``): its reply."""
    with connect(port, tls) as conn, conn.makefile("rb") as reader:
        if password:
            conn.sendall(_encode("AUTH", password))
            _reply(reader)
        conn.sendall(_encode(*args))
        return _reply(reader)


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


class SentinelSetup:
    """A primary, a replica and three sentinels watching them (see the module)."""

    def __init__(
        self,
        redis_server: str,
        redis_sentinel: str,
        workdir: Path,
        *,
        password: str = "",
        tls: TlsFiles | None = None,
    ) -> None:
        self._redis_server = redis_server
        self._redis_sentinel = redis_sentinel
        self._workdir = workdir
        self.password = password
        """Redis's (``requirepass`` of the primary and the replica): the sentinels and the
        replica use it too. The sentinels themselves want none."""
        self._auth: tuple[str, ...] = ("--requirepass", password, "--masterauth", password)
        if not password:
            self._auth = ()
        self.tls = tls
        """With it, every process (Redis and sentinels) speaks TLS only, to its clients and
        to each other: the address is ``rediss+sentinel://``."""
        self._context = tls.client_context() if tls is not None else None
        self.primary = RedisServer(redis_server, self._dir("primary"), self._auth, tls=tls)
        self.replica: RedisServer | None = None
        self.sentinels: list[tuple[int, subprocess.Popen[bytes]]] = []
        self.events: list[tuple[float, str, str]] = []
        """(monotonic time, channel, message) published by the first sentinel."""
        self._watch: socket.socket | None = None

    def _dir(self, name: str) -> Path:
        path = self._workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port, _ in self.sentinels)
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        if self.tls is not None:
            return f"rediss+sentinel://{auth}{hosts}/{SERVICE}?ssl_ca_certs={self.tls.ca}"
        return f"redis+sentinel://{auth}{hosts}/{SERVICE}"

    def start(self, timeout: float = 30.0) -> None:
        self.primary.start()
        replica_of = ("--replicaof", "127.0.0.1", str(self.primary.port), *self._auth)
        self.replica = RedisServer(
            self._redis_server, self._dir("replica"), replica_of, tls=self.tls
        )
        self.replica.start()
        deadline = time.monotonic() + timeout
        self._until(deadline, "the replica's sync", self._replica_synced)
        for number in range(3):
            self.sentinels.append(self._start_sentinel(number))
        self._until(deadline, "the sentinels' view of the set", self._sentinels_ready)
        self._watch_events()

    def _replica_synced(self) -> bool:
        assert self.replica is not None
        info = command(
            self.replica.port, "INFO", "replication", password=self.password, tls=self._context
        )
        return "master_link_status:up" in info

    def _sentinels_ready(self) -> bool:
        for port, _ in self.sentinels:
            state = _pairs(command(port, "SENTINEL", "MASTER", SERVICE, tls=self._context))
            if state["num-other-sentinels"] != "2" or state["num-slaves"] != "1":
                return False
        return True

    @staticmethod
    def _until(deadline: float, what: str, ready: Any) -> None:
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Sentinel setup: no {what} in time")
            time.sleep(0.05)

    def _start_sentinel(self, number: int) -> tuple[int, subprocess.Popen[bytes]]:
        workdir = self._dir(f"sentinel{number}")
        for _ in range(5):
            port = _free_port()
            config = workdir / "sentinel.conf"  # sentinel rewrites it: its own, writable
            listen = f"port {port}\n"
            if self.tls is not None:  # the same files and rules as the servers'
                options = self.tls.server_options()
                tls_lines = "".join(
                    f"{name.removeprefix('--')} {value}\n"
                    for name, value in zip(options[::2], options[1::2], strict=True)
                )
                listen = f"port 0\ntls-port {port}\n{tls_lines}"
            config.write_text(
                listen + "bind 127.0.0.1\n"
                f'dir "{workdir}"\n'
                "loglevel warning\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
                + (f"sentinel auth-pass {SERVICE} {self.password}\n" if self.password else "")
            )
            proc = subprocess.Popen(
                [self._redis_sentinel, str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    command(port, "PING", tls=self._context)
                    return port, proc
                except OSError:
                    time.sleep(0.02)
            proc.kill()
            proc.wait(10)
        raise RuntimeError("redis-sentinel did not start")

    def _watch_events(self) -> None:
        """Every event of the first sentinel into :attr:`events`, read in a thread."""
        port = self.sentinels[0][0]
        conn = connect(port, self._context)
        conn.sendall(_encode("PSUBSCRIBE", "*"))
        conn.settimeout(None)
        self._watch = conn
        reader = conn.makefile("rb")

        def read() -> None:
            try:
                while True:
                    message = _reply(reader)
                    if message and message[0] == "pmessage":
                        self.events.append((time.monotonic(), message[2], message[3]))
            except (OSError, ConnectionError, ValueError):
                return

        threading.Thread(target=read, daemon=True).start()

    def primary_port(self) -> int:
        """The primary's port, as the first sentinel says now."""
        reply = command(
            self.sentinels[0][0],
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            SERVICE,
            tls=self._context,
        )
        return int(reply[1])

    def kill_primary(self) -> float:
        """SIGKILL the primary; the monotonic time of the kill."""
        assert self.primary.proc is not None
        self.primary.proc.kill()
        killed = time.monotonic()
        self.primary.proc.wait(10)
        self.primary.proc = None
        return killed

    def event_time(self, channel: str, after: float = 0.0) -> float | None:
        """When the first sentinel published on ``channel`` (after ``after``)."""
        for at, name, _ in list(self.events):
            if name == channel and at >= after:
                return at
        return None

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.close()
        for _, proc in self.sentinels:
            proc.kill()
            proc.wait(10)
        self.sentinels.clear()
        for server in (self.primary, self.replica):
            if server is not None:
                server.stop(kill=True)
