"""Named sessions' activity in Redis, and the subscriptions bound to them: the
:class:`SessionActivity` that :class:`~codex_presence.broker.redis.store.RedisStore` uses.

The anonymous session (a report without a session id) stays where it always was
(``a:<name>``, :mod:`~codex_presence.broker.redis.store`); each named one has its own keys,
next to it under the team's prefix:

``s:<session>:<name>``
    That session's activity, ``"<state> <since-ms>"``, set with ``PX`` = the TTL (idle is
    the key's absence), exactly as ``a:<name>`` is; with a background count (commands the
    session left running), ``"<state> <since-ms> <count> <count-since-ms>"``, and then it
    is kept while idle too (``"idle <ms> 1 <ms>"``), under the same TTL and grace. The
    session id's alphabet has no ``:``, so the name after it is whatever follows.
``S:<name>``
    A sorted set: the member's named sessions, each by when (Redis time, ms) its key
    expires; what the snapshot reads, and what bounds a member's sessions: a report that
    would make more than ``max_sessions`` of them (``a:<name>`` included) working or
    blocked is refused (:class:`~codex_presence.broker.store.TooManySessions`).
``h:<broker>``
    A hash: the sessions (``<session>:<name>``) whose subscription is on that broker. When
    another broker prunes that one as dead (the ``g`` event, see :mod:`~.store`), every
    broker that hears it shortens those sessions to the grace (the first one does it and
    deletes the hash), so a dead broker's sessions go when its connection counts go.

Events, on the team's channel and numbered by the same ``seq`` as every other:
``[seq, "s", name, session, state, ttl_ms, since, createdAt, lastSeen, background,
backgroundSince]`` — a session's report, or its TTL shortened to the grace (its
subscription ended); an event without the last two (an older broker's) has no background.
A broker of an older version ignores the kind, and reads a session value with a background
as idle (its four words are not two).

A key of these found holding another type (written by hand, or by another program) is
garbage: the scripts that write it delete it and start anew, the snapshot skips it, so
nothing found there stops a broker (the rule of :mod:`~.scripts`, whose
``TOLERANT`` helpers and ``meta`` these scripts share).

Binding and releasing never wait (they happen in a stream's ``finally``): they are queued,
latest per session, and sent at once by :meth:`SessionActivity.keep`; after a reconnection
this broker binds all its sessions again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import orjson

from codex_presence._wire import (
    ACTIVITY_STATES,
    SESSION_GRACE,
    ActivityState,
    background_problem,
)
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.scripts import _META, TOLERANT
from codex_presence.broker.store import TooManySessions
from codex_presence.broker.tracker import ActivityTracker

__all__ = ["SessionActivity"]

logger = logging.getLogger("codex_presence.broker")

_IDLE = ActivityState.IDLE

_LUA_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
_LUA_OWN = """
local function own(key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= kind then redis.call('DEL', key) end
end
"""
# ARGV: prefix, name, session, state, ttl ms, the broker's time (ms), the bound, the
# background count.
_REPORT = (
    TOLERANT
    + _LUA_NOW
    + _LUA_OWN
    + _META
    + """
local ns, name, sid, state = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local px, at, most = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local bg = tonumber(ARGV[8]) or 0
local key = ns .. 's:' .. sid .. ':' .. name
local index = ns .. 'S:' .. name
own(key, 'string')
own(index, 'zset')
redis.call('ZREMRANGEBYSCORE', index, '-inf', now)
if (state ~= 'idle' or bg > 0) and not redis.call('ZSCORE', index, sid) then
  local held = redis.call('ZCARD', index) + redis.call('EXISTS', ns .. 'a:' .. name)
  if held >= most then return false end
end
local since, bgsince = at, 0
if bg > 0 then bgsince = at end
local previous = redis.call('GET', key)
if previous then
  local words = {}
  for word in string.gmatch(previous, '%S+') do words[#words + 1] = word end
  if words[1] == state then since = int(words[2]) or at end
  if bg > 0 and (int(words[3]) or 0) > 0 then bgsince = int(words[4]) or at end
end
if state == 'idle' and bg <= 0 then
  redis.call('DEL', key)
  redis.call('ZREM', index, sid)
else
  local value = state .. ' ' .. string.format('%d', since)
  if bg > 0 then value = value .. ' ' .. string.format('%d %d', bg, bgsince) end
  redis.call('SET', key, value, 'PX', px)
  redis.call('ZADD', index, now + px, sid)
  if redis.call('PTTL', index) < px then redis.call('PEXPIRE', index, px) end
end
local c, s = meta(ns, name, at, at)
local seq = next_seq(ns)
local event = cjson.encode({seq, 's', name, sid, state, px, since, c, s, bg, bgsince})
redis.call('PUBLISH', KEYS[1], event)
return event
"""
)
# ARGV: prefix, this broker, grace ms, then (op, a, b) triples: "b" name session (bound
# here), "r" name session (released here: shorten), "d" broker "" (dead: shorten all its
# sessions), "B" "" "" (forget every binding of this broker: the full set follows).
_BINDINGS = (
    TOLERANT
    + _LUA_NOW
    + _LUA_OWN
    + """
local ns, me, grace = ARGV[1], ARGV[2], tonumber(ARGV[3])
local mine = ns .. 'h:' .. me
own(mine, 'hash')
local function shorten(name, sid)
  local key = ns .. 's:' .. sid .. ':' .. name
  own(key, 'string')
  own(ns .. 'S:' .. name, 'zset')
  local pttl = redis.call('PTTL', key)
  if pttl > grace then
    redis.call('PEXPIRE', key, grace)
    redis.call('ZADD', ns .. 'S:' .. name, now + grace, sid)
    pttl = grace
  end
  if pttl <= 0 then return end
  local words = {}
  for word in string.gmatch(redis.call('GET', key), '%S+') do words[#words + 1] = word end
  local since = int(words[2])
  if not since then return end
  local m = {0, 0}
  if redis.call('TYPE', ns .. 'm:' .. name)['ok'] == 'hash' then
    m = redis.call('HMGET', ns .. 'm:' .. name, 'c', 's')
  end
  local seq = next_seq(ns)
  redis.call('PUBLISH', KEYS[1], cjson.encode({seq, 's', name, sid, words[1], pttl, since,
    int(m[1]) or 0, int(m[2]) or 0, int(words[3]) or 0, int(words[4]) or 0}))
end
for i = 4, #ARGV, 3 do
  local op, a, b = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if op == 'B' then
    redis.call('DEL', mine)
  elseif op == 'b' then
    redis.call('HSET', mine, b .. ':' .. a, '1')
  elseif op == 'r' then
    redis.call('HDEL', mine, b .. ':' .. a)
    shorten(a, b)
  elseif op == 'd' then
    local theirs = ns .. 'h:' .. a
    own(theirs, 'hash')
    for _, field in ipairs(redis.call('HKEYS', theirs)) do
      local colon = string.find(field, ':', 1, true)
      if colon then shorten(string.sub(field, colon + 1), string.sub(field, 1, colon - 1)) end
    end
    redis.call('DEL', theirs)
  end
end
return 1
"""
)
# ARGV: prefix, then every member's name.
_SNAPSHOT = (
    TOLERANT
    + """
local ns = ARGV[1]
local seq = int(look('GET', ns .. 'seq')) or 0
local members = {}
for i = 2, #ARGV do
  local held = {}
  local index = ns .. 'S:' .. ARGV[i]
  local sids = {}
  if redis.call('TYPE', index)['ok'] == 'zset' then
    sids = redis.call('ZRANGE', index, 0, -1)
  end
  for _, sid in ipairs(sids) do
    local key = ns .. 's:' .. sid .. ':' .. ARGV[i]
    local value = redis.call('TYPE', key)['ok'] == 'string' and redis.call('GET', key)
    if value then
      held[#held + 1] = sid
      held[#held + 1] = value
      held[#held + 1] = redis.call('PTTL', key)
    end
  end
  members[#members + 1] = held
end
return {seq, members}
"""
)


class SessionActivity:
    """The named sessions of ``names`` in Redis, mirrored into ``tracker`` (the store's),
    and this broker's bindings. ``touched(name, createdAt, lastSeen)`` merges what an event
    says of a member's times; ``changed(name)`` tells the broker to fan a member out."""

    def __init__(
        self,
        link: RedisLink,
        *,
        tracker: ActivityTracker,
        names: Sequence[str],
        ttl_ms: int,
        max_sessions: int,
        touched: Callable[[str, int, int], None],
        changed: Callable[[str], None],
    ) -> None:
        self._link = link
        self._me = link.broker_id
        self._tracker = tracker
        self._names = tuple(names)
        self._known = frozenset(names)
        self._ttl_ms = ttl_ms
        self._max = max_sessions
        self._grace_ms = round(SESSION_GRACE * 1000)
        """The grace of the latest release (the broker's): a dead broker's sessions get it."""
        self._touched = touched
        self._changed = changed
        self._synced_seq = 0
        self._seq: dict[tuple[str, str], int] = {}
        self._bound: set[tuple[str, str]] = set()
        """The sessions whose subscription is on this broker."""
        self._queued: dict[tuple[str, str], bool] = {}
        """Bindings to send: (name, session) -> bound (else released)."""
        self._dead: set[str] = set()
        """Brokers found dead whose sessions are still to shorten."""
        self._flush = anyio.Event()
        self._report_script = link.script(_REPORT)
        self._bindings_script = link.script(_BINDINGS)
        self._snapshot_script = link.script(_SNAPSHOT)
        link.add_listener(self)

    # -- what the store asks -----------------------------------------------------------

    async def report(
        self, name: str, state: ActivityState, now_ms: int, session: str, background: int = 0
    ) -> bool:
        event = await self._link.call(
            self._report_script,
            [name, session, state.value, self._ttl_ms, now_ms, self._max, background],
            doing="the report was not recorded; send it again",
        )
        if event is None:
            raise TooManySessions(self._max)
        return bool(self._apply(orjson.loads(event)))

    def bind(self, name: str, session: str) -> None:
        self._bound.add((name, session))
        self._queue((name, session), bound=True)

    def release(self, name: str, session: str, grace: float) -> None:
        self._grace_ms = max(0, round(grace * 1000))
        self._bound.discard((name, session))
        self._queue((name, session), bound=False)

    def _queue(self, key: tuple[str, str], *, bound: bool) -> None:
        self._queued.pop(key, None)  # the latest, last
        self._queued[key] = bound
        self._flush.set()

    # -- the link's listener -----------------------------------------------------------

    async def resync(self) -> None:
        """Bind every session of this broker again, send what waited, then read every
        named session."""
        self._queued = {key: False for key, bound in self._queued.items() if not bound}
        await self._send(rebind=True)
        seq, members = await self._link.run_script(self._snapshot_script, list(self._names))
        self._synced_seq = int(seq)
        self._seq.clear()
        for name, held in zip(self._names, members, strict=True):
            self._tracker.forget_sessions(name)
            for i in range(0, len(held), 3):
                session = held[i].decode(errors="replace")
                stored = _stored(held[i + 1])
                if stored is not None and held[i + 2] > 0:
                    state, since, background, background_since = stored
                    self._tracker.report(
                        name,
                        state,
                        min(held[i + 2], self._ttl_ms) / 1000,  # a key set by hand: no longer
                        since=since,
                        session=session,
                        background=background,
                        background_since=background_since,
                    )

    async def keep(self) -> None:
        """Send bindings and releases as they come."""
        while True:
            await self._flush.wait()
            self._flush = anyio.Event()
            await self._send(rebind=False)

    async def _send(self, *, rebind: bool) -> None:
        queued, self._queued = self._queued, {}
        dead, self._dead = self._dead, set()
        args: list[Any] = [self._me, self._grace_ms]
        if rebind:
            args.extend(("B", "", ""))
            for name, session in self._bound:
                args.extend(("b", name, session))
        for (name, session), bound in queued.items():
            if not (rebind and bound):
                args.extend(("b" if bound else "r", name, session))
        for broker in dead:
            args.extend(("d", broker, ""))
        if len(args) > 2:
            await self._link.run_script(self._bindings_script, args)

    def on_event(self, event: list[Any]) -> None:
        kind = event[1]
        if kind == "s":
            if event[0] > self._synced_seq:
                self._apply(event)
        elif kind == "g":
            if event[2] == self._me:  # taken for dead: shortened; bind again
                self._queue_rebind()
            elif event[0] > self._synced_seq:
                self._dead.add(event[2])
                self._flush.set()

    def _queue_rebind(self) -> None:
        for key in self._bound:
            self._queued[key] = True
        self._flush.set()

    def on_down(self, reason: str) -> None:
        """The store says it."""

    def on_back(self) -> None:
        """The store says it."""

    async def leave(self) -> None:
        """Streams end before the link: their releases went out with :meth:`keep`."""

    # -- the mirror --------------------------------------------------------------------

    def _apply(self, event: list[Any]) -> bool | None:
        """Apply an ``s`` event (ours or another broker's) unless a later one for that
        session was applied; whether the member's activity shown changed (None: nothing
        applied). A shortened TTL wakes the fan-out too, for it to see the lapse."""
        seq, _, name, session, word, ttl_ms, since, created, seen, *more = event
        if name not in self._known:
            return None
        self._touched(name, created, seen)
        key = (name, session)
        if seq <= self._seq.get(key, 0):
            return None
        self._seq[key] = seq
        state = ACTIVITY_STATES.get(word, _IDLE)
        background, background_since = _background(more)
        changed = self._tracker.report(
            name,
            state,
            min(ttl_ms, self._ttl_ms) / 1000,  # a forged event outlives no TTL of ours
            since=int(since),
            session=session,
            background=background,
            background_since=background_since,
            grace=ttl_ms < self._ttl_ms,  # a report holds the TTL; a release, its grace
        )
        if changed or ttl_ms < self._ttl_ms:
            self._changed(name)
        return changed


def _background(more: list[Any]) -> tuple[int, int | None]:
    """An event's background count and its since (0, None: none, or unreadable)."""
    if (
        len(more) >= 2
        and background_problem(more[0]) is None
        and more[0] > 0
        and isinstance(more[1], int)
        and not isinstance(more[1], bool)
        and more[1] >= 0
    ):
        return more[0], more[1]
    return 0, None


def _stored(value: bytes) -> tuple[ActivityState, int, int, int | None] | None:
    """A session's value, ``"<state> <since-ms>[ <count> <count-since-ms>]"``, as (state,
    since, count, count since); None for one this version cannot read (it counts as idle)."""
    words = value.split()
    state = ACTIVITY_STATES.get(words[0].decode(errors="replace")) if words else None
    if state is None or len(words) not in (2, 4) or not words[1].isdigit():
        return None
    count, count_since = 0, None
    if len(words) == 4 and words[2].isdigit() and words[3].isdigit():
        count, count_since = int(words[2]), int(words[3])
        if background_problem(count) is not None:
            count, count_since = 0, None
    if state is _IDLE and count == 0:
        return None
    return state, int(words[1]), count, count_since
