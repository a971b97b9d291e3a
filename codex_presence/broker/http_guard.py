"""What a connection may cost the broker before its request reaches the app.

uvicorn's httptools protocol (0.30–0.54 at least) bounds none of this, and none of it
reaches the ASGI app, so no middleware can see it:

* it waits for a request head forever, and keeps every header line in memory however
  many arrive (one slowloris client holds a socket indefinitely; 40 MB of headers grow
  the broker by 40 MB);
* it parses every request a client pipelines, whether or not the client reads the
  answers: a client that writes ``GET /healthz`` heads in a loop and never reads grew the
  broker from 36 MB to 1.5 GB in 15 s (each queued head costs ~2 KB of Python objects);
* it accepts every connection it is offered.

:class:`GuardedHttpToolsProtocol` adds the missing bounds at the protocol:

* a request head must be complete within ``head_timeout`` seconds of the connection
  opening or of the previous response ending (else ``408`` and close);
* a request head may not exceed ``max_head`` bytes (else ``431`` and close; a head queued
  behind a request in progress is counted too, and its connection is closed);
* requests are parsed :data:`SLICE` bytes at a time, and parsing stops (and reading with
  it) while a parsed request waits behind the one in progress: a pipelining client gets
  its answers one by one, and what it sends meanwhile stays in its socket, unread. At most
  ``max_head`` bytes of one connection wait unparsed (past that, the connection is
  closed), at most ``max_held`` bytes of all connections together (past that, a
  connection that would hold more is closed: 4,000 connections pipelining 60 KB each
  took the broker from 34 to 350 MB, never given back), and at most one parsed head
  waits as a request (the parser is fed one head at a time: a slice holds a few dozen
  minimal heads, each ~2 KB of Python objects once parsed);
* past ``max_connections`` open connections, a new one is answered ``503`` (with
  ``retry-after``) and closed.

All of them come from the server's :class:`~codex_presence.broker.limits.BrokerLimits`
(:func:`guarded_protocol` makes the protocol class for one set of limits).

Once a head is in, the request is the app's business (the broker bounds the body itself),
so long-lived SSE streams are untouched. :class:`~.server.BrokerServer` installs this
protocol whenever uvicorn would have picked httptools.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from codex_presence.broker.limits import BrokerLimits

__all__ = ["SLICE", "GuardedHttpToolsProtocol", "guarded_protocol"]

logger = logging.getLogger("codex_presence.broker")

_DEFAULTS = BrokerLimits()

SLICE = 512
"""Bytes handed to the HTTP parser at a time: what bounds the heads parsed ahead of the
request in progress (a minimal head is ~20 bytes, so a few dozen at most)."""

OVER_CAP_GRACE = 1.0
"""Seconds a connection past the cap is given to send its request (and so to read its 503
rather than a reset) before it is closed."""

_REASONS = {
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


class HeldBytes:
    """The bytes that every connection of a server holds unparsed, and their bound."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


class _PipelineFlow(FlowControl):
    """uvicorn's flow control, except that reading stays paused while the protocol holds
    requests or bytes that it has not started on: uvicorn resumes reading at every
    response's end and whenever the app waits for a message, queue or no queue.

    And the event that a send waits on while the client does not read is made when
    writing pauses, not with every connection: an :class:`asyncio.Event` is ~760 bytes
    (its deque of waiters), on each of the 10,000 idle streams of a large team."""

    def __init__(  # no super().__init__(): its event is the one not made here
        self, transport: asyncio.Transport, protocol: GuardedHttpToolsProtocol
    ) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._writable: asyncio.Event | None = None
        self._protocol = protocol

    async def drain(self) -> None:
        if self._writable is not None:
            await self._writable.wait()

    def pause_writing(self) -> None:
        if not self.write_paused:
            self.write_paused = True
            self._writable = asyncio.Event()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            writable, self._writable = self._writable, None
            if writable is not None:
                writable.set()

    def resume_reading(self) -> None:
        if not self._protocol.backlogged:
            super().resume_reading()


