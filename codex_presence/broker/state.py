"""The reference presence broker: registry, activity TTL, roster and live SSE, over HTTP.

:class:`Broker` holds the rules (who is connected, who is doing what, the fan-out of
changes); :func:`create_app` puts a Starlette app in front of it. State lives in memory in
one process, as the design says, behind the :class:`~codex_presence.broker.connections.Registry` and
:class:`~codex_presence.broker.activity.ActivityStore` interfaces.

Endpoints
---------
``POST /presence/activity``
    Bearer auth. Body exactly ``{"state": "idle" | "working" | "blocked"}`` (JSON; a
    content type, if given, must be ``application/json``). Keyed on the authenticated
    member: nothing in the body can name anyone else. 204 on success; 401 without or with a
    wrong token; 415 for another content type; 413 past ``max_body`` bytes (enforced while
    reading, so a huge body is never buffered); 408 for a body still arriving after
    ``BODY_TIMEOUT`` s; 400 ``{"error": reason}`` for anything else.
``GET /subscribe?name=<self>``
    Bearer auth; the token must be ``<self>``'s (403 otherwise, 400 without ``name``, 429
    past ``max_subscribers`` streams for one member). An SSE stream held open; while it is
    open the member's ``connected`` counts it. It is uncounted on every kind of close: a
    clean disconnect, a broken pipe, the subscriber's death (the kernel closes the socket
    and the server sees EOF), or the broker shutting down.
``GET /roster``
    Bearer auth. A JSON array of the design's Presence objects, one per team member in
    team-file order, connected or not. ``createdAt`` and ``lastSeen`` are unix epoch
    milliseconds, 0 for a member the broker has never seen; ``lastSeen`` ticks on every
    subscribe and every activity report.
``GET /whoami``
    Bearer auth. ``{"team": name, "name": member, "role": Role | null}`` — what a client
    needs to print ``team <name> roster:`` and the ``(you)`` marker.
``GET /healthz``
    No auth. ``{"status": "ok"}``.

The SSE stream (for the web roster and ``roster --watch``)
----------------------------------------------------------
The stream opens with ``retry: 2000`` (EventSource reconnects after 2 s). Every event's
``data`` is one line of JSON.

``event: roster``
    First on every stream, and again whenever a slow subscriber has fallen too far behind
    to be sent the individual changes: ``{"team": str, "you": str, "members": [Presence,
    ...]}`` — the whole roster, as ``GET /roster`` returns it. Replace everything.
``event: presence``
    ``Presence`` — one member's full, current object, sent when their ``connected`` or
    their activity changed. Replace that member's row (matched by ``name``). Missing
    ``activity`` means idle, as everywhere.
``: keepalive``
    A comment line every ``keepalive`` seconds while nothing else was published.

TTL lapses are resolved on read (there is no sweeper in the tracker), so nothing *has* to
happen when a report lapses. The fan-out task nevertheless wakes at the earliest TTL
deadline, reads the members whose shown activity may have lapsed, and sends a
``presence`` event for each one that did: a UI never has to poll ``GET /roster`` to see a
crashed runner go idle. Changes are coalesced: at most one batch every
``fanout_interval`` seconds (longer with many subscribers: the pause grows so that the
fan-out stays near :data:`FANOUT_SENDS_PER_SECOND` writes per second), each batch encoded
once and shared by every subscriber, so that a burst of reports costs each subscriber one
write, not one per report, and a member who flips twice in a window is sent once. The
keep-alive is a broker-wide tick published like a batch, so a waiting stream holds no
timer of its own. ``lastSeen`` alone changing sends nothing; it rides along with the next
event and is exact in ``GET /roster``.

Authentication is in one place, :meth:`Broker.authenticate`, which asks each
:data:`Authenticator` in turn (the bearer header first). A session cookie is added by
passing one more authenticator to :class:`Broker` (or to :func:`create_app`).

:class:`BrokerServer` also bounds what a connection costs before the app sees a request
(a deadline and a size cap on each request head: :mod:`codex_presence.broker.http_guard`).
"""

from __future__ import annotations

