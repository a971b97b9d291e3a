"""The broker's link to Redis: one client, one pub/sub subscription, and the loop that
keeps them.

:class:`RedisLink` is what the shared stores (:mod:`~codex_presence.broker.redis.store` for
presence, :mod:`~codex_presence.broker.redis.sign_ins` for browser sessions) have in common:
the client (redis-py's asyncio client), the team's key names, the team's event channel, and
:meth:`RedisLink.run`, the loop that

1. connects and subscribes to the channel, and waits until Redis confirms the subscription
   (so no event published after that point can be missed);
2. asks each :class:`RedisListener` to read (and write) its state in full — on the first
   connection and after every reconnection, because events published while the link was
   down are gone for good;
3. then delivers every event on the channel to every listener, while each listener's
   background work (the broker's heartbeat) runs beside it, until the broker stops (each
   listener then takes back what is its broker's alone);

and, when anything fails, tells the listeners (reports then get 503 at once; streams say
the roster is stale), logs ``redis down: <why>`` once (and ``redis still down: <why>`` when
the cause changes: a dropped connection followed by a script that Redis refuses is logged
as the refusal, and ``/healthz`` says it to members), retries with capped, jittered backoff,
and logs ``redis back`` once when step 2 succeeded again. redis-py's own retries are off:
a silent reconnection of the subscription would lose events without anyone knowing, so
reconnecting is this loop's job alone. *Anything* that fails in steps 1-3 is such an
outage, not only what an unreachable Redis raises: a bug, or a value written by another
version that this one cannot read, is logged with its traceback (once per outage) and
retried, so that the broker never lives on with its link dead (answering 503 for ever), and
comes back by itself once the cause is gone. A listener that finds the state changed
under it without an event (the team's keys flushed) asks for the same:
:meth:`RedisLink.reconnect`.

Sentinel. Behind Sentinel (``redis+sentinel://``, :mod:`~.sentinel`), a failover is
such an outage, and the loop is what follows it: every new connection asks the sentinels
where the primary is, so the subscription is made again on the new primary (redis-py does
not re-subscribe by itself), the state is read there again in full, once, and the streams
are told ``stale`` only from the moment the old primary went away until the new one
answered. The backoff is capped at 1 s there, so that the link finds the new primary at
most a second after the sentinels promoted it. A report that comes while the link looks
for the primary, or that was on its way when the primary went away, waits for it (at most
:data:`FAILOVER_WAIT`) and runs on the new primary: the scripts may run twice. Plain Redis
has no second primary to wait for: its reports fail at once (503).

Connections. The script calls of one event-loop tick go out together, one pipeline on one
connection (:mod:`~.batch`: a report's round trip is shared, not paid alone). Each
batch takes a connection from a bounded pool (:data:`MAX_CONNECTIONS`, the subscription's
included; one an earlier batch kept, if any) and waits at most the command timeout for
one: when Redis stalls, the batches in flight queue for a connection and their reports get
503, instead of each opening a connection of its own.

What a client is told when Redis fails says which kind of failure (unreachable, or a
refusal: an error answered by Redis) and what was not done; Redis's own words, which may
name hosts and scripts, go to the log. Neither ever holds a password: :func:`redacted` is
the URL the logs show (the password of ``redis://:PASSWORD@host`` and of a ``?password=``
query alike).

Keys. Every key of a team starts with ``<prefix>:{<team>}:`` (the prefix is
``codex-presence`` unless ``--redis-prefix`` says otherwise; the team name is quoted so that
no character of it can reach outside its braces). The braces are a hash tag: a team's keys
share one Redis Cluster slot, so that the scripts that change several of them at once stay
legal there. Several teams, or several deployments with their own prefixes, can share one
Redis.

Events are JSON objects ``{"seq", "kind", ...}`` published by the stores' Lua scripts (so an
event goes out exactly when its change is made, in the same atomic step); ``seq`` orders
the changes of presence (see :mod:`~codex_presence.broker.redis.store`).

Trust. Redis is the trust boundary: anyone who can write the team's keys or publish on its
channel can show any member in any state. Events are not signed, on purpose: such a writer
can run the brokers' own scripts (or set a key, read at the next resync) as easily as
publish, and a signing secret passed to the scripts would show in ``MONITOR``. What keeps
others out is Redis's own access control: a user for the brokers alone (see the README).
"""

