"""Each member's timeline shared by every broker of the team: one Redis stream per team.

What lives in Redis (keys under the team's prefix, see :mod:`~.link`):

``history``
    A stream: one entry per transition of a member's shown state (see
    :mod:`~codex_presence.broker.history`), fields ``m`` (the member), ``s`` (the state),
    ``t`` (when, unix ms) and, when the transition carried one, ``x`` (the session). Its
    entry ids are Redis's clock, so it is trimmed by time with ``MINID ~`` at every write
    (the window, ``broker --history-hours``) and in size with ``MAXLEN ~`` (the team's
    cap, :data:`~codex_presence.broker.history.TOTAL`).
``history:last``
    A hash: each member's last state written, ``"<state> <at>"``: what makes the
    brokers' writes one history, not one per broker.

Every broker publishes every member's change (each one's fan-out learns it, from its own
report or through the store's events), so each tells this recorder, and each asks the
``HISTORY`` script to write it: the script writes only a change of state from the member's
last (the first broker to tell it writes it; the others find it there), and dates it no
earlier than that last. A broker that lags behind (it tells a state the member already
left) writes a transition that the next one corrects at once: its interval is as short as
the lag. The script also returns the transition it ended, so that the broker that wrote an
answered wait, and only that one, counts it in ``/metrics``.

Writes never wait on a request: :meth:`RedisHistory.observe` queues (at most
:data:`QUEUED`; past it, the oldest is dropped and said once) and the link's background
work (:meth:`RedisHistory.keep`) writes the queue as it comes: what queued meanwhile in
one script call (:data:`WRITTEN_AT_ONCE` transitions at most; more make several, sent in
one round trip, :mod:`~.batch`). While Redis is away the queue waits; what it could not
hold is lost, and said. Reads (``GET /history``) ask Redis for what the stream gained
since the last read (``XRANGE`` after the last id read; the first read takes the whole
window) into a mirror here, bounded as in memory, so a read costs the new entries, not
the window; every entry goes through bounds: an entry no broker writes (a state this
version does not know, a time that is not 1 to 15 digits, a member not in the team file, a
session id that is not one) is dropped alone and said once. A restart loses nothing: the
stream is Redis's.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from redis.exceptions import ResponseError

from codex_presence._wire import Presence, session_id_problem
from codex_presence.broker.history import (
    DEFAULT_LIMITS,
    HISTORY_STATES,
    MAX_AT,
    HistoryLimits,
    MemoryHistory,
    Transition,
    answered_wait,
    observed,
)
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.scripts import TOLERANT
from codex_presence.broker.store import StoreUnavailable

__all__ = ["QUEUED", "WRITTEN_AT_ONCE", "RedisHistory", "entry_transition"]

logger = logging.getLogger("codex_presence.broker")

_PAGE = 10_000
"""Stream entries asked for in one ``XRANGE``."""
QUEUED = 10_000
"""Transitions waiting to be written, at most (Redis away): past it, the oldest go."""


HISTORY = (
    TOLERANT
    + """
local ns, keep, total = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local stream, last_key = ns .. 'history', ns .. 'history:last'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local results = {}
local wrote = false
for i = 4, #ARGV, 4 do
  local name, state, at, session = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local last = on('HGET', last_key, name)
  local last_state, last_at = nil, nil
  if last then
    local space = string.find(last, ' ', 1, true)
    if space then
      last_state, last_at = string.sub(last, 1, space - 1), int(string.sub(last, space + 1))
    end
  end
  if last_state == state then
    results[#results + 1] = {0, false, false}
  else
    if last_at and at < last_at then
      at = last_at
    end
    local fields = {'m', name, 's', state, 't', string.format('%d', at)}
    if session ~= '' then
      fields[#fields + 1] = 'x'
      fields[#fields + 1] = session
    end
    on('XADD', stream, '*', unpack(fields))
    redis.call('HSET', last_key, name, state .. ' ' .. string.format('%d', at))
    wrote = true
    if last_state and last_at then
      results[#results + 1] = {1, last_state, last_at}
    else
      results[#results + 1] = {1, false, false}
    end
  end
end
if wrote then
  redis.call('XTRIM', stream, 'MINID', '~', string.format('%d', now - keep))
  redis.call('XTRIM', stream, 'MAXLEN', '~', total)
  redis.call('PEXPIRE', stream, keep)
  redis.call('PEXPIRE', last_key, keep)
end
return {results, lost}
"""
)
"""Write transitions (after the window's ms and the team's cap, ``ARGV[4..]`` in fours:
member, state, at, session), each unless it is the member's last state, in order, then
trim the stream by time and size once: ``{{written, ended_state, ended_at}..., lost}``.
One call per batch of transitions (at most :data:`WRITTEN_AT_ONCE`), not one per
transition: a call per transition cost the broker a task, a future and a command each,
the largest part of what the history added to a transition (issue 37)."""
WRITTEN_AT_ONCE = 256
"""Transitions written by one script call, at most (the script holds Redis meanwhile)."""


def entry_transition(fields: dict[bytes, bytes], names: frozenset[str]) -> tuple[str, Transition]:
    """A stream entry's member and transition. Raises :class:`ValueError` for what no
    broker writes."""
    try:
        name = fields[b"m"].decode()
        state = fields[b"s"].decode()
        at_text = fields[b"t"].decode()
        session = fields[b"x"].decode() if b"x" in fields else None
    except (KeyError, UnicodeDecodeError) as exc:
        raise ValueError(f"a field missing or not text: {exc}") from None
    if name not in names:
        raise ValueError("a member not in the team file")
    if state not in HISTORY_STATES:
        raise ValueError(f"a state this version does not know: {state[:16]!r}")
    if not (at_text.isascii() and at_text.isdigit()) or len(at_text) > 15:
        raise ValueError("a time that is not unix ms")
    at = int(at_text)
    if not 0 < at <= MAX_AT:
        raise ValueError("a time out of range")
    if session is not None and session_id_problem(session) is not None:
        raise ValueError("a session id that is not one")
    return name, Transition(at, state, session)


class RedisHistory:
    """The team's history in Redis, through ``link``, for ``names`` (the team file's).
    ``answered`` is told how long each wait lasted that this broker wrote the answer to."""

    def __init__(
        self,
        link: RedisLink,
        *,
        names: Sequence[str],
        limits: HistoryLimits = DEFAULT_LIMITS,
        answered: Callable[[float], None] | None = None,
        queued: int = QUEUED,
    ) -> None:
        self.limits = limits
        self._link = link
        self._names = frozenset(names)
        self._stream = link.key("history")
        self._script = link.script(HISTORY)
        self._answered = answered
        self._queue: deque[tuple[str, Transition]] = deque(maxlen=queued)
        self._wake = anyio.Event()
        self._told: dict[str, str] = {}
        """Each member's state this broker last queued: the same again is not sent."""
        self.writing = 0
        """Transitions being written now (taken from the queue, their scripts sent)."""
        self._said_full = False
        self._said_unreadable = False
        self._mirror = MemoryHistory(limits)
        """The stream as read so far (bounded as in memory): a read asks Redis only for
        what came after."""
        self._read_to = b"0-0"
        self._reading = anyio.Lock()
        self._read_again = False
        """The team gained a member: the next read reads the whole stream again (what was
        dropped as no member's was theirs)."""
        link.add_listener(self)

    # -- writing -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Transitions waiting to be written (or being written)."""
        return len(self._queue) + self.writing

    def observe(self, name: str, presence: Presence, now_ms: int) -> None:
        transition = observed(presence, now_ms)
        if self._told.get(name) == transition.state:
            return  # the same state again (a connection counted, lastSeen): nothing to write
        self._told[name] = transition.state
        queue = self._queue
        if len(queue) == queue.maxlen and not self._said_full:
            self._said_full = True
            logger.warning("history: Redis is behind; the oldest transitions not yet written go")
        queue.append((name, transition))
        self._wake.set()

    async def keep(self) -> None:
        """Write what is queued, as it comes (the link's background work)."""
        while True:
            if not self._queue:
                self._wake = anyio.Event()
                await self._wake.wait()
            batch = list(self._queue)
            self._queue.clear()
            self.writing = len(batch)
            try:
                chunks = [
                    batch[i : i + WRITTEN_AT_ONCE] for i in range(0, len(batch), WRITTEN_AT_ONCE)
                ]
                results = await _gather([self._write(chunk) for chunk in chunks])
            except BaseException:  # an error, or the outage another task saw first
                self._queue.extendleft(reversed(batch))  # written again once Redis is back
                raise
            finally:
                self.writing = 0
            for chunk, ended_each in zip(chunks, results, strict=True):
                for (_, transition), ended in zip(chunk, ended_each, strict=True):
                    if ended is not None and self._answered is not None:
                        seconds = answered_wait(ended, transition)
                        if seconds is not None:
                            self._answered(seconds)
            self._said_full = False

    async def _write(self, chunk: list[tuple[str, Transition]]) -> list[Transition | None]:
        """One script call writing ``chunk``, in order: for each, the transition it ended
        (None: not written, or it ended none)."""
        limits = self.limits
        args: list[Any] = [limits.keep_ms, limits.total]
        for name, transition in chunk:
            args += (name, transition.state, transition.at, transition.session or "")
        try:
            results, lost = await self._link.run_script(self._script, args)
        except ResponseError:  # refused (an ACL, out of memory): this call's alone
            logger.warning(
                "history: Redis refused %d transitions (of %s...)",
                len(chunk),
                chunk[0][0],
                exc_info=True,
            )
            return [None] * len(chunk)
        if lost:
            logger.warning("history: %s held a value of another type: replaced", lost[0])
        ended: list[Transition | None] = []
        for written, state, at in results:
            ended.append(Transition(int(at), state.decode()) if written and state else None)
        return ended

    # -- reading -----------------------------------------------------------------------

    def follow_team(self, names: frozenset[str]) -> None:
        """The team file's members are now ``names``. Entries of a name not in the team are
        dropped when read, so a member added (another broker may have written of them
        before this one read the file) has the stream read again from its start."""
        if names - self._names:
            self._read_again = True
        self._names = names

    async def read(self, name: str, now_ms: int) -> list[Transition]:
        async with self._reading:  # one refresh at a time: each entry is added once
            if self._read_again:
                self._read_again = False
                self._mirror = MemoryHistory(self.limits)
                self._read_to = b"0-0"
            await self._refresh()
        self._mirror.trim(now_ms)
        return self._mirror.transitions(name)

    async def _refresh(self) -> None:
        """Add to the mirror what the stream gained since the last read."""
        while True:
            try:
                entries: Any = await self._link.client.xrange(
                    self._stream, min=b"(" + self._read_to, count=_PAGE
                )
            except Exception as exc:
                raise StoreUnavailable(
                    "the shared store (Redis) did not answer: the history was not read"
                ) from exc
            for entry_id, fields in entries:
                self._read_to = entry_id
                try:
                    member, transition = entry_transition(fields, self._names)
                except ValueError as exc:
                    if not self._said_unreadable:
                        self._said_unreadable = True
                        logger.warning("history: an entry of %s dropped: %s", self._stream, exc)
                    continue
                self._mirror.add(member, transition)
            if len(entries) < _PAGE:
                return

    # -- the link ----------------------------------------------------------------------

    async def resync(self) -> None:
        """The link (re)connected: Redis may have restarted empty, or the keys been
        flushed; the next read takes the stream from its start again."""
        self._told.clear()  # Redis may have lost what was written: tell each state again
        async with self._reading:
            self._mirror = MemoryHistory(self.limits)
            self._read_to = b"0-0"

    def on_event(self, event: Any) -> None:  # a list or an object, by version: unused
        pass

    def on_down(self, reason: str) -> None:
        pass

    def on_back(self) -> None:
        pass

    async def leave(self) -> None:
        pass


async def _gather(calls: list[Any]) -> list[Any]:
    """Await every call concurrently (one tick: one round trip); the first error raised,
    as itself, after every call ended."""
    results: list[Any] = [None] * len(calls)
    errors: list[Exception] = []

    async def run(index: int, call: Any) -> None:
        try:
            results[index] = await call
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for index, call in enumerate(calls):
            tg.start_soon(run, index, call)
    if errors:
        raise errors[0]
    return results
