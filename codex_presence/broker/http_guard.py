"""What a connection may cost the broker before its request reaches the app.

uvicorn's httptools protocol (0.30–0.54 at least) waits for a request head forever and
keeps every header line in memory, however many arrive: one slowloris client trickling
header bytes holds a socket indefinitely, and one client sending endless headers grows the
broker by as much as it sends (40 MB of headers: +40 MB RSS). Neither reaches the ASGI
app, so no middleware can see it. :class:`GuardedHttpToolsProtocol` adds the two missing
bounds at the protocol:

* a request head must be complete within ``head_timeout`` seconds of the connection
  opening or of the previous response ending (else ``408`` and close);
* a request head may not exceed ``max_head`` bytes (else ``431`` and close).

Both come from the server's :class:`~codex_presence.broker.limits.BrokerLimits`
(:func:`guarded_protocol` makes the protocol class for one set of limits).

Once a head is in, the request is the app's business (the broker bounds the body itself),
so long-lived SSE streams are untouched. :class:`~.server.BrokerServer` installs this
protocol whenever uvicorn would have picked httptools.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from codex_presence.broker.limits import BrokerLimits

__all__ = ["GuardedHttpToolsProtocol", "guarded_protocol"]

_DEFAULTS = BrokerLimits()

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size cap on each request head."""

    head_timeout: float = _DEFAULTS.head_timeout
    max_head: int = _DEFAULTS.max_head

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._awaiting_head():
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head:
                self._refuse(431, f"a request head is limited to {self.max_head} bytes")
        else:
            self._head_bytes = 0
            self._disarm()  # a request is in: its body and response are the app's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_bytes = 0
        if not self.transport.is_closing():
            self._arm()

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

    def _refuse(self, status: int, message: str) -> None:
        self._disarm()
        body = message.encode()
        head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        self.transport.write(
            head
            + b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        self.transport.close()


def guarded_protocol(limits: BrokerLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for uvicorn's ``Config.http``, bounding heads as ``limits`` say."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"head_timeout": limits.head_timeout, "max_head": limits.max_head},
    )