from __future__ import annotations

import difflib
import inspect
import logging
import re
import secrets
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import quote, unquote, urlsplit

import anyio
import orjson
import redis.asyncio as aioredis
from anyio.abc import TaskStatus
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from codex_presence.broker.redis.batch import ScriptBatch
from codex_presence.broker.redis.records import Unreadable
from codex_presence.broker.redis.replies import Replies
from codex_presence.broker.redis.sentinel import (
    SENTINEL_SCHEMES,
    parse_sentinel_url,
    sentinel_client,
)
from codex_presence.broker.store import StoreMisconfigured, StoreUnavailable
from codex_presence.core.backoff import Backoff

__all__ = [
    "DEFAULT_PREFIX",
    "MAX_CONNECTIONS",
    "REASON_MAX",
    "UNREACHABLE",
    "RedisLink",
    "RedisListener",
    "StateLost",
    "holds_secret",
    "outage_reason",
    "redacted",
]

logger = logging.getLogger("codex_presence.broker")

DEFAULT_PREFIX = "codex-presence"
TIMEOUT = 2.0
"""Seconds a Redis command (or a connection attempt, or the wait for a free connection) may
take before Redis counts as down."""
FAILOVER_WAIT = 1.0
"""Seconds a report waits, behind Sentinel, for the link to find a new primary before it
gets its 503: half the runners' own request timeout (2 s), so that the answer still
reaches them."""
MAX_CONNECTIONS = 16
"""Connections to Redis at most: the subscription, and the batches of script calls in
flight (each takes a connection for one round trip)."""

ECHOES_KEPT = 1024
"""Echoes of events applied from their replies that the link waits for at most (about a
round trip's worth of reports: those in flight)."""
_DROPPED_SAID = 1024
"""Places and reasons of dropped values said in the log at most (then only counted)."""
UNREACHABLE: tuple[type[BaseException], ...] = (RedisError, OSError)
"""What a Redis that went away, never answered, or refused (out of memory, an ACL) raises:
an outage, never a crash."""


class StateLost(Exception):
    """The shared state changed under a listener without an event saying so (the team's
    keys flushed or deleted): the link reconnects and reads it in full."""


class RedisListener(Protocol):
    """A user of the link: told of every (re)connection, every event and every outage."""

    async def resync(self) -> None:
        """The link (re)connected and is subscribed: read and write the state in full.
        Raising is an outage."""

    async def keep(self) -> None:
        """Background work while connected (returns never, or raises: an outage)."""

    def on_event(self, event: dict[str, Any]) -> None:
        """One event from the team's channel: a JSON object with a ``kind``. Raises
        :class:`~.records.Unreadable` for one holding what no broker writes."""

    def on_down(self, reason: str) -> None:
        """The link is down: the state may be stale."""

    def on_back(self) -> None:
        """Every listener resynced: the link is up again."""

    async def leave(self) -> None:
        """The broker is stopping cleanly, the link still up: take back what is this
        broker's alone."""


_SECRET_WORDS = ("pass", "secret", "token")
"""A query parameter whose name holds one of these may hold a secret: redis-py takes every
parameter of the URL's query as a connection option (``password``, ``ssl_password``)."""


def _secret_parameter(parameter: str) -> bool:
    name = unquote(parameter.partition("=")[0]).lower()
    return any(word in name for word in _SECRET_WORDS)


