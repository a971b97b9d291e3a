"""The broker over HTTP: a small Starlette app in front of a :class:`~.state.Broker`.

:func:`create_app` takes the broker, the :class:`~codex_presence.broker.limits.BrokerLimits`
and any extra routes (the web roster's), and nothing else: everything about the rules is
the :class:`~.state.Broker`'s to configure. The handlers are the methods of one small
class, :class:`_Endpoints`; every request body is read by the one bounded reader
(:func:`~codex_presence.broker.http.read_body`). The fan-out task runs in the app's
lifespan, so the server must run lifespan.

Endpoints
---------
``POST /presence/activity``
    Bearer auth. Body exactly ``{"state": "idle" | "working" | "blocked"}``, optionally
    with ``"session": ID`` and, with it, ``"background": N``, and an ``"agent"`` object
    (AGENT-RECORD: the client, version, host, project and what a blocked session waits
    on, validated and bounded by :func:`~codex_presence._wire.agent_problem`, stored whole
    with the session's record; absent: the stored one stays; ``null`` clears it) (JSON,
    each key once; a content type, if given, must be
    ``application/json``). Keyed on the authenticated member: nothing in the body can name
    anyone else. ``session`` says which of the member's sessions the report is about (1 to
    64 characters of ``A-Z a-z 0-9 _ -``; without it, the single anonymous session): each
    is held apart, and the member shows the strongest. 204 on success; 401 without or with
    a wrong token; 415 for another content type; 413 past ``max_body`` bytes (enforced
    while reading, so a huge body is never buffered); 408 for a body still arriving after
    ``body_timeout`` s (both :class:`~codex_presence.broker.limits.BrokerLimits`); 429 for
    a report that would make more than 16 sessions of the member working or blocked at
    once (:data:`~codex_presence._wire.MAX_SESSIONS`); 400 ``{"error": reason}`` for
    anything else; 503 ``{"error": reason}`` when the broker shares its state
    (``--redis``) and cannot reach it: the report was not recorded.
``GET /subscribe?name=<self>[&session=ID][&quiet=1 | &light=1]``
    Bearer auth; the token must be ``<self>``'s (403 otherwise, 400 without ``name`` or
    with a bad ``session``, 429 past ``max_subscribers`` streams for one member on this
    broker). An SSE stream held open; while it is
    open the member's ``connected`` counts it. It is uncounted on every kind of close: a
    clean disconnect, a broken pipe, the subscriber's death (the kernel closes the socket
    and the server sees EOF), or the broker shutting down. With ``session``, the stream is
    bound to that session: when the last stream bound to it ends, a working or blocked
    state of the session lapses after the broker's session grace (3 s by default), unless
    it is reported again (a runner that reconnects re-sends it).
``GET /roster``
    Bearer auth. A JSON array of the design's Presence objects, one per team member in
    team-file order, connected or not. ``createdAt`` and ``lastSeen`` are unix epoch
    milliseconds, 0 for a member the broker has never seen; ``lastSeen`` ticks on every
    subscribe and every activity report. Two fields are ours, additive like ``activity``
    (a client that does not know them ignores them), with ``activity`` only:
    ``activitySince``, the unix epoch milliseconds since which the member has been working
    or blocked (a heartbeat does not move it; a change of state, a lapse of the TTL
    included, does), and ``sessions``, how many of the member's sessions are working and
    blocked (``{"working": 2, "blocked": 1}``, a count of 0 left out), only while two or
    more are (see :func:`~codex_presence._wire.presence`). And ``agents``: one object per
    session (``session``, ``state``, ``since``, ``background`` and its ``agent`` spread in),
    blocked first, while one is working or blocked or reported an ``agent``.
``GET /notify``
    Auth as ``GET /roster``; admins (``members.manage``) only (403 otherwise): the
    notification targets, each one's label (never its URL), rule and counts.
``GET /whoami``
    Bearer auth. ``{"team": name, "name": member, "role": Role | null, "activityTtlMs":
    int}`` — what a client needs to print ``team <name> roster:`` and the ``(you)`` marker,
    and how long (milliseconds) a working/blocked report holds here without a heartbeat:
    a runner heartbeats at a third of it.
``GET /healthz``
    No auth. ``{"status": "ok", "startedAt": ms}`` (when this broker process started, unix
    ms); with a shared store, ``{"status": "ok", "store": "redis", "startedAt": ms}``, or 503
    ``{"status": "unavailable", "store": "redis", "startedAt": ms}`` while the broker cannot
    reach it. Why is logged, and said here (``"reason": str``) only to a request with a
    member's bearer token: Redis's own words are not for anyone who asks.

Any request that needs the shared store when it is unreachable (a browser sign-in to
check) gets 503 ``{"error": reason}``, a reason that says what was not done, not Redis's
words (those are logged).

The SSE stream (for the web roster and ``roster --watch``)
----------------------------------------------------------
The stream opens with ``retry: 2000`` (EventSource reconnects after 2 s). Every event's
``data`` is one line of JSON.

``event: roster``
    First on every stream, and again whenever a slow subscriber has fallen too far behind
    to be sent the individual changes: ``{"team": str, "you": str, "members": [Presence,
    ...], "privileges": {name: "admin" | "operator" | null}}`` — the whole roster, as
    ``GET /roster`` returns it, and each member's privilege bucket. Replace everything.
``event: presence``
    ``Presence`` — one member's full, current object (``activitySince`` included), sent
    when their ``connected`` or their activity changed. Replace that member's row (matched
    by ``name``). Missing ``activity`` means idle, as everywhere.
``event: stale``
    ``{"stale": true, "reason": str}`` — the broker lost its shared store (``--redis``):
    the stream stays open, but what it shows may be out of date until the next ``roster``
    event, which comes when the store is back (and always means the roster is current).
``: keepalive``
    A comment line every ``keepalive`` seconds (each stream in its turn: the broker wakes
    its streams a lane at a time, not all at once).

``GET /subscribe?name=<self>&quiet=1`` is a quiet stream: ``retry: 2000`` and then the
keep-alives alone, no ``roster``, ``presence`` or ``stale`` event. It counts in
``connected`` (and binds its ``session``) as any stream does: a runner, which holds its
stream to be on the wire and reads nothing from it, asks for it, so that opening ten
thousand of them costs no roster each and a change is not written to each of them.

``GET /subscribe?name=<self>&light=1`` is a light stream (the web roster's and ``roster
--watch``'s): the same events, but never the whole roster. Where the full stream sends a
``roster`` event (first, after a stale spell, after a team change, to a subscriber too far
behind), it sends

``event: changed``
    ``{"version": int, "team": str, "you": str, "privileges": {...}}``: read the members
    with ``GET /roster``, sending back the ``ETag`` of the roster last read
    (``If-None-Match``: 304 and no body while it is the same; gzip'd when
    ``Accept-Encoding`` asks), then apply the ``presence`` events that follow, as after a
    ``roster`` event. No stream nor its buffers hold a roster (1.3 MB at 10,000 members),
    and a reconnect that finds the roster as it was costs a 304.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

import anyio
import orjson
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from codex_presence._wire import (
    ACTIVITY_PATH,
    ACTIVITY_STATES,
    ADMIN_PERMISSION,
    HEALTHZ_PATH,
    NOTIFY_PATH,
    ROSTER_PATH,
    SUBSCRIBE_PATH,
    WHOAMI_PATH,
    ActivityState,
    Refused,
    agent_problem,
    background_problem,
    printable,
    session_id_problem,
)
from codex_presence.broker.auth import Authentication, Authenticator
from codex_presence.broker.hosts import HostCheck
from codex_presence.broker.http import Revalidated, error, json_response, read_body
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.record import ANONYMOUS, KEEP, Report
from codex_presence.broker.state import Broker
from codex_presence.broker.store import StoreUnavailable, TooManySessions

__all__ = ["create_app"]

_EXACT = {
    form % state.value.encode(): Report(state)
    for state in ActivityState
    for form in (b'{"state":"%s"}', b'{"state": "%s"}')
}
"""The bodies reporters send (compact, or with json.dumps's spaces): known at a glance."""
_REPORT_KEYS = frozenset({"state", "session", "background", "agent"})
logger = logging.getLogger("codex_presence.broker")

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_KEEPALIVE = b": keepalive\n\n"
_UNAUTHORIZED_HEADERS = {"www-authenticate": 'Bearer realm="codex-presence"'}
_HANDED = "codex_presence.stream"
"""The scope's key for the list a stream is handed over in (see :class:`_BrokerApp`)."""


def _unauthorized(reason: str = "missing or wrong bearer token") -> Response:
    return error(401, reason, _UNAUTHORIZED_HEADERS)


def _parse_report(body: bytes) -> Report | str:
    """The :class:`~.record.Report` a body says, or the reason it is not exactly
    ``{"state": ...}`` with an optional ``"session"``, with a session an optional
    ``"background"``, and an optional ``"agent"`` object (AGENT-RECORD)."""
    exact = _EXACT.get(body)
    if exact is not None:
        return exact
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "body is not valid JSON"
    if not isinstance(data, dict):
        return 'body must be a JSON object {"state": ...}'
    extra = sorted(set(data) - _REPORT_KEYS)
    if extra:
        keys = ", ".join(map(repr, extra))
        return (
            f"unexpected key(s) {keys}: the body is exactly "
            '{"state": ...[, "session": ...[, "background": N]][, "agent": {...}]}'
        )
    if "state" not in data:
        return 'missing "state"'
    state = data["state"]
    if not isinstance(state, str) or state not in ACTIVITY_STATES:
        return '"state" must be one of "idle", "working", "blocked"'
    session = data.get("session", ANONYMOUS)
    if "session" in data:
        problem = session_id_problem(session)
        if problem is not None:
            return problem
    background = data.get("background", 0)
    if "background" in data:
        if "session" not in data:
            return '"background" needs a "session": it is counted per session'
        problem = background_problem(background)
        if problem is not None:
            return problem
    agent = data.get("agent", KEEP)
    if "agent" in data:
        problem = agent_problem(agent)
        if problem is not None:
            return problem
    return _repeated_key(body) or Report(ACTIVITY_STATES[state], session, background, agent)


def _repeated_key(body: bytes) -> str | None:
    """Why ``body`` (valid JSON) is refused for holding a key twice in an object, or None.

    orjson keeps the last of repeated keys without a word, so ``{"state": "idle", "state":
    "blocked"}`` would read as blocked while a reader that keeps the first sees idle. The
    standard library's parser shows every pair; the body is at most ``max_body`` bytes and
    every reporter's own body takes the lookup in :data:`_EXACT` instead."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                repeated.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except RecursionError:  # a repeated key's value nested deeper than this parser goes
        return "body is nested too deeply"
    if repeated:
        return f"key {repeated[0]!r} is repeated: each key may appear once"
    return None


class _Subscription:
    """The SSE stream of one subscriber, as a raw ASGI response.

    Raw so that it can watch for the client's disconnect itself while it waits to send:
    uvicorn (ASGI spec 2.3) silently drops a send to a closed connection, so waiting for
    ``http.disconnect`` is the only prompt way to see a subscriber that died.

    Held open for hours by every runner (10,000 of them on one broker), so it is built to
    weigh little while it waits: called by the app's router, it hands itself to the app
    (:class:`_BrokerApp`), which runs it once Starlette's stack of coroutines has returned;
    and it runs in the server's task, with one small task more that waits for the
    disconnect, not a task group (see :meth:`run`).
    """

    def __init__(
        self,
        broker: Broker,
        name: str,
        authorized: Callable[[], Awaitable[bool]] | None = None,
        session: str | None = None,
        *,
        still_member: Callable[[], Awaitable[bool]] | None = None,
        quiet: bool = False,
        light: bool = False,
    ) -> None:
        self.broker = broker
        self.name = name
        self.session = session
        """The session this stream is bound to, if it named one."""
        self.quiet = quiet
        """Keep-alives only (``?quiet=1``): no roster, no changes."""
        self.light = light
        """A ``changed`` event where a ``roster`` would come (``?light=1``): the client
        reads ``GET /roster``."""
        self.authorized = authorized
        """None for a bearer token (valid while the team stays); else asked before
        every send, so that a browser sign-in that ended ends its stream too."""
        self.still_member = still_member or authorized
        """Asked when the broker's team changed (its file was read again): a member
        removed, or whose token was rotated, loses the stream."""
        self._team = broker.team

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handed = scope.get(_HANDED)
        if handed is not None:  # the app runs it once the router's coroutines are done
            handed.append(self)
            return
        await self.run(scope, receive, send)

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The stream, until the client goes, the broker closes or the member's right to
        it ends.

        The client's going is seen by a task that waits for ``http.disconnect`` and then
        cancels this one (the server's own): a task group would do the same at ~4 kB more
        per stream (its cancel scope, its event, its task's state), which 10,000 runners'
        streams pay for as long as they are open."""
        broker = self.broker
        this = asyncio.current_task()
        assert this is not None
        gone = ended = False

        def on_disconnect(watch: asyncio.Future[None]) -> None:
            nonlocal gone
            if ended or watch.cancelled():
                return  # (a callback already scheduled when the stream ended by itself)
            failed = watch.exception()
            if failed is not None and not isinstance(failed, OSError):
                logger.warning("a stream's receive failed: it ends", exc_info=failed)
            gone = True
            this.cancel()

        watch = asyncio.ensure_future(_disconnect(receive))
        watch.add_done_callback(on_disconnect)
        broker.attach(self.name, self.session, quiet=self.quiet)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await self._stream(send, watch)
        except OSError:
            pass  # a send to a closed connection (ASGI 2.4 servers): the finally matters
        except asyncio.CancelledError:
            if not gone:
                raise
            this.uncancel()  # ours: the client went, and this task ends as it would have
        finally:
            ended = True
            watch.remove_done_callback(on_disconnect)
            watch.cancel()
            broker.detach(self.name, self.session, quiet=self.quiet)

    async def _stream(self, send: Send, watch: asyncio.Future[None]) -> None:
        """Send until the broker closes, the member's right ends or ``watch`` (the
        disconnect's) is done: a cancel is delivered once, and an await that swallowed it
        must not leave the stream sending keep-alives into a closed connection for good."""
        broker = self.broker
        quiet = self.quiet
        lane = broker.take_lane()
        version = broker.version
        first = b"retry: 2000\n\n"
        if self.light:
            first = broker.changed_event(self.name, before=first)
        elif not quiet:
            first = broker.roster_event(self.name, before=first)
        message = {"type": "http.response.body", "body": first, "more_body": True}
        del first  # the stream's frame lives as long as the stream: the roster must not
        await send(message)  # (1.4 MB at 10,000 members, a page stream each, kept for good)
        del message
        while not broker.closing:
            if self.authorized is not None and not await self._still_authorized():
                break
            if self._team is not broker.team:
                self._team = broker.team
                if self.still_member is not None and not await self._still_authorized(
                    self.still_member
                ):
                    break
            wake = broker.waiter(lane, quiet=quiet)
            if not quiet and broker.version != version:
                chunk, version = broker.since(version, you=self.name, light=self.light)
                message = {"type": "http.response.body", "body": chunk, "more_body": True}
                del chunk  # (a catch-up is this stream's own copy: not kept while it waits)
                await send(message)
                del message
                continue
            if watch.done():
                break  # the client went, and an await above swallowed its cancel
            await wake.wait()
            if (quiet or broker.version == version) and not broker.closing:
                await send({"type": "http.response.body", "body": _KEEPALIVE, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _still_authorized(self, check: Callable[[], Awaitable[bool]] | None = None) -> bool:
        check = check or self.authorized
        assert check is not None
        try:
            return await check()
        except StoreUnavailable:
            return True  # cannot tell while the store is away: the stream stays open


async def _disconnect(receive: Receive) -> None:
    """Until the client is gone (the request's own messages, a GET's empty body, read
    and dropped)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _still_authenticated(
    auth: Authentication, request: Request, name: str
) -> Callable[[], Awaitable[bool]]:
    scope = request.scope  # not the request: a stream keeps this for hours, not its parsings

    async def authorized() -> bool:
        again = await auth.member(Request(scope))
        return again is not None and again.name == name

    return authorized


class _BrokerApp(Starlette):
    """The broker's Starlette app, which runs an SSE stream itself.

    The router answers ``GET /subscribe`` (the checks, the errors, the exception handlers
    as for every route), and a stream it accepts is handed back here to run, after the
    middleware, the router and the endpoint's coroutines have returned: held for as long
    as the stream is open, they were ~7 kB of its ~26 kB (tracemalloc, 2,000 quiet
    streams). So a stream runs outside the middleware and the exception handlers: what
    they do for ``/subscribe`` (the host check, the errors) is done before it is handed
    over, and a middleware that wraps ``send`` would not see the stream's events."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SUBSCRIBE_PATH:
            await super().__call__(scope, receive, send)
            return
        handed: list[_Subscription] = []
        scope[_HANDED] = handed
        await super().__call__(scope, receive, send)
        del scope[_HANDED]
        if handed:
            await handed.pop().run(scope, receive, send)


@runtime_checkable
class Described(Protocol):
    """What ``GET /notify`` shows of the notifier: each target's label, rule and counts."""

    def describe(self) -> list[dict[str, Any]]: ...


class _Endpoints:
    """The broker's own routes, each a method, for one broker, its limits, who a request
    is (``auth``) and the notifier ``GET /notify`` describes (None: none configured)."""

    def __init__(
        self,
        broker: Broker,
        limits: BrokerLimits,
        auth: Authentication,
        notifier: Described | None,
    ) -> None:
        self._roster = Revalidated()  # GET /roster's ETag and gzip, kept until it changes
        self.broker = broker
        self.limits = limits
        self.auth = auth
        self.notifier = notifier

    def routes(self) -> list[BaseRoute]:
        return [
            Route(ACTIVITY_PATH, self.activity, methods=["POST"]),
            Route(SUBSCRIBE_PATH, self.subscribe, methods=["GET"]),
            Route(ROSTER_PATH, self.roster, methods=["GET"]),
            Route(WHOAMI_PATH, self.whoami, methods=["GET"]),
            Route(HEALTHZ_PATH, self.healthz, methods=["GET"]),
            Route(NOTIFY_PATH, self.notify, methods=["GET"]),
        ]

    async def activity(self, request: Request) -> Response:
        broker = self.broker
        member = self.auth.bearer(request)  # a browser sign-in cannot report
        if member is None:
            return _unauthorized()
        ctype = request.headers.get("content-type")
        if ctype is not None and ctype.partition(";")[0].strip().lower() != "application/json":
            return error(415, "the body must be application/json")
        limits = self.limits
        try:
            body = await read_body(request, limit=limits.max_body, within=limits.body_timeout)
        except Refused as exc:
            return error(exc.status, exc.reason, exc.headers)
        report = _parse_report(body)
        if isinstance(report, str):
            return error(400, report)
        try:  # StoreUnavailable: 503 (the app's handler)
            await broker.report(member, report)
        except TooManySessions as exc:
            return error(429, str(exc))
        return Response(status_code=204)

    async def subscribe(self, request: Request) -> Response | _Subscription:
        broker = self.broker
        authorized: Callable[[], Awaitable[bool]] | None = None
        member = self.auth.bearer(request)
        if member is None:  # a browser sign-in: it can end while the stream is open
            member = await self.auth.member(request)
            if member is None:
                return _unauthorized(self.auth.unauthorized_reason)
            authorized = _still_authenticated(self.auth, request, member.name)
        name = request.query_params.get("name")
        if not name:
            return error(400, "missing ?name=<self>")
        if name != member.name:
            return error(
                403,
                f"the token is {printable(member.name)}'s, not {printable(name)}'s: "
                "a member may only subscribe as themselves",
            )
        sessions = request.query_params.getlist("session")
        if len(sessions) > 1:
            return error(400, "?session= is given more than once")
        session = sessions[0] if sessions else None
        problem = None if session is None else session_id_problem(session)
        if problem is not None:
            return error(400, f"?session=: {problem}")
        quiet = request.query_params.getlist("quiet")
        if quiet not in ([], ["1"]):
            return error(400, "?quiet= is 1 (keep-alives only), once, or absent")
        light = request.query_params.getlist("light")
        if light not in ([], ["1"]) or (light and quiet):
            return error(400, "?light= is 1 (no roster on the stream), once, or absent")
        cap = self.limits.max_subscribers
        if broker.store.subscribers_here(name) >= cap:
            return error(429, f"at most {cap} streams per member")
        still_member = _still_authenticated(self.auth, request, name)
        return _Subscription(
            broker,
            name,
            authorized,
            session,
            still_member=still_member,
            quiet=bool(quiet),
            light=bool(light),
        )

    async def roster(self, request: Request) -> Response:
        if await self.auth.member(request) is None:
            return _unauthorized(self.auth.unauthorized_reason)
        return self._roster.response(request, self.broker.roster_json())

    async def whoami(self, request: Request) -> Response:
        broker = self.broker
        member = await self.auth.member(request)
        if member is None:
            return _unauthorized(self.auth.unauthorized_reason)
        role = member.role.to_json() if member.role else None
        ttl_ms = round(broker.activity_ttl * 1000)
        answer = {"team": broker.team.name, "name": member.name, "role": role}
        return json_response(200, {**answer, "activityTtlMs": ttl_ms})

    async def healthz(self, request: Request) -> Response:
        broker = self.broker
        started = {"startedAt": broker.started_at}
        if not broker.store.shared:
            return json_response(200, {"status": "ok", **started})
        trouble = broker.stale or broker.store.refusing  # reports would get 503: so does this
        if trouble is None:
            return json_response(200, {"status": "ok", "store": "redis", **started})
        body: dict[str, object] = {"status": "unavailable", "store": "redis", **started}
        if self.auth.bearer(request) is not None:
            body["reason"] = trouble
        return json_response(503, body)

    async def notify(self, request: Request) -> Response:
        """``GET /notify``: the targets, for admins (``members.manage``) only: each one's
        label (never its URL), rule and counts; ``[]`` when none is configured. 401 without
        a member, 403 for a member who is not an admin."""
        member = await self.auth.member(request)
        if member is None:
            return _unauthorized(self.auth.unauthorized_reason)
        if member.role is None or ADMIN_PERMISSION not in member.role.permissions:
            return error(403, "the notification targets are shown to admins only")
        described = [] if self.notifier is None else self.notifier.describe()
        return json_response(200, {"targets": described})


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    return error(503, str(exc), {"retry-after": "1"})


def create_app(
    broker: Broker,
    *,
    limits: BrokerLimits | None = None,
    routes: Sequence[BaseRoute] = (),
    allowed_hosts: frozenset[str] | None = None,
    authenticators: Sequence[Authenticator] = (),
    notifier: Described | None = None,
) -> Starlette:
    """The broker as an ASGI app, bounded by ``limits``; ``routes`` are added after the
    broker's own (the web roster page goes there). ``allowed_hosts`` (see
    :func:`~codex_presence.broker.hosts.allowed_hosts`; None: any) are the hosts a
    request's ``Host`` may name (421 otherwise). A request is its bearer token's member,
    or else one of ``authenticators``' (the web roster's sign-in); ``notifier`` is what
    ``GET /notify`` describes."""
    auth = Authentication(lambda: broker.team, authenticators)
    limits = limits if limits is not None else BrokerLimits()
    endpoints = _Endpoints(broker, limits, auth, notifier)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            await tg.start(broker.run)
            try:
                yield
            finally:
                broker.close()
                tg.cancel_scope.cancel()

    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(HostCheck, allowed=allowed_hosts))
    app = _BrokerApp(
        routes=[*endpoints.routes(), *routes],
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={StoreUnavailable: _store_unavailable},
    )
    app.state.auth = auth  # who a request is, for the routes added (``request.app``)
    return app