import logging
import math
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from codex_presence.broker.activity import DEFAULT_TTL, ActivityStore, ActivityTracker
from codex_presence.broker.connections import MemoryRegistry, Registry
from codex_presence.broker.team import Member, Team
from codex_presence.client.roster_text import Presence, presence
from codex_presence.core.activity import ActivityState

__all__ = [
    "Authenticator",
    "Broker",
    "BrokerServer",
    "bearer_token",
    "create_app",
    "listen_socket",
]

logger = logging.getLogger("codex_presence.broker")

Authenticator = Callable[[Request], "Member | None"]
"""Maps a request to the member it is authenticated as, or None."""

MAX_BODY = 1024
KEEPALIVE = 15.0
FANOUT_INTERVAL = 0.05
FANOUT_SENDS_PER_SECOND = 5000
MAX_SUBSCRIBERS = 32
BODY_TIMEOUT = 10.0
_LOG_SIZE = 64
_STATES = {state.value: state for state in ActivityState}
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None. Two such
    headers are ambiguous (a proxy added one?): neither counts."""
    headers = request.headers.getlist("authorization")
    if len(headers) != 1 or not headers[0]:
        return None
    header = headers[0]
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _sse(event: str, data: bytes) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


class Broker:
    """The broker's state and rules, without HTTP."""

    def __init__(
        self,
        *,
        team: Team,
        activity_ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
        tracker: ActivityStore | None = None,
        authenticators: Sequence[Authenticator] = (),
        fanout_interval: float = FANOUT_INTERVAL,
        keepalive: float = KEEPALIVE,
    ) -> None:
        self.team = team
        self.registry: Registry = registry if registry is not None else MemoryRegistry()
        self.tracker: ActivityStore = (
            tracker if tracker is not None else ActivityTracker(ttl=activity_ttl, clock=clock)
        )
        self._clock = clock
        self._wall_clock = wall_clock
        bearer: Authenticator = self.authenticate_bearer
        self._authenticators: tuple[Authenticator, ...] = (bearer, *authenticators)
        self._roles = {m.name: (m.role.to_json() if m.role else None) for m in team.members}
        self._names = tuple(m.name for m in team.members)
        self._encoded: dict[str, tuple[object, ActivityState, bytes]] = {}
        self._fanout_interval = fanout_interval
        self._keepalive = keepalive
        self.streams = 0
        # fan-out state
        self.version = 0
        self._log: deque[tuple[int, bytes]] = deque(maxlen=_LOG_SIZE)
        self._dirty: dict[str, None] = {}
        self._shown: dict[str, ActivityState] = {}
        self._pending = anyio.Event()
        self._wake = anyio.Event()
        self.closing = False

    # -- authentication ----------------------------------------------------------------

    def authenticate_bearer(self, request: Request) -> Member | None:
        """The member whose bearer token this request carries, or None. Reporting
        activity takes this alone: it is a runner's act, never a browser's."""
        token = bearer_token(request)
        return None if token is None else self.team.authenticate(token)

    @property
    def unauthorized_reason(self) -> str:
        if len(self._authenticators) > 1:
            return "missing or wrong bearer token, and no valid browser session"
        return "missing or wrong bearer token"

    def authenticate(self, request: Request) -> Member | None:
        """The member this request is authenticated as, by any authenticator, or None."""
        for authenticator in self._authenticators:
            member = authenticator(request)
            if member is not None:
                return member
        return None

    # -- the rules ---------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._wall_clock() * 1000)

    def report(self, member: Member, state: ActivityState) -> None:
        """``member`` reported ``state``: an emit (lastSeen ticks), maybe a change."""
        self.registry.touch(member.name, self._now_ms())
        if self.tracker.report(member.name, state):
            self._changed(member.name)

    def attach(self, name: str) -> None:
        """A subscriber for ``name`` opened."""
        self.streams += 1
        count = self.registry.attach(name, self._now_ms())
        logger.debug("%s subscribed (connected=%d)", name, count)
        self._changed(name)

    def detach(self, name: str) -> None:
        """A subscriber for ``name`` closed, however it closed."""
        self.streams -= 1
        count = self.registry.detach(name)
        logger.debug("%s unsubscribed (connected=%d)", name, count)
        self._changed(name)

    def presence(self, name: str) -> Presence:
        conn = self.registry.get(name)
        return presence(
            name=name,
            connected=conn.connected,
            created_at=conn.created_at,
            last_seen=conn.last_seen,
            role=self._roles[name],
            activity=self.tracker.get(name),
        )

    def roster(self) -> list[Presence]:
        """Every member's Presence, in team-file order."""
        return [self.presence(name) for name in self._names]

    def roster_json(self) -> bytes:
        """``GET /roster``'s body. Each member's encoded object is cached until their
        connection or activity changes, because with a thousand members building and
        encoding every object on every request is most of the request's cost."""
        cache = self._encoded
        get_connection = self.registry.get
        get_activity = self.tracker.get
        parts = []
        for name in self._names:  # a hit allocates nothing: fewer GC pauses in the tail
            connection = get_connection(name)
            activity = get_activity(name)
            hit = cache.get(name)
            if hit is None or hit[1] is not activity or hit[0] != connection:
                hit = (connection, activity, orjson.dumps(self.presence(name)))
                cache[name] = hit
            parts.append(hit[2])
        return b"[" + b",".join(parts) + b"]"

    def roster_event(self, you: str) -> bytes:
        head = orjson.dumps({"team": self.team.name, "you": you})[:-1]
        return _sse("roster", head + b',"members":' + self.roster_json() + b"}")

    # -- fan-out -----------------------------------------------------------------------

    def _changed(self, name: str) -> None:
        self._dirty[name] = None
        self._pending.set()

    @property
    def wake(self) -> anyio.Event:
        """Set when a new batch is published (or the broker closes); then replaced."""
        return self._wake

    def since(self, version: int, *, you: str) -> tuple[bytes, int]:
        """Everything published after ``version``, as bytes to send, and the new version.

        A subscriber too far behind for the log gets the whole roster instead.
        """
        if self._log and self._log[0][0] <= version + 1:
            chunk = b"".join(data for v, data in self._log if v > version)
        else:
            chunk = self.roster_event(you)
        return chunk, self.version

    def _find_lapses(self) -> None:
        for name, shown in list(self._shown.items()):
            if self.tracker.get(name) is not shown:
                self._dirty[name] = None

    def publish(self) -> bool:
        """Encode the pending changes once, log them, wake every subscriber."""
        self._find_lapses()
        if not self._dirty:
            return False
        parts = []
        for name in self._dirty:
            p = self.presence(name)
            activity = p.get("activity")
            if activity is None:
                self._shown.pop(name, None)
            else:
                self._shown[name] = _STATES[activity]
            parts.append(_sse("presence", orjson.dumps(p)))
        self._dirty.clear()
        self._append(b"".join(parts))
        return True

    def _append(self, chunk: bytes) -> None:
        self.version += 1
        self._log.append((self.version, chunk))
        self._wake_all()

    def _wake_all(self) -> None:
        wake, self._wake = self._wake, anyio.Event()
        wake.set()

    def recheck_streams(self) -> None:
        """Wake every stream to check that it is still authorized (a browser session
        ended); streams otherwise check at each event and keep-alive tick."""
        self._wake_all()

    async def run_fanout(self) -> None:
        """Publish changes as they come (coalesced), TTL lapses as they fall due, and the
        keep-alive tick when nothing else went out."""
        quiet_since = anyio.current_time()
        while not self.closing:
            deadline = self.tracker.next_expiry()
            lapse = math.inf if deadline is None else max(0.0, deadline - self._clock())
            tick = max(0.0, quiet_since + self._keepalive - anyio.current_time())
            with anyio.move_on_after(min(lapse, tick)):
                await self._pending.wait()
            self._pending = anyio.Event()
            if self.publish():
                quiet_since = anyio.current_time()
                # The pause bounds the writes of the fan-out: one per stream per batch. It
                # follows a batch only: a change after a quiet spell (or a keep-alive) goes
                # out at once.
                await anyio.sleep(
                    max(self._fanout_interval, self.streams / FANOUT_SENDS_PER_SECOND)
                )
            elif anyio.current_time() >= quiet_since + self._keepalive:
                self._append(b": keepalive\n\n")
                quiet_since = anyio.current_time()

    def close(self) -> None:
        """End every stream (the server is shutting down)."""
        self.closing = True
        self._pending.set()
        self._wake_all()


