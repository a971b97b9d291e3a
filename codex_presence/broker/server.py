"""The broker on a socket: uvicorn, bounded, and quick to notice a vanished peer.

:class:`BrokerServer` is uvicorn for the broker app: it ends the SSE streams first on
shutdown (else shutdown would wait for every subscriber to leave), bounds each request
head with the limits it is given (:mod:`codex_presence.broker.http_guard`), says when it
listens, and stops when the broker's background work failed (uvicorn would go on serving
after its app's lifespan task died: a broker alive but keeping no state).
:func:`listen_socket` makes the listening socket, with the dead-peer settings that drop a
subscriber whose machine vanished within :data:`DEAD_PEER_TIMEOUT`.
"""

from __future__ import annotations

import gc
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import uvicorn

from codex_presence._wire import SILENT_STREAM_TIMEOUT
from codex_presence.broker.http_guard import guarded_protocol
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.state import Broker

__all__ = [
    "DEAD_PEER_TIMEOUT",
    "GC_THRESHOLD",
    "LISTEN_BACKLOG",
    "BrokerServer",
    "bound_socket",
    "listen_socket",
    "settle_gc",
]

DEFAULT_LIMITS = BrokerLimits()
LISTEN_BACKLOG = 65535
"""Connections the kernel may hold for the broker to accept (it caps this at
``net.core.somaxconn``). uvicorn's 2,048 overflowed when thousands of subscribers came at
once (a broker restarted under a large team): the kernel then dropped their handshakes,
and each came back after its SYN's retransmission timeout, 1 s, then 3 s, then 7 s."""


class BrokerServer(uvicorn.Server):
    """uvicorn for the broker app: on shutdown, end the SSE streams first (else shutdown
    would wait for every subscriber to leave); once listening, call ``on_started``; stop
    when the broker :attr:`~codex_presence.broker.state.Broker.failed`. With
    ``signals=False`` it leaves SIGINT and SIGTERM alone: a program that embeds the broker
    (the demo) ends everything at once on Ctrl-C, rather than the broker first, which its
    own clients would see as a broker gone away."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        broker: Broker,
        limits: BrokerLimits = DEFAULT_LIMITS,
        on_started: Callable[[], None] | None = None,
        signals: bool = True,
    ) -> None:
        if config.http in ("auto", "httptools"):  # bound what a request head may cost
            config.http = guarded_protocol(limits)
        config.backlog = max(config.backlog, LISTEN_BACKLOG)  # uvicorn listens again with it
        super().__init__(config)
        self.broker = broker
        self.on_started = on_started
        self._signals = signals

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        if self._signals:
            with super().capture_signals():
                yield
        else:
            yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit and self.on_started is not None:
            self.on_started()

    async def on_tick(self, counter: int) -> bool:
        if self.broker.failed:
            self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.broker.close()
        await super().shutdown(sockets)


GC_THRESHOLD = 10_000
"""Allocations (net of frees) between collections of the garbage collector's youngest
generation: CPython's 700 made one every few requests, and every tenth batch of them a
look at the next generation. With 10,000 streams open (~90 objects each that the collector
tracks: their coroutines, tasks, futures), the full collections that follow walk a million
objects each, 60-130 ms on a quiet machine (a report's delivery waits meanwhile). Fewer
young collections promote fewer short-lived objects, so the old generation grows (and a
full collection comes) more slowly; a young collection of 10,000 objects takes 0.3 ms."""


def settle_gc() -> None:
    """The broker process's garbage collector, once it has started: what start-up made
    (the modules, the app, the team) moved out of the collector's sight with
    :func:`gc.freeze` (it lives as long as the process: no full collection need walk it
    again), and the youngest generation's threshold raised to :data:`GC_THRESHOLD`. For the
    broker's own process (the command), not for a program that embeds the broker."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, older, oldest)


DEAD_PEER_TIMEOUT = SILENT_STREAM_TIMEOUT
"""Seconds of unacknowledged data (or keep-alive probes) before a connection is dropped."""


def _drop_dead_peers(sock: socket.socket, timeout: float) -> None:
    """Best effort: these options are Linux's (others keep the system's defaults)."""
    options = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", max(1, round(timeout / 3))),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", max(1, round(timeout / 9))),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", 3),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", round(timeout * 1000)),
    ]
    for level, name, value in options:
        option = getattr(socket, name, None)
        if option is not None:
            with suppress(OSError):
                sock.setsockopt(level, option, value)


def listen_socket(
    host: str = "127.0.0.1", port: int = 0, *, dead_peer_timeout: float = DEAD_PEER_TIMEOUT
) -> socket.socket:
    """A listening TCP socket to hand to ``BrokerServer.run(sockets=[...])``.

    Created with ``IPPROTO_TCP`` spelled out: asyncio sets ``TCP_NODELAY`` only on sockets
    whose ``proto`` says TCP, and without it every response with a body stalls ~40 ms
    (Nagle's algorithm against the client's delayed ACK).

    A subscriber whose machine vanished (no FIN, no RST: a laptop lid, a dropped link)
    would stay counted as connected until the kernel gives up retransmitting, ~15 minutes.
    ``TCP_USER_TIMEOUT`` (inherited by accepted sockets, as are the keep-alive settings)
    makes it ``dead_peer_timeout`` (:data:`DEAD_PEER_TIMEOUT`: three stream keep-alives
    unanswered).
    """
    sock = bound_socket(host, port, dead_peer_timeout=dead_peer_timeout)
    try:
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def bound_socket(
    host: str = "127.0.0.1", port: int = 0, *, dead_peer_timeout: float = DEAD_PEER_TIMEOUT
) -> socket.socket:
    """:func:`listen_socket` before its ``listen()``: the port is taken (nobody else can
    bind it) while connections to it are still refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _drop_dead_peers(sock, dead_peer_timeout)
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    return sock
