"""The loopback hook server: Claude Code's hooks in, ``200 {}`` out, at once.

What comes in is a hook's payload POSTed by claude itself (an HTTP hook) or by the curl an
async command hook of ours runs (:func:`~codex_presence.core.claude.protocol.poster_command`).

It owns one TCP listener on 127.0.0.1 (an ephemeral port) and the HTTP/1.1 around each hook
POST; what a hook means is the mapping's business. HTTP is parsed by h11 (sans-I/O, so this
module is only the socket loop around it) on anyio streams; claude keeps its connection
alive between hooks, and so do we.

* The URL is ``http://127.0.0.1:PORT/<secret>/hook``: the secret (fresh per session, 24
  random bytes) is the only credential. A wrong path gets 404 before its body is read, a
  method other than POST 405; both close the connection. The secret is never logged.
* The answer comes before any work: claude waits for the hooks of its own flow
  (UserPromptSubmit, Pre/PostToolUse, PostToolBatch, Stop, SessionEnd), so every
  millisecond here is a millisecond of the turn. Only once ``200 {}`` is sent does the
  parsed payload go to ``on_hook``, with the request's sequence number (the
  ``x-hook-seq`` header of an async command hook's delivery; None without one).
* Bounded: a request head over 64 KiB gets 431, a body over :data:`MAX_BODY` 413 (neither
  is buffered whole), a body that is not a JSON object 400, each with a one-line reason. A
  request must arrive whole within ``request_timeout`` of its first byte, and a new
  connection must start its first request within ``request_timeout`` too (else it is
  closed, unanswered).
* At most ``max_connections`` connections at once, and nobody can fill them to keep
  claude out (the port is open to every local user): when they are all taken, a new one
  takes the place of the oldest that has not shown the secret yet, else of the oldest
  that waits between requests; only when every one is in the middle of a request of
  claude's is the new one closed at once. A keep-alive connection that has shown the
  secret is never timed out between requests: that is claude's, and closing it could race
  with its next hook.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import h11
import orjson
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from codex_presence._wire import Refused
from codex_presence.core.claude.protocol import SEQ_HEADER

__all__ = ["MAX_BODY", "HookServer"]

logger = logging.getLogger("codex_presence.hooks")

MAX_BODY = 32 * 1024 * 1024
"""Hook bodies carry tool inputs and outputs (claude truncates those); far above them."""
MAX_HEAD = 64 * 1024
_READ = 16 * 1024
"""Reads smaller than MAX_HEAD: h11 checks the cap between reads."""
_LINGER = 1.0
"""After a refusal, how long the rest of the request is read (and dropped) so that a client
still sending it sees our answer instead of a reset."""
_OK = b"{}"
_SEQ = SEQ_HEADER.encode()


@dataclass(eq=False)
class _Client:
    """One open connection, as the connection cap sees it."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    trusted: bool = False
    """It sent a request head with the secret: claude's."""
    between_requests: bool = True
    """It waits for the first byte of its next request."""