# -- HTTP ----------------------------------------------------------------------------------


def _json(status: int, data: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status, headers, media_type="application/json")


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> Response:
    return _json(status, {"error": reason}, headers)


_UNAUTHORIZED_HEADERS = {"www-authenticate": 'Bearer realm="codex-presence"'}


def _unauthorized(reason: str = "missing or wrong bearer token") -> Response:
    return _error(401, reason, _UNAUTHORIZED_HEADERS)


def _parse_state(body: bytes) -> ActivityState | str:
    """The reported state, or the reason the body is not exactly ``{"state": ...}``."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "body is not valid JSON"
    if not isinstance(data, dict):
        return 'body must be a JSON object {"state": ...}'
    extra = sorted(set(data) - {"state"})
    if extra:
        keys = ", ".join(map(repr, extra))
        return f'unexpected key(s) {keys}: the body is exactly {{"state": ...}}'
    if "state" not in data:
        return 'missing "state"'
    state = data["state"]
    if not isinstance(state, str) or state not in _STATES:
        return '"state" must be one of "idle", "working", "blocked"'
    return _STATES[state]


class _Subscription:
    """The SSE stream of one subscriber, as a raw ASGI response.

    Raw so that it can watch for the client's disconnect itself while it waits to send:
    uvicorn (ASGI spec 2.3) silently drops a send to a closed connection, so waiting for
    ``http.disconnect`` is the only prompt way to see a subscriber that died.
    """

    def __init__(
        self, broker: Broker, name: str, authorized: Callable[[], bool] | None = None
    ) -> None:
        self.broker = broker
        self.name = name
        self.authorized = authorized
        """None for a bearer token (valid for the broker's life); else asked before
        every send, so that a browser session that ended ends its stream too."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        broker = self.broker
        broker.attach(self.name)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_disconnect, receive, tg.cancel_scope)
                await self._stream(send)
                tg.cancel_scope.cancel()
        except* OSError:
            pass  # a send to a closed connection (ASGI 2.4 servers): the finally matters
        finally:
            broker.detach(self.name)

    async def _watch_disconnect(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

    async def _stream(self, send: Send) -> None:
        broker = self.broker
        version = broker.version
        first = b"retry: 2000\n\n" + broker.roster_event(self.name)
        await send({"type": "http.response.body", "body": first, "more_body": True})
        while not broker.closing:
            if self.authorized is not None and not self.authorized():
                break
            wake = broker.wake
            if broker.version != version:
                chunk, version = broker.since(version, you=self.name)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                continue
            await wake.wait()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _still_authenticated(broker: Broker, request: Request, name: str) -> Callable[[], bool]:
    def authorized() -> bool:
        again = broker.authenticate(request)
        return again is not None and again.name == name

    return authorized


def create_app(
    *,
    team: Team,
    activity_ttl: float = DEFAULT_TTL,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    keepalive: float = KEEPALIVE,
    fanout_interval: float = FANOUT_INTERVAL,
    max_body: int = MAX_BODY,
    max_subscribers: int = MAX_SUBSCRIBERS,
    registry: Registry | None = None,
    tracker: ActivityStore | None = None,
    authenticators: Sequence[Authenticator] = (),
    routes: Sequence[BaseRoute] = (),
    broker: Broker | None = None,
) -> Starlette:
    """The broker as an ASGI app; ``app.state.broker`` is its :class:`Broker`.

    ``clock`` (monotonic seconds) drives the TTL, ``wall_clock`` (unix seconds) the
    timestamps; inject either in tests. ``authenticators`` are tried after the bearer
    header; ``routes`` are added after the broker's own (the web roster page goes there).
    When ``broker`` is given, it is used as it is and the arguments that configure a
    :class:`Broker` (everything but ``max_body``, ``max_subscribers`` and ``routes``) are
    ignored: configure the :class:`Broker` instead.
    The fan-out task runs in the app's lifespan, so the server must run lifespan.
    """
    if broker is None:
        broker = Broker(
            team=team,
            activity_ttl=activity_ttl,
            clock=clock,
            wall_clock=wall_clock,
            registry=registry,
            tracker=tracker,
            authenticators=authenticators,
            fanout_interval=fanout_interval,
            keepalive=keepalive,
        )

    async def activity(request: Request) -> Response:
        member = broker.authenticate_bearer(request)  # a browser session cannot report
        if member is None:
            return _unauthorized()
        ctype = request.headers.get("content-type")
        if ctype is not None and ctype.partition(";")[0].strip().lower() != "application/json":
            return _error(415, "the body must be application/json")
        too_big = _error(413, f"the body is limited to {max_body} bytes", {"connection": "close"})
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body):
            return too_big if length.isdigit() else _error(400, "bad Content-Length")
        body = b""
        try:
            with anyio.fail_after(BODY_TIMEOUT):  # a body that never ends costs 10 s, no more
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > max_body:
                        return too_big
        except ClientDisconnect:
            return _error(400, "the client went away")
        except TimeoutError:
            return _error(408, f"the body took over {BODY_TIMEOUT:g} s", {"connection": "close"})
        state = _parse_state(body)
        if not isinstance(state, ActivityState):
            return _error(400, state)
        broker.report(member, state)
        return Response(status_code=204)

    async def subscribe(request: Request) -> Response | _Subscription:
        authorized: Callable[[], bool] | None = None
        member = broker.authenticate_bearer(request)
        if member is None:  # a browser session: it can end while the stream is open
            member = broker.authenticate(request)
            if member is None:
                return _unauthorized(broker.unauthorized_reason)
            authorized = _still_authenticated(broker, request, member.name)
        name = request.query_params.get("name")
        if not name:
            return _error(400, "missing ?name=<self>")
        if name != member.name:
            return _error(403, "a member may only subscribe as themselves")
        if broker.registry.get(name).connected >= max_subscribers:
            return _error(429, f"at most {max_subscribers} streams per member")
        return _Subscription(broker, name, authorized)

    async def roster(request: Request) -> Response:
        if broker.authenticate(request) is None:
            return _unauthorized(broker.unauthorized_reason)
        return Response(broker.roster_json(), media_type="application/json")

    async def whoami(request: Request) -> Response:
        member = broker.authenticate(request)
        if member is None:
            return _unauthorized(broker.unauthorized_reason)
        role = member.role.to_json() if member.role else None
        return _json(200, {"team": broker.team.name, "name": member.name, "role": role})

    async def healthz(request: Request) -> Response:
        return _json(200, {"status": "ok"})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(broker.run_fanout)
            try:
                yield
            finally:
                broker.close()
                tg.cancel_scope.cancel()

    app = Starlette(
        routes=[
            Route("/presence/activity", activity, methods=["POST"]),
            Route("/subscribe", subscribe, methods=["GET"]),
            Route("/roster", roster, methods=["GET"]),
            Route("/whoami", whoami, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            *routes,
        ],
        lifespan=lifespan,
    )
    app.state.broker = broker
    return app


class BrokerServer(uvicorn.Server):
    """uvicorn for the broker app: on shutdown, end the SSE streams first (else shutdown
    would wait for every subscriber to leave); once listening, call ``on_started``."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        broker: Broker,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        if config.http in ("auto", "httptools"):  # bound what a request head may cost
            from codex_presence.broker.http_guard import GuardedHttpToolsProtocol

            config.http = GuardedHttpToolsProtocol
        super().__init__(config)
        self.broker = broker
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.should_exit and self.on_started is not None:
            self.on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.broker.close()
        await super().shutdown(sockets)


DEAD_PEER_TIMEOUT = 3 * KEEPALIVE
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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _drop_dead_peers(sock, dead_peer_timeout)
        sock.bind((host.strip("[]"), port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock
