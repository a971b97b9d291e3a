"""Each member's timeline: the transitions the fan-out published, kept for a bounded time
and in a bounded size, and what ``GET /history`` says of them (intervals, totals, waits).

The roster says what is true now; a state that changed is gone from it. The fan-out
(:meth:`~codex_presence.broker.state.Broker.publish`) tells a :class:`HistoryRecorder` every
member's presence as it publishes it; the recorder keeps a :class:`Transition` each time
the member's *shown* state (:func:`shown_state`: working, blocked, idle, offline) changes.
Two recorders, like the two stores: :class:`MemoryRecorder` here (one broker), and
:class:`~codex_presence.broker.redis.history.RedisHistory` (a Redis stream per team, which
every broker sharing the team writes and reads).

This module is sans-I/O: no clock, no socket. Time is passed in (unix ms), so the rules are
tested with plain data.

When. A transition into working or blocked is dated by the store's ``activitySince`` (the
report that started it, the same on every broker sharing the store); one into idle or
offline by the publishing broker's clock (a lapse has no report to date it). A member's
transitions never go back in time: one dated before the last is moved up to it. A
transition into working or blocked carries the session that made it when the presence
says which (its ``agents``, each session's roster entry: the named session in that state
since then); the others carry none.

Bounds. A transition older than the window (:attr:`HistoryLimits.keep_ms`, 24 h by
default, ``broker --history-hours``) is dropped, and so are a member's oldest past
:attr:`HistoryLimits.per_member` and the team's oldest past :attr:`HistoryLimits.total`.

What it says (:func:`summarize`): the member's intervals from ``since`` to now, each
``{"state", "since", "until"}`` (unix ms; the last one, still going on, has ``"until":
null``), the seconds in each state, and the waits: each stretch the member was blocked
(the one still going on counted up to now). Time before the first transition kept is
unknown, and counted nowhere.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, cast

from codex_presence._wire import Presence

__all__ = [
    "DEFAULT_HOURS",
    "DEFAULT_LIMITS",
    "HISTORY_STATES",
    "PER_MEMBER",
    "TOTAL",
    "HistoryLimits",
    "HistoryRecorder",
    "MemoryHistory",
    "MemoryRecorder",
    "Transition",
    "answered_wait",
    "observed",
    "parse_since",
    "shown_state",
    "summarize",
]

WORKING, BLOCKED, IDLE, OFFLINE = "working", "blocked", "idle", "offline"
HISTORY_STATES = (WORKING, BLOCKED, IDLE, OFFLINE)
"""What a member's timeline shows, in the order totals are given."""

DEFAULT_HOURS = 24.0
"""How long transitions are kept by default (``broker --history-hours``)."""
PER_MEMBER = 10_000
"""Transitions kept per member: one every 9 s for 24 h."""
TOTAL = 200_000
"""Transitions kept for the whole team (in memory, and in the Redis stream)."""
MAX_AT = 10**15 - 1
"""The latest time (unix ms, 15 digits) a transition may carry: what no broker writes is
refused on reading it back."""


class HistoryLimits(NamedTuple):
    """How much history is kept: ``keep_ms`` back from now, at most ``per_member``
    transitions per member and ``total`` for the team."""

    keep_ms: int = int(DEFAULT_HOURS * 3_600_000)
    per_member: int = PER_MEMBER
    total: int = TOTAL

    @classmethod
    def for_hours(cls, hours: float) -> HistoryLimits:
        if not 0 < hours <= 24 * 366:
            raise ValueError(f"the history is kept 0 < hours <= 8784, not {hours!r}")
        return cls(keep_ms=int(hours * 3_600_000))


DEFAULT_LIMITS = HistoryLimits()


class Transition(NamedTuple):
    """A member's shown state changed to ``state`` at ``at`` (unix ms), in ``session``
    when the change carried one."""

    at: int
    state: str
    session: str | None = None


def shown_state(presence: Presence) -> str:
    """What a member's timeline shows for ``presence``: working or blocked when reported
    (connected or not), else idle while connected and offline when not."""
    activity = presence.get("activity")
    if activity is not None and activity != IDLE:
        return activity
    return IDLE if presence["connected"] else OFFLINE


def observed(presence: Presence, now_ms: int) -> Transition:
    """The transition ``presence`` shows, dated as the module says, with the session that
    made it when the presence says it (its ``agents`` entries: the session in that state
    since then)."""
    state = shown_state(presence)
    since = presence.get("activitySince")
    if state not in (WORKING, BLOCKED) or since is None:
        return Transition(now_ms, state)
    return Transition(since, state, _session_of(presence, state, since))


def _session_of(presence: Presence, state: str, since: int) -> str | None:
    """The named session whose entry in ``agents`` (each session's roster entry, when the
    broker gives them) is in ``state`` since ``since``; None when none is (or unnamed)."""
    agents = cast(Mapping[str, Any], presence).get("agents")
    if not isinstance(agents, list):
        return None
    for agent in agents:
        if isinstance(agent, Mapping) and agent.get("state") == state:
            session = agent.get("session")
            if agent.get("since") == since and isinstance(session, str) and session:
                return session
    return None


class HistoryRecorder(Protocol):
    """What the broker's fan-out tells, and what ``GET /history`` asks."""

    limits: HistoryLimits

    def observe(self, name: str, presence: Presence, now_ms: int) -> None:
        """``name``'s presence as the fan-out publishes it, at ``now_ms``; must not wait."""

    async def read(self, name: str, now_ms: int) -> list[Transition]:
        """``name``'s transitions kept at ``now_ms``, oldest first. May raise
        :class:`~codex_presence.broker.store.StoreUnavailable`."""

    def follow_team(self, names: frozenset[str]) -> None:
        """The team file changed: its members are now ``names`` (a member added has a
        history from then on, and what other brokers wrote of them is read too)."""


