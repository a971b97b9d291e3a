"""Browser sessions in the Redis that brokers share: :class:`RedisSignIns`.

``s:<session id>`` holds the :class:`~codex_presence.broker.sign_ins.SignIn` record as
JSON, with ``PX`` = the session's lifetime (Redis's expiry times it out); ``sm:<member>`` is a
sorted set of the member's session ids by expiry (in microseconds of Redis's clock, so that
two sign-ins in one millisecond still have an order), for the per-member cap. Signing in and
signing out are Lua scripts (the record and the set change together), and each session
that ends — signed out, or pushed out by the cap — is announced on the team's channel as
``{"seq": 0, "kind": "x", "id": session_id}``, so that every broker ends the streams it
opened at once.

A broker restart signs nobody out: the sessions are in Redis. Checking a cookie reads
Redis once; the answer is then cached here until the session's expiry, an ``x`` event, or a
reconnection of the link (events may have been missed meanwhile) — so that an open stream,
which checks its session before every send, costs no round trip, and stays open while Redis
is away. A cookie this broker has not seen cannot be checked while Redis is away: 503. A
record or a set of the wrong type, or a record this version cannot read, costs that session
(read as signed out) or that member's cap, never a sign-in of anyone else (see
:mod:`~codex_presence.broker.redis.scripts`).

The cache is bounded: sessions that expire unseen (Redis drops them without an event) leave
it as new ones come in, and past :data:`MAX_CACHED` entries the oldest go (a session that
leaves it early costs one more round trip, nothing else).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio
import orjson

from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.scripts import TOLERANT
from codex_presence.broker.sign_ins import (
    MAX_SIGN_INS,
    SIGN_IN_TTL,
    SignIn,
    new_sign_in_id,
)

__all__ = ["MAX_CACHED", "RedisSignIns"]

logger = logging.getLogger("codex_presence.broker")

MAX_CACHED = 10_000
"""Sessions cached per broker at most."""

_CREATE = (
    TOLERANT
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ns, id, member, record = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ttl, max = tonumber(ARGV[5]), tonumber(ARGV[6])
local mine = ns .. 'sm:' .. member
on('ZREMRANGEBYSCORE', mine, '-inf', now)
local over = redis.call('ZCARD', mine) - max + 1
local ended = {}
if over > 0 then
  ended = redis.call('ZRANGE', mine, 0, over - 1)
  for _, old in ipairs(ended) do
    redis.call('DEL', ns .. 's:' .. old)
    redis.call('PUBLISH', KEYS[1], cjson.encode({seq = 0, kind = 'x', id = old}))
  end
  redis.call('ZREMRANGEBYRANK', mine, 0, over - 1)
end
redis.call('SET', ns .. 's:' .. id, record, 'PX', ttl)
redis.call('ZADD', mine, now + ttl * 1000, id)
redis.call('PEXPIRE', mine, ttl)
return ended
"""
)
_END = (
    TOLERANT
    + """
local ns, id = ARGV[1], ARGV[2]
local key = ns .. 's:' .. id
local record = on('GET', key)
if not record then return 0 end
redis.call('DEL', key)
local ok, data = pcall(cjson.decode, record)
if ok and type(data) == 'table' and type(data['member']) == 'string' then
  on('ZREM', ns .. 'sm:' .. data['member'], id)
end
redis.call('PUBLISH', KEYS[1], cjson.encode({seq = 0, kind = 'x', id = id}))
return 1
"""
)
_GET = (
    TOLERANT
    + """
local key = ARGV[1] .. 's:' .. ARGV[2]
local record = look('GET', key)
if not record then return false end
return {record, redis.call('PTTL', key)}
"""
)
_FIELDS = frozenset(field.name for field in dataclasses.fields(SignIn))


class RedisSignIns:
    """The browser sessions of a team, in Redis through ``link``; ``clock`` (monotonic
    seconds) times out the local cache, which holds at most ``max_cached`` of them."""

    def __init__(
        self,
        link: RedisLink,
        *,
        ttl: float = SIGN_IN_TTL,
        max_sign_ins: int = MAX_SIGN_INS,
        max_cached: int = MAX_CACHED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_sign_ins = max_sign_ins
        self.on_ended: Callable[[], None] | None = None
        self._link = link
        self._clock = clock
        self._max_cached = max_cached
        self._cache: OrderedDict[str, tuple[SignIn, float]] = OrderedDict()
        """Session id -> (session, expiry), oldest entry first."""
        self._create = link.script(_CREATE)
        self._end = link.script(_END)
        self._get = link.script(_GET)
        link.add_listener(self)

    async def create(self, session: SignIn) -> str:
        session_id = new_sign_in_id()
        record = orjson.dumps(dataclasses.asdict(session))
        ttl_ms = max(1, round(self.ttl * 1000))
        args = [session_id, session.member, record, ttl_ms, self.max_sign_ins]
        ended = await self._link.call(self._create, args, doing="cannot sign in; try again")
        for old in ended:  # pushed out by the cap (every broker hears it from the channel)
            self._forget(old.decode())
        self._remember(session_id, session, self.ttl)
        return session_id

    async def end(self, session_id: str) -> None:
        await self._link.call(self._end, [session_id], doing="cannot sign out; try again")
        self._forget(session_id)

    async def get(self, session_id: str) -> SignIn | None:
        hit = self._cache.get(session_id)
        if hit is not None:
            if hit[1] > self._clock():
                return hit[0]
            del self._cache[session_id]
        found = await self._link.call(
            self._get, [session_id], doing="cannot check the browser session"
        )
        if not found:
            return None
        record, pttl = found
        session = _session(record)
        if session is None:
            logger.warning(
                "redis: %s holds a browser session this broker cannot read (written by "
                "hand, or by another version?): read as signed out",
                self._link.key("s", "<id>"),
            )
            return None
        self._remember(session_id, session, int(pttl) / 1000)
        return session

    def _remember(self, session_id: str, session: SignIn, ttl: float) -> None:
        """Cache ``session`` for ``ttl`` s, first dropping the oldest entries while they
        have expired or the cache is full (each entry leaves once: O(1) amortized)."""
        cache = self._cache
        now = self._clock()
        while cache:
            _, expires = cache[next(iter(cache))]
            if expires > now and len(cache) < self._max_cached:
                break
            cache.popitem(last=False)
        cache[session_id] = (session, now + ttl)

    def _forget(self, session_id: str) -> None:
        self._cache.pop(session_id, None)
        if self.on_ended is not None:
            self.on_ended()

    # -- the link ----------------------------------------------------------------------

    async def resync(self) -> None:
        self._cache.clear()  # an ``x`` event may have been missed while the link was down

    async def keep(self) -> None:
        await anyio.sleep_forever()

    def on_event(self, event: dict[str, Any]) -> None:
        if event["kind"] == "x" and isinstance(event.get("id"), str):
            self._forget(event["id"])

    def on_down(self, reason: str) -> None:
        pass

    def on_back(self) -> None:
        pass

    async def leave(self) -> None:
        pass  # sessions outlive the broker: that is the point


def _session(record: bytes) -> SignIn | None:
    """A stored session record, or None for one this version cannot read."""
    try:
        data = orjson.loads(record)
        session = SignIn(**{k: v for k, v in data.items() if k in _FIELDS})
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return None
    if not isinstance(session.member, str) or not isinstance(session.key, str):
        return None
    return session
