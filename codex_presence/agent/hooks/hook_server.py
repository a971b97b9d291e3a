"""The loopback hook server: an agent client's hooks in, ``200 {}`` out, at once.

What comes in is a hook's payload POSTed by the client itself (an HTTP hook) or by the process
an async command hook of ours runs (:func:`~codex_presence.core.hooks.poster.poster_script`,
or curl: :func:`~codex_presence.core.hooks.poster.poster_command`).

It owns one TCP listener on 127.0.0.1 (an ephemeral port) and the HTTP/1.1 around each hook
POST; what a hook means is the mapping's business. HTTP is parsed by h11 (sans-I/O, so this
module is only the socket loop around it) on anyio streams; the client keeps its connection
alive between hooks, and so do we.

* The URL is ``http://127.0.0.1:PORT/<secret>/hook``: the secret (fresh per session, 24
  random bytes) is the only credential; or ``http://127.0.0.1:PORT/hook`` with the secret
  in the :data:`~codex_presence.core.hooks.poster.HOOK_SECRET_HEADER` header (a client's
  HTTP hooks: a client may print the URL of a hook that failed, on the person's terminal). A
  wrong path gets 404 before its body is read, a method other than POST 405; both close
  the connection. The secret is never logged.
* The answer comes before any work: the client waits for the hooks of its own flow
  (UserPromptSubmit, Pre/PostToolUse, PostToolBatch, Stop, SessionEnd), so every
  millisecond here is a millisecond of the turn. Only once ``200 {}`` is sent does the
  parsed payload go to ``on_hook``, with the request's sequence number (the
  ``x-hook-seq`` header of an async command hook's delivery; None without one).
* Bounded: a request head over 64 KiB gets 431, a body over :data:`MAX_BODY` 413 (neither
  is buffered whole), a body that is not a JSON object 400, each with a one-line reason. A
  request must arrive whole within ``request_timeout`` of its first byte, and a new
  connection must start its first request within ``request_timeout`` too (else it is
  closed, unanswered).
* **Another user's connection costs the client nothing.** The port is open to every local
  user; only our own has a hook to send. Each accepted connection's peer is looked up
  (:mod:`.peer_uid`: the kernel's owner of the peer's socket); another uid's, or one
  already gone, is reset at once, unread, with no task, no parser and no timer behind
  it. The accept loop takes what the backlog holds in one go, so a flood is drained at
  the cost of a lookup each, and the client's connection waits behind no parsing of theirs.
  A connection whose peer is already gone (no uid to tell) is served only if its first
  bytes, peeked without waiting, are the secret's request line: a poster that gave up
  while its connection waited behind a flood has sent its hook whole, and it is handed
  on (after the 200 it can no longer read); anything else is reset unread.
  A connection of our uid without the secret gets its 404 and is closed, without the
  lingering read a refusal of the client's own gets.
* **A flood is no log flood**: refusals of connections that never showed the secret are
  counted and said at most once every few seconds (at debug), never one line each.
* At most ``max_connections`` connections at once, and nobody can fill them to keep
  the client out (the port is open to every local user): when they are all taken, a new one
  takes the place of the oldest that has not shown the secret yet, else of the oldest
  that waits between requests; only when every one is in the middle of a request of
  the client's is the new one closed at once. A keep-alive connection that has shown the
  secret is never timed out between requests: that is the client's, and closing it could race
  with its next hook.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import socket
import struct
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import h11
import orjson
from anyio.abc import SocketStream, TaskStatus

from codex_presence._wire import Refused
from codex_presence.agent.hooks.listener import EarlyAccepts, listen_loopback, new_hook_path
from codex_presence.agent.hooks.peer_uid import peer_uid
from codex_presence.core.hooks.poster import HOOK_SECRET_HEADER, MAX_BODY, SEQ_HEADER

__all__ = ["MAX_BODY", "HookServer"]

logger = logging.getLogger("codex_presence.hooks")

MAX_HEAD = 64 * 1024
_READ = 16 * 1024
"""Reads smaller than MAX_HEAD: h11 checks the cap between reads."""
_LINGER = 1.0
"""After a refusal, how long the rest of the request is read (and dropped) so that a client
still sending it sees our answer instead of a reset."""
_OK = b"{}"
_SEQ = SEQ_HEADER.encode()
_SECRET = HOOK_SECRET_HEADER.encode()
_HEADER_PATH = b"/hook"
"""The path of a request whose secret is in :data:`HOOK_SECRET_HEADER`."""
_ACCEPT_BURST = 64
"""Connections taken from the backlog per wake-up before the others get a turn."""
_TALLY_EVERY = 5.0
"""Seconds between two lines about refused connections."""
_RESET = struct.pack("ii", 1, 0)
"""SO_LINGER on, 0 s: close() resets; no TIME_WAIT left behind for a refused peer."""


@dataclass(eq=False)
class _Client:
    """One open connection, as the connection cap sees it."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    trusted: bool = False
    """It sent a request head with the secret: the client's."""
    between_requests: bool = True
    """It waits for the first byte of its next request."""


