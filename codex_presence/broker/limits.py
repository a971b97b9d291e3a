"""What one request may cost the broker: sizes and deadlines, as one typed config object.

:class:`BrokerLimits` is handed to the app (:func:`~codex_presence.broker.app.create_app`),
to the server (:class:`~codex_presence.broker.server.BrokerServer`, whose HTTP protocol
bounds each request head) and to the web roster (its sign-in form), so that each bound is
set in one place and a test can make the deadlines short.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BrokerLimits"]


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerLimits:
    """The broker's bounds; the defaults are the production ones."""

    max_body: int = 1024
    """Bytes of an activity report's body (413 past it, enforced while reading)."""
    body_timeout: float = 10.0
    """Seconds a request body may take to arrive (408 past it)."""
    max_head: int = 64 * 1024
    """Bytes of a request head (431 past it)."""
    head_timeout: float = 10.0
    """Seconds a request head may take, from the connection's start or the previous
    response's end (408 past it)."""
    max_held: int = 8 * 1024 * 1024
    """Bytes that pipelining connections may hold unparsed, all together (each at most
    ``max_head``): past it, a connection that has to hold more is closed."""
    max_connections: int = 4096
    """Open connections, SSE streams included (past it, a new one gets 503 and is closed)."""
    max_subscribers: int = 32
    """Open streams per member (429 past it)."""
    max_form: int = 4096
    """Bytes of the web roster's sign-in form (413 past it)."""