class _Pipeline(list[tuple[object, object]]):
    """uvicorn's queue of pipelined requests (it appends on the left and pops on the
    right), as a list: at most one request waits here (see the module's docstring), and an
    empty :class:`collections.deque` is ~760 bytes on every connection."""

    def appendleft(self, item: tuple[object, object]) -> None:
        self.insert(0, item)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded heads, pipelines and connections."""

    __slots__ = ("_head_bytes", "_head_timer", "_held", "_held_at", "_in_head", "_over_cap")
    """Slots, not the instance's ``__dict__``: uvicorn's own attributes nearly fill the 30
    that Python 3.11 keeps in an object's compact form, and these six more made every
    connection's attributes a dict of its own, ~1.5 kB (tracemalloc)."""

    head_timeout: float = _DEFAULTS.head_timeout
    max_head: int = _DEFAULTS.max_head
    max_connections: int = _DEFAULTS.max_connections
    held_budget: HeldBytes = HeldBytes(_DEFAULTS.max_held)

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        self._head_bytes = 0
        self._in_head = False
        self._held = b""
        """Bytes received but not parsed yet (from :attr:`_held_at` on): a request waits
        behind the one in progress."""
        self._held_at = 0
        self._over_cap = False
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self.flow = _PipelineFlow(transport, self)
        self.pipeline = _Pipeline()  # type: ignore[assignment]
        if len(self.connections) > self.max_connections:
            self._over_cap = True
            logger.warning(
                "refusing connections: %d are open (--max-connections %d)",
                len(self.connections) - 1,
                self.max_connections,
            )
            self._head_timer = self.loop.call_later(OVER_CAP_GRACE, self._refuse_over_cap)
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._release_held()
        super().connection_lost(exc)

    @property
    def backlogged(self) -> bool:
        """Whether requests or bytes wait behind the request in progress."""
        return bool(self.pipeline or self._held)

    # -- parsing, a slice at a time --------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._over_cap:
            self._refuse_over_cap()
            return
        if self._held:
            data = self._held[self._held_at :] + data
            self._release_held()
        self._feed(data, 0)

    def _feed(self, data: bytes, offset: int) -> None:
        """Parse ``data`` from ``offset`` one head (or a slice) at a time, until a parsed
        request has to wait."""
        view = memoryview(data)
        while offset < len(data):
            if self.pipeline:  # a request waits for the one in progress: parse no further
                self._hold(data, offset)
                return
            end = offset + SLICE
            head_end = data.find(b"\r\n\r\n", offset, end + 3)
            if head_end != -1:  # one head at a time: at most one request waits parsed
                end = head_end + 4
            piece = view[offset:end]
            offset += len(piece)
            super().data_received(piece)  # type: ignore[arg-type]  # httptools takes buffers
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # refused, or upgraded to another protocol
            if self._in_head:
                self._head_bytes += len(piece)
                if self._head_bytes > self.max_head:
                    self._refuse(431, f"a request head is limited to {self.max_head} bytes")
                    return

    def _hold(self, data: bytes, offset: int) -> None:
        """Keep ``data[offset:]`` (not a copy) until the request in progress ends, within
        the connection's bound and the bound of every connection's together."""
        rest = len(data) - offset
        budget = self.held_budget
        if rest > self.max_head or budget.held + len(data) > budget.limit:
            # A pipeline this deep, or this many pipelines at once, is no client's honest
            # use: stop it here.
            logger.info(
                "closing a connection that pipelined %d bytes (%d held by all, at most %d)",
                rest,
                budget.held,
                budget.limit,
            )
            self.transport.close()
            return
        self._held, self._held_at = data, offset
        budget.held += len(data)  # what is kept: the parsed part too (the same object)
        self.flow.pause_reading()

    def _release_held(self) -> None:
        self.held_budget.held -= len(self._held)
        self._held, self._held_at = b"", 0

    def _feed_held(self) -> None:
        if self.transport.is_closing() or self.parser is None:
            return
        data, offset = self._held, self._held_at
        self._release_held()
        self._feed(data, offset)
        self.flow.resume_reading()  # a no-op while anything still waits

    # -- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm()  # a request is in: its body and response are the app's
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts the next queued request, if any
        if self.transport.is_closing():
            return
        if self._held and not self.pipeline:
            self.loop.call_soon(self._feed_held)
        else:
            self.flow.resume_reading()  # a no-op while anything still waits
        self._arm()

    # -- deadlines and refusals ------------------------------------------------------------

    def _awaiting_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._awaiting_head() and not self.transport.is_closing():
            self._refuse(408, f"no complete request head within {self.head_timeout:g} s")

    def _refuse_over_cap(self) -> None:
        if not self.transport.is_closing():
            self._refuse(
                503,
                f"the broker has {self.max_connections} connections open; try again later",
                b"retry-after: 5\r\n",
            )

    def _refuse(self, status: int, message: str, extra: bytes = b"") -> None:
        self._disarm()
        body = message.encode()
        head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response is under way: no answer can go in order
            return
        self.transport.write(
            head
            + b"content-type: text/plain; charset=utf-8\r\n"
            + extra
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        self.transport.close()


def guarded_protocol(limits: BrokerLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``Config.http``, bounding what ``limits`` say."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "head_timeout": limits.head_timeout,
            "max_head": limits.max_head,
            "max_connections": limits.max_connections,
            "held_budget": HeldBytes(limits.max_held),
        },
    )