class MemoryHistory:
    """Every member's transitions in this process, within ``limits``."""

    def __init__(self, limits: HistoryLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._members: dict[str, deque[Transition]] = {}
        self._order: deque[tuple[str, Transition]] = deque()
        """Every transition kept, in the order added: the team's oldest leaves first."""
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, name: str, transition: Transition) -> Transition | None:
        """Keep ``transition`` of ``name`` if it changes their state; the one it ends (the
        member's last), or None when nothing was kept (the same state, or the first)."""
        kept = self._members.setdefault(name, deque())
        last = kept[-1] if kept else None
        if last is not None and last.state == transition.state:
            return None
        if last is not None and transition.at < last.at:
            transition = transition._replace(at=last.at)
        kept.append(transition)
        self._order.append((name, transition))
        self._size += 1
        if len(kept) > self.limits.per_member:
            kept.popleft()
            self._size -= 1
        while self._size > self.limits.total:
            self._drop_oldest()
        return last

    def _drop_oldest(self) -> None:
        name, transition = self._order.popleft()
        kept = self._members[name]
        if kept and kept[0] is transition:  # not already gone by the member's own cap
            kept.popleft()
            self._size -= 1

    def trim(self, now_ms: int) -> None:
        """Drop what is older than the window at ``now_ms``."""
        cutoff = now_ms - self.limits.keep_ms
        for kept in self._members.values():
            while kept and kept[0].at < cutoff:
                kept.popleft()
                self._size -= 1
        order = self._order
        while order and (order[0][0] not in self._members or order[0][1].at < cutoff):
            order.popleft()
        if len(order) > 2 * self._size + 1024:  # entries the members' caps dropped
            self._order = deque(
                (name, t) for name, t in order if (kept := self._members[name]) and t in kept
            )

    def transitions(self, name: str) -> list[Transition]:
        return list(self._members.get(name, ()))


class MemoryRecorder:
    """The history of one broker in memory. ``answered`` is told how long (seconds) each
    wait lasted that someone answered (blocked, then working or idle)."""

    def __init__(
        self,
        limits: HistoryLimits = DEFAULT_LIMITS,
        answered: Callable[[float], None] | None = None,
    ) -> None:
        self.limits = limits
        self.history = MemoryHistory(limits)
        self._answered = answered
        self._trimmed_at = 0

    def observe(self, name: str, presence: Presence, now_ms: int) -> None:
        transition = observed(presence, now_ms)
        ended = self.history.add(name, transition)
        if ended is not None and self._answered is not None:
            seconds = answered_wait(ended, transition)
            if seconds is not None:
                self._answered(seconds)
        if now_ms - self._trimmed_at >= 60_000:  # once a minute is enough for a window of hours
            self._trimmed_at = now_ms
            self.history.trim(now_ms)

    async def read(self, name: str, now_ms: int) -> list[Transition]:
        self.history.trim(now_ms)
        return self.history.transitions(name)

    def follow_team(self, names: frozenset[str]) -> None:
        """Nothing to do: transitions are kept by name, whoever the team holds (a member
        removed, then added again, finds their past within the window)."""


def answered_wait(ended: Transition, by: Transition) -> float | None:
    """How long the wait ``ended`` lasted, if ``by`` answered it (blocked, then working or
    idle; offline is no answer); else None."""
    if ended.state != BLOCKED or by.state not in (WORKING, IDLE):
        return None
    return (by.at - ended.at) / 1000


def _seconds(ms: int) -> float:
    return round(ms / 1000, 3)


def summarize(
    member: str, transitions: Sequence[Transition], since_ms: int, now_ms: int
) -> dict[str, Any]:
    """``GET /history``'s answer for ``member``'s ``transitions`` (oldest first), from
    ``since_ms`` to ``now_ms``."""
    intervals: list[dict[str, Any]] = []
    totals = dict.fromkeys(HISTORY_STATES, 0)
    waits: list[int] = []
    for index, transition in enumerate(transitions):
        if transition.at > now_ms:
            break
        following = transitions[index + 1] if index + 1 < len(transitions) else None
        end = now_ms if following is None else min(following.at, now_ms)
        start = max(transition.at, since_ms)
        if end <= start and following is not None:
            continue  # wholly before since (or of no length)
        interval: dict[str, Any] = {
            "state": transition.state,
            "since": start,
            "until": None if following is None else end,
        }
        if transition.session is not None:
            interval["session"] = transition.session
        intervals.append(interval)
        length = max(0, end - start)
        totals[transition.state] += length
        if transition.state == BLOCKED:
            waits.append(length)
    return {
        "member": member,
        "intervals": intervals,
        "totals": {state: _seconds(ms) for state, ms in totals.items()},
        "waits": {
            "count": len(waits),
            "longest": _seconds(max(waits, default=0)),
            "each": [_seconds(ms) for ms in waits],
        },
    }


def parse_since(values: Iterable[str]) -> int | None:
    """``?since=``'s unix ms (each value given), None when not given. Raises
    :class:`ValueError` saying why it is refused."""
    given = list(values)
    if not given:
        return None
    if len(given) > 1:
        raise ValueError("?since= is given more than once")
    text = given[0]
    if not (text.isascii() and text.isdigit()) or len(text) > 15:
        raise ValueError("?since= must be unix milliseconds: digits only, at most 15")
    return int(text)