class HookServer:
    """Serves one Claude Code session's hooks on loopback; see the module doc."""

    def __init__(
        self,
        on_hook: Callable[[dict[str, Any], int | None], object],
        *,
        max_body: int = MAX_BODY,
        max_connections: int = 64,
        request_timeout: float = 10.0,
    ) -> None:
        self._on_hook = on_hook
        self._max_body = max_body
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        self._path = f"/{secrets.token_urlsafe(24)}/hook".encode()
        self._clients: dict[_Client, None] = {}
        """The open connections, oldest first."""
        self._crowded = False
        self.port: int | None = None
        self.refused = 0
        """Requests answered with an error status (wrong secret, method, size, body)."""

    @property
    def url(self) -> str:
        """The hook URL, secret included: for claude's settings file, never for a log."""
        if self.port is None:
            raise RuntimeError("the hook server is not listening yet")
        return f"http://127.0.0.1:{self.port}{self._path.decode()}"

    def redact(self, data: bytes) -> bytes:
        """``data`` with the secret blanked out (claude writes the hook URL into its
        transcript's ``stop_hook_summary``; a recording must not carry it on)."""
        secret = self._path.split(b"/")[1]
        return data.replace(secret, b"REDACTED") if secret in data else data

    async def serve(self, *, task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; ``task_group.start(server.serve)`` returns the URL."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            self.port = listener.extra(SocketAttribute.local_port)
            logger.debug("hook server listening on 127.0.0.1:%d", self.port)
            task_status.started(self.url)
            await listener.serve(self._connection)

    # -- one connection ------------------------------------------------------------------

    async def _connection(self, stream: SocketStream) -> None:
        async with stream:
            if len(self._clients) >= self._max_connections and not self._make_room():
                level = logging.DEBUG if self._crowded else logging.WARNING
                logger.log(
                    level, "hook server: %d connections busy; refusing more", len(self._clients)
                )
                self._crowded = True  # said once: it is claude's screen
                return
            client = _Client()
            self._clients[client] = None
            try:
                with client.scope:
                    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
                    while await self._exchange(conn, stream, client):
                        conn.start_next_cycle()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the client went away
            except h11.ProtocolError as exc:
                logger.debug("hook server: %s", exc)
            except Exception:  # one connection's trouble must never end the server
                logger.exception("hook server: a connection failed")
            finally:
                self._clients.pop(client, None)

    def _make_room(self) -> bool:
        """Close the oldest connection that has not shown the secret, else the oldest
        waiting between requests; whether there was one."""
        victim = next((c for c in self._clients if not c.trusted), None)
        if victim is None:
            victim = next((c for c in self._clients if c.between_requests), None)
        if victim is None:
            return False
        logger.debug("hook server: all connections taken; closing the oldest idle one")
        del self._clients[victim]
        victim.scope.cancel()
        return True

    async def _exchange(self, conn: h11.Connection, stream: SocketStream, client: _Client) -> bool:
        """One request and its answer; whether the connection can take another."""
        try:
            received = await self._receive(conn, stream, client)
        except Refused as refusal:
            self.refused += 1
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                body = orjson.dumps({"error": refusal.reason})
                headers = [(k.encode(), v.encode()) for k, v in refusal.headers.items()]
                await self._send(conn, stream, refusal.status, body, headers, close=True)
                await self._linger(stream)
            return False
        if received is None:
            return False  # closed between requests
        await self._send(conn, stream, 200, _OK)
        try:
            self._on_hook(*received)
        except Exception:  # a bug behind us must not cost claude its hooks
            logger.exception("handling a hook failed")
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _receive(
        self, conn: h11.Connection, stream: SocketStream, client: _Client
    ) -> tuple[dict[str, Any], int | None] | None:
        """The next request's JSON body and sequence number (its :data:`SEQ_HEADER`, if
        any), or None if the client closed before one began (or, on a new connection,
        never began one in time)."""
        body = bytearray()
        seq: int | None = None
        deadline: float | None = None  # set at the request's first byte
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise Refused(exc.error_status_hint, str(exc) or "malformed request") from None
            if event is h11.NEED_DATA:
                if deadline is None and conn.their_state is h11.IDLE and not body:
                    # Between claude's requests, no timer; a new connection gets one.
                    first = None if client.trusted else anyio.current_time()
                    client.between_requests = True
                    data = await self._read(
                        stream, None if first is None else first + self._request_timeout
                    )
                    client.between_requests = False
                    if data is None:
                        return None  # it never said a thing: closed, unanswered
                    deadline = anyio.current_time() + self._request_timeout
                else:
                    deadline = deadline or anyio.current_time() + self._request_timeout
                    data = await self._read(stream, deadline)
                if data is None:
                    raise Refused(408, "the request did not arrive in time")
                conn.receive_data(data)
                if not data and conn.their_state is h11.IDLE:
                    return None
            elif isinstance(event, h11.Request):
                seq = self._check_head(event)
                client.trusted = True
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self._max_body:
                    raise Refused(413, f"a hook body over {self._max_body} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return self._parse(bytes(body)), seq
            elif isinstance(event, h11.ConnectionClosed):
                return None

    def _check_head(self, request: h11.Request) -> int | None:
        """Refuses a request not for us; its sequence number (None if it has none, or
        one that is not a small number: no opinion)."""
        if not hmac.compare_digest(request.target, self._path):
            raise Refused(404, "no such hook")
        if request.method != b"POST":
            raise Refused(405, "hooks are POSTed", headers={"allow": "POST"})
        seq = None
        for name, value in request.headers:
            if name == b"content-length" and int(value) > self._max_body:
                raise Refused(413, f"a hook body over {self._max_body} bytes")
            if name == _SEQ and value.isdigit() and len(value) <= 12:
                seq = int(value)
        return seq

    @staticmethod
    def _parse(body: bytes) -> dict[str, Any]:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise Refused(400, "the body is not JSON") from None
        if not isinstance(message, dict):
            raise Refused(400, "the body is not a JSON object")
        return message

    async def _read(self, stream: SocketStream, deadline: float | None) -> bytes | None:
        """Bytes from the client (b"" at its end); None once ``deadline`` passed."""
        with anyio.move_on_after(
            None if deadline is None else max(0.0, deadline - anyio.current_time())
        ):
            try:
                return await stream.receive(_READ)
            except anyio.EndOfStream:
                return b""
        return None

    @staticmethod
    async def _linger(stream: SocketStream) -> None:
        """Half-close, then drop what the client still sends, for a moment, unbuffered."""
        with anyio.move_on_after(_LINGER), suppress(anyio.EndOfStream):
            await stream.send_eof()
            while await stream.receive(_READ):
                pass

    @staticmethod
    async def _send(
        conn: h11.Connection,
        stream: SocketStream,
        status: int,
        body: bytes,
        headers: list[tuple[bytes, bytes]] | None = None,
        *,
        close: bool = False,
    ) -> None:
        head = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
            *(headers or []),
        ]
        if close:
            head.append((b"connection", b"close"))
        events = (h11.Response(status_code=status, headers=head), h11.Data(data=body))
        data = b"".join(conn.send(event) or b"" for event in (*events, h11.EndOfMessage()))
        await stream.send(data)