class HookServer:
    """Serves one agent client session's hooks on loopback; see the module doc."""

    def __init__(
        self,
        on_hook: Callable[[dict[str, Any], int | None], object],
        *,
        max_body: int = MAX_BODY,
        max_connections: int = 64,
        request_timeout: float = 10.0,
        path: bytes | None = None,
    ) -> None:
        self._on_hook = on_hook
        self._max_body = max_body
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        self._path = path if path is not None else new_hook_path()
        self._clients: dict[_Client, None] = {}
        """The open connections, oldest first."""
        self._crowded = False
        self._uid = os.getuid()
        self._uid_unknown = False
        self._refusals: dict[str, int] = {}
        self._tally_due = float("-inf")
        self.port: int | None = None
        self.refused = 0
        """Requests answered with an error status (wrong secret, method, size, body)."""

    @property
    def url(self) -> str:
        """The hook URL, secret included: for the client's settings file, never for a log."""
        if self.port is None:
            raise RuntimeError("the hook server is not listening yet")
        return f"http://127.0.0.1:{self.port}{self._path.decode()}"

    def redact(self, data: bytes) -> bytes:
        """``data`` with the secret blanked out (the client writes the hook URL into its
        transcript's ``stop_hook_summary``; a recording must not carry it on)."""
        secret = self._path.split(b"/")[1]
        return data.replace(secret, b"REDACTED") if secret in data else data

    async def serve(
        self,
        *,
        listener: socket.socket | None = None,
        early: EarlyAccepts | None = None,
        task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen until cancelled; ``task_group.start(server.serve)`` returns the URL.
        ``listener``: one already listening (:func:`listen_loopback`, made before the
        client's spawn, its secret this server's ``path``), served and closed here; with
        the connections ``early`` took from it meanwhile, judged by their peers' uids."""
        with listener if listener is not None else listen_loopback() as listener:
            taken = early.stop() if early is not None else []
            listener.setblocking(False)
            self.port = listener.getsockname()[1]
            logger.debug("hook server listening on 127.0.0.1:%d", self.port)
            task_status.started(self.url)
            async with anyio.create_task_group() as tg:
                for sock, _, uid in taken:
                    if (refused := self._judged(sock, uid)) is None:
                        tg.start_soon(self._adopt, sock)
                    else:
                        self._reset(sock, refused)
                while True:
                    await anyio.wait_readable(listener)
                    for sock in self._accept_burst(listener):
                        tg.start_soon(self._adopt, sock)

    def _accept_burst(self, listener: socket.socket) -> list[socket.socket]:
        """What the backlog holds (up to a burst), another user's connections reset."""
        welcome: list[socket.socket] = []
        for _ in range(_ACCEPT_BURST):
            try:
                sock, peer = listener.accept()
            except BlockingIOError:
                break
            except OSError as exc:  # out of descriptors, say: the rest wait in the backlog
                if exc.errno not in (errno.ECONNABORTED, errno.EPROTO):
                    logger.debug("hook server: cannot accept a connection: %s", exc)
                    break
                continue
            refused = self._refusal(sock, peer)
            if refused is None:
                welcome.append(sock)
            else:
                self._reset(sock, refused)
        return welcome

    def _reset(self, sock: socket.socket, why: str) -> None:
        """Close a refused connection with a reset, unread; counted."""
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        sock.close()
        self._tally(why)

    def _refusal(self, sock: socket.socket, peer: tuple[str, int]) -> str | None:
        """Why the connection is not served, or None when the peer runs as our uid (or
        that cannot be told: it is served, as before)."""
        try:
            uid = peer_uid(sock.getsockname(), peer)
        except (OSError, ValueError, struct.error) as exc:
            return self._judged(sock, exc)
        return self._judged(sock, uid)

    def _judged(self, sock: socket.socket, uid: int | Exception | None) -> str | None:
        """:meth:`_refusal` for ``sock``'s peer's ``uid`` (the error, if it could not be
        told)."""
        if isinstance(uid, Exception):
            if not self._uid_unknown:  # said once
                logger.debug("hook server: cannot tell a peer's uid (%s); serving it", uid)
            self._uid_unknown = True
            return None
        if uid is None:  # a port probe, say: nothing to serve; unless it is a delivery
            return None if self._shows_secret(sock) else "closed before it was read"
        return None if uid == self._uid else "another user's"

    def _shows_secret(self, sock: socket.socket) -> bool:
        """Whether a connection whose peer is gone holds a hook for us: a poster that gave
        up waiting (the client's timeout) while its connection sat in the backlog, behind a
        flood, has sent it whole. Its first bytes are peeked, no more and without waiting:
        the secret's request line, or it is refused as before (bounded work, whoever it
        was: only our own user has the secret)."""
        line = b"POST " + self._path + b" "
        try:
            first = sock.recv(len(line), socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return False
        return hmac.compare_digest(first, line)

    async def _adopt(self, sock: socket.socket) -> None:
        try:
            stream = await SocketStream.from_socket(sock)
        except (OSError, ValueError):  # gone already ("the socket must be connected")
            sock.close()
            return
        await self._connection(stream)

    def _tally(self, why: str) -> None:
        """Count a refused connection; say the counts at most every few seconds."""
        self._refusals[why] = self._refusals.get(why, 0) + 1
        now = anyio.current_time()
        if now >= self._tally_due:
            counts = ", ".join(f"{why}: {n}" for why, n in self._refusals.items())
            logger.debug("hook server: refused connections (%s)", counts)
            self._refusals.clear()
            self._tally_due = now + _TALLY_EVERY

    # -- one connection ------------------------------------------------------------------

    async def _connection(self, stream: SocketStream) -> None:
        async with stream:
            if len(self._clients) >= self._max_connections and not self._make_room():
                if not self._crowded:  # said once: it is the client's screen
                    logger.warning(
                        "hook server: %d connections busy; refusing more", len(self._clients)
                    )
                self._crowded = True
                self._tally("busy")
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
                if client.trusted:
                    logger.debug("hook server: %s", exc)
                else:
                    self._tally("not HTTP")
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
        self._tally("idle, made room")
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
                if client.trusted:  # the client's own: let it read the answer
                    await self._linger(stream)
            if not client.trusted:
                self._tally("no secret")
            return False
        if received is None:
            return False  # closed between requests
        try:
            await self._send(conn, stream, 200, _OK)
        finally:  # it arrived whole: handed on, even to a sender gone meanwhile
            try:
                self._on_hook(*received)
            except Exception:  # a bug behind us must not cost the client its hooks
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
                    # Between the client's requests, no timer; a new connection gets one.
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
                seq = self._check_head(event, client)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self._max_body:
                    raise Refused(413, f"a hook body over {self._max_body} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return self._parse(bytes(body)), seq
            elif isinstance(event, h11.ConnectionClosed):
                return None

    def _check_head(self, request: h11.Request, client: _Client) -> int | None:
        """Refuses a request not for us (trusting the connection once it names our
        secret); its sequence number (None if it has none, or one that is not a small
        number: no opinion)."""
        if not self._names_secret(request):
            raise Refused(404, "no such hook")
        client.trusted = True
        if request.method != b"POST":
            raise Refused(405, "hooks are POSTed", headers={"allow": "POST"})
        seq = None
        for name, value in request.headers:
            if name == b"content-length" and int(value) > self._max_body:
                raise Refused(413, f"a hook body over {self._max_body} bytes")
            if name == _SEQ and value.isdigit() and len(value) <= 12:
                seq = int(value)
        return seq

    def _names_secret(self, request: h11.Request) -> bool:
        """Whether the request names our secret: in its path (our posters), or, on the
        path ``/hook``, in :data:`HOOK_SECRET_HEADER` (a client's HTTP hooks: it may print a
        failing hook's URL, never its headers)."""
        if request.target != _HEADER_PATH:
            return hmac.compare_digest(request.target, self._path)
        secret = self._path.split(b"/")[1]
        given = [value for name, value in request.headers if name == _SECRET]
        return len(given) == 1 and hmac.compare_digest(given[0], secret)

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