def holds_secret(url: str) -> bool:
    """Whether ``url`` holds a password (or another secret) that :func:`redacted` hides."""
    parts = urlsplit(url)
    return parts.password is not None or any(map(_secret_parameter, parts.query.split("&")))


def redacted(url: str) -> str:
    """``url`` without its secrets, for logs: ``***`` for the password of its netloc and
    for the value of each query parameter that may hold one."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rpartition("@")[2]
        user = f"{parts.username}:***@" if parts.username else ":***@"
        parts = parts._replace(netloc=user + netloc)
    if parts.query:
        query = "&".join(
            parameter.partition("=")[0] + "=***" if _secret_parameter(parameter) else parameter
            for parameter in parts.query.split("&")
        )
        parts = parts._replace(query=query)
    return parts.geturl()


class RedisLink:
    """One team's link to Redis at ``url`` (``redis://``, ``rediss://``, ``unix://``, or
    the sentinels of ``redis+sentinel://``: see :mod:`~.sentinel`), with at most
    ``max_connections`` connections."""

    def __init__(
        self,
        url: str,
        *,
        team: str,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        backoff: Backoff | None = None,
    ) -> None:
        self.url = redacted(url)
        options: dict[str, Any] = {"retry": Retry(NoBackoff(), 0), "client_name": "codex-presence"}
        self._sentinel: Sentinel | None = None
        if urlsplit(url).scheme in SENTINEL_SCHEMES:
            self.client, self._sentinel = sentinel_client(
                parse_sentinel_url(url),
                max_connections=max_connections,
                timeout=timeout,
                **options,
            )
        else:
            _check_database(url)
            pool = aioredis.BlockingConnectionPool.from_url(
                url,
                max_connections=max_connections,
                timeout=timeout,  # the wait for a free connection
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                **options,
            )
            _check_options(pool)
            self.client = aioredis.Redis.from_pool(pool)
        self._batch = ScriptBatch(self.client)
        self._namespace = f"{prefix}:{{{quote(team, safe='')}}}:"
        self.channel = self.key("events")
        self.broker_id = f"{socket.gethostname()}/{secrets.token_hex(4)}"
        """This broker, among those sharing the team (random per start)."""
        self._timeout = timeout
        if backoff is None:  # behind Sentinel, a new primary is found within a second
            backoff = Backoff(base=0.2, cap=1.0 if self._sentinel else 5.0)
        self._backoff = backoff
        self._next_up = anyio.Event()
        """Set by the next (re)connection: what a command that failed on a connection
        going away waits for, behind Sentinel, before it runs again on the new primary."""
        self._listeners: list[RedisListener] = []
        self.up = False
        self.reason = "not connected yet"
        """Why the link is down (while it is)."""
        self._said_down = False
        self._said_reason = ""
        self._traced = False
        self._failure: Exception | None = None
        self._connection: anyio.CancelScope | None = None
        """The scope of the connection while it is up (:meth:`reconnect` ends it)."""
        self.dropped_count = 0
        self._dropped_said: set[tuple[str, str]] = set()
        """Keys and events dropped for holding what no broker writes (:meth:`dropped`)."""
        self.refusing: str | None = None
        """Why Redis refused the latest request's script (None once one was run): while
        it refuses every report, ``/healthz`` says 503 too."""
        self._echoes: dict[bytes, int] = {}
        """Events this broker applied from its own script's reply, by their bytes, and
        their numbers: their echo on the channel is not decoded again (:meth:`expect_echo`)."""
        self._echo_heard: Callable[[int], object] | None = None

    def key(self, *parts: str) -> str:
        """The team's key named by ``parts``."""
        return self._namespace + ":".join(parts)

    def script(self, lua: str) -> AsyncScript:
        """A Lua script, run by its SHA (loaded again if Redis forgot it, after a restart)."""
        return self.client.register_script(lua)

    def add_listener(self, listener: RedisListener) -> None:
        self._listeners.append(listener)

    def on_echo(self, heard: Callable[[int], object]) -> None:
        """``heard(seq)`` is told, in the channel's order, of each echo :meth:`expect_echo`
        took out of the delivery (the store keeps the order of the numbers with it)."""
        self._echo_heard = heard

    def expect_echo(self, event: bytes, seq: int) -> None:
        """``event`` (numbered ``seq``), a script's reply, was applied already: when the
        channel brings it, it is not decoded nor given to the listeners again (every
        report's event comes twice; its echo, byte for byte the reply, is half of what a
        report cost the broker to read). At most :data:`ECHOES_KEPT` are waited for (the
        oldest forgotten: its echo is then delivered, and found applied)."""
        echoes = self._echoes
        echoes[event] = seq
        if len(echoes) > ECHOES_KEPT:
            del echoes[next(iter(echoes))]

    async def run_script(self, script: AsyncScript, args: list[Any]) -> Any:
        """Run ``script``: ``KEYS[1]`` is the team's channel (which also routes the call to
        the team's slot), ``ARGV[1]`` the team's key prefix, then ``args``; sent with the
        other calls of the same event-loop tick, in one round trip (:mod:`~.batch`).
        Raises what redis-py raises (:data:`UNREACHABLE` for an outage)."""
        return await self._batch.run(script, [self.channel], [self._namespace, *args])

    async def call(self, script: AsyncScript, args: list[Any], *, doing: str) -> Any:
        """:meth:`run_script` for a request: :class:`StoreUnavailable` (saying what was not
        done: ``doing``) when the link is down, Redis does not answer, or it answers with an
        error (which is logged)."""
        if not self.up and self._sentinel is not None:
            await self._failover(self._next_up)
        if not self.up:
            raise StoreUnavailable(f"the shared store (Redis) is unreachable: {doing}")
        came_back = self._next_up
        try:
            try:
                reply = await self.run_script(script, args)
                self.refusing = None
                return reply
            except RedisConnectionError:
                if self._sentinel is None:
                    raise
                # the primary went away under the command (a failover?): once the link
                # has found the new one, run it there (every script may run twice)
                await self._failover(came_back)
                if not self.up:
                    raise
                reply = await self.run_script(script, args)
                self.refusing = None
                return reply
        except ResponseError as exc:
            failure = "refused the command"
            why = outage_reason(exc)
            self.refusing = f"the shared store (Redis) refuses the scripts: {doing}"
        except UNREACHABLE as exc:
            failure = "is unreachable"
            why = outage_reason(exc)
        logger.warning("redis %s: %s (%s)", failure, why, doing)
        raise StoreUnavailable(f"the shared store (Redis) {failure}: {doing}")

    async def _failover(self, came_back: anyio.Event) -> None:
        """Wait, at most :data:`FAILOVER_WAIT`, for the link to (re)connect: behind
        Sentinel, to find the new primary."""
        with anyio.move_on_after(FAILOVER_WAIT):
            await came_back.wait()

    def reconnect(self, reason: str) -> None:
        """End the connection, as an outage saying ``reason``, and read everything again:
        a listener found the state changed under it in a way no event says."""
        if self._connection is not None and self._failure is None:
            self._failure = StateLost(reason)
            self._connection.cancel()

    # -- the loop ----------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the link until cancelled; ``task_status`` is told after the first attempt
        (connected and resynced, or found down)."""
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started()

        try:
            while True:
                try:
                    await self._connected(ready)
                except Exception as exc:  # any failure is an outage: retried, never fatal
                    if not started and _refused_credentials(exc):  # except a wrong password
                        raise StoreMisconfigured(
                            f"Redis at {self.url} refused the credentials ({outage_reason(exc)}): "
                            "give the right password in the --redis URL "
                            "(redis://:PASSWORD@HOST:PORT, or redis://USER:PASSWORD@HOST:PORT "
                            "for an ACL user), best through CODEX_PRESENCE_REDIS"
                        ) from None
                    self._down(exc)
                ready()
                await anyio.sleep(self._backoff.next_delay())
        finally:
            with anyio.CancelScope(shield=True):
                if self.up:
                    with anyio.move_on_after(self._timeout):
                        for listener in self._listeners:
                            await _quietly(listener.leave())
                await self.client.aclose()
                if self._sentinel is not None:
                    await self._sentinel.aclose()

    async def _connected(self, ready: Callable[[], None]) -> None:
        """One connection, from subscribing to its failure (raised)."""
        await self._batch.reset()  # after an outage: no connection to what went away
        self._echoes.clear()  # events of the connection that ended: their echoes are gone
        async with self.client.pubsub() as pubsub:
            with anyio.fail_after(self._timeout):
                await pubsub.subscribe(self.channel)
                while (await pubsub.get_message(timeout=self._timeout) or {}).get(
                    "type"
                ) != "subscribe":
                    pass
            for listener in self._listeners:
                await listener.resync()
            self._up()
            ready()
            self._failure = None
            try:
                async with anyio.create_task_group() as tg:
                    self._connection = tg.cancel_scope
                    for listener in self._listeners:
                        tg.start_soon(self._guard, listener.keep, tg.cancel_scope)
                    await self._guard(lambda: self._listen(pubsub), tg.cancel_scope)
            finally:
                self._connection = None
            if self._failure is not None:
                raise self._failure

    async def _guard(self, work: Any, scope: anyio.CancelScope) -> None:
        """Run ``work``; whatever it raises ends the connection (re-raised after the task
        group, so that the loop sees one plain exception, the first)."""
        try:
            await work()
        except Exception as exc:
            if self._failure is None:
                self._failure = exc
            scope.cancel()

    async def _listen(self, pubsub: Any) -> None:
        replies = Replies.of(pubsub.connection)
        if replies is None:  # not a connection :mod:`~.replies` reads: redis-py's way
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    self._deliver(message["data"])
        else:  # every message that one read of the socket brought, at once
            deliver = self._deliver
            while True:
                for reply in replies.ready():
                    if isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message":
                        deliver(reply[2])
                await replies.fill()
        raise RedisConnectionError("the subscription ended")

    def _deliver(self, data: bytes) -> None:
        """One message of the team's channel, to every listener (an echo of an event
        applied from its reply: its number alone, to :meth:`on_echo`'s). One that is no
        JSON object with a ``kind``, or that holds what no broker writes
        (:class:`~.records.Unreadable`), is dropped and counted, alone."""
        if self._echoes and (seq := self._echoes.pop(data, None)) is not None:
            if self._echo_heard is not None:
                self._echo_heard(seq)
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.dropped(self.channel, "an event that is not JSON")
            return
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            self.dropped(self.channel, "an event that is no JSON object with a kind")
            return
        for listener in self._listeners:
            try:
                listener.on_event(event)
            except Unreadable as exc:
                self.dropped(self.channel, str(exc))
            except Exception:  # an event of another version, or a bug: never fatal
                self.dropped(self.channel, "an event this broker could not apply")
                logger.debug("redis: could not apply the event %r", event, exc_info=True)

    def dropped(self, where: str, why: str) -> None:
        """A key or an event holding what no broker writes was dropped: counted
        (:attr:`dropped_count`), and said in the log once for each place and reason (for
        the first :data:`_DROPPED_SAID` of them: a flood of forged events fills no log)."""
        self.dropped_count += 1
        said = (where, why)
        if said not in self._dropped_said and len(self._dropped_said) < _DROPPED_SAID:
            self._dropped_said.add(said)
            logger.warning(
                "redis: dropped what no broker writes in %s: %s (%d dropped so far)",
                where,
                why,
                self.dropped_count,
            )

    def _up(self) -> None:
        self._backoff.reset()
        self._next_up.set()
        self._next_up = anyio.Event()
        self.up = True
        self.reason = ""
        self._traced = False
        if self._said_down:
            self._said_down = False
            logger.warning("redis back: %s", self.url)
        else:
            logger.info("redis: sharing state through %s (keys %s*)", self.url, self._namespace)
        for listener in self._listeners:
            listener.on_back()

    def _down(self, exc: Exception) -> None:
        self.up = False
        self.reason = reason = outage_reason(exc)
        if not isinstance(exc, (*UNREACHABLE, StateLost)) and not self._traced:
            self._traced = True  # a bug, or data it cannot read: worth its traceback, once
            logger.error("redis: failed (handled as an outage): %s", reason, exc_info=exc)
        if self._said_down:
            if reason != self._said_reason:  # the cause changed: say the real one
                self._said_reason = reason
                logger.warning("redis still down: %s: %s", self.url, reason)
                for listener in self._listeners:
                    listener.on_down(reason)
            return  # once per outage and cause
        self._said_down = True
        self._said_reason = reason
        logger.warning("redis down: %s: %s (retrying with backoff)", self.url, reason)
        for listener in self._listeners:
            listener.on_down(reason)


def _check_database(url: str) -> None:
    """Raise ValueError for a ``redis://`` or ``rediss://`` URL whose path (the database) is
    not a number: redis-py drops it without a word, so ``redis://host/l`` (for ``/1``)
    would share database 0 with whatever uses it."""
    parts = urlsplit(url)
    database = parts.path.replace("/", "")  # as redis-py reads it
    if parts.scheme in ("redis", "rediss") and database and not database.isdigit():
        raise ValueError(f"the database (the URL's path) must be a number, not {database!r}")


def _check_options(pool: aioredis.BlockingConnectionPool) -> None:
    """Raise ValueError, at start-up, for an option in the URL's query that redis-py takes
    for a connection argument it does not have (``?Password=`` for ``?password=``): it
    would fail every connection attempt, a broker started in outage for ever. No
    connection is opened."""
    try:
        pool.make_connection()  # type: ignore[no-untyped-call]
    except TypeError as exc:
        found = re.search(r"argument '([^']+)'", str(exc))
        name = found.group(1) if found else str(exc)
        known = {
            parameter
            for cls in pool.connection_class.__mro__
            if "__init__" in vars(cls)
            for parameter in inspect.signature(vars(cls)["__init__"]).parameters
            if parameter not in ("self", "args", "kwargs")
        }
        close = difflib.get_close_matches(name, known, n=1) or [
            k for k in known if k.lower() == name.lower()
        ]
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"the URL has an option Redis connections do not take: {name}{hint}"
        ) from None


_CREDENTIALS_REFUSED = (
    "NOAUTH",
    "WRONGPASS",
    "HELLO must be called with the client already authenticated",
    "invalid password",
    "invalid username-password pair",
    "called without any password configured",
)
"""How Redis (and redis-py) words a refusal of the credentials given, or of none."""


def _refused_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` says the credentials are wrong (or missing): a configuration to
    mend, not an outage to wait out (at the start; after it, a password changed under a
    running broker is retried like any outage, so it comes back once the two agree)."""
    if isinstance(exc, AuthenticationError):
        return True
    text = str(exc)
    return isinstance(exc, RedisError) and any(words in text for words in _CREDENTIALS_REFUSED)


async def _quietly(work: Awaitable[None]) -> None:
    """``work``, whose outage changes nothing (the broker is stopping)."""
    try:
        await work
    except UNREACHABLE as exc:
        logger.debug("redis: %s", outage_reason(exc))


REASON_MAX = 400
"""The most an outage's reason holds (``/healthz`` shows it, the log says it): one line,
as an exception's first, not the object dump some of redis-py's carry (~1.5 KB)."""


def outage_reason(exc: BaseException) -> str:
    """Why ``exc`` is an outage, in one short line."""
    text = str(exc).strip().partition("\n")[0].strip()
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 1] + "…"
    return text or type(exc).__name__
