"""The activity tracker: who is working or blocked right now, with the design's TTL, per
session.

A member may run several sessions at once (a codex TUI, Claude Code, an IDE's app-server):
each report may name its session (``session``, an id the shell picks once per run; the
empty id is the design's single anonymous session, what every report without one is
about). Each session's activity is held apart, with its own TTL and its own since; the
member's activity is the strongest of them (blocked > working > idle), its since the
earliest since among the sessions in that state, and its session counts how many are
working and how many blocked (:data:`Activity`).

Only ``working`` and ``blocked`` occupy the tracker; ``idle`` is the absence of an entry.
A session's since (``activitySince``, unix ms) is kept by a heartbeat of the same state and
started again by a change of state (a lapse included).
Each report holds for ``ttl`` seconds (:data:`~codex_presence._wire.DEFAULT_TTL` by default,
fractional allowed) and a runner re-reports at a third of it while non-idle (the broker
states its TTL in ``GET /whoami``; :func:`~codex_presence._wire.heartbeat_for`). There is no
sweeper: every read resolves the TTL against the injected clock, and drops what has
lapsed, so a runner that died mid-turn reads as idle again within the TTL whether or not
anything ever runs in the background. :meth:`ActivityTracker.shorten` brings a session's
lapse closer (its subscription ended: the broker gives it a short grace, not the TTL).

A session's report may also carry its background count (commands or tasks it left running,
issue 23): held with the session's state, under the same TTL and the same grace, so a
session that is idle but has something running is held too. The member's background is
the sum over their sessions, since the earliest of them had one; it never makes the member
working or blocked.

A report may carry its own TTL: the Redis store's mirror
(:mod:`codex_presence.broker.redis.store`) holds what another broker recorded, for as long
as that broker said it holds.

A session that stops being held either lapsed (its TTL or grace ran out: nothing said it
ended) or was reported idle, on this broker or, through the mirror, on another. Which one
is kept for the last :data:`ENDED_KEPT` sessions reported idle
(:meth:`ActivityTracker.ended_idle`): a session whose subscription ended here, and which
then came back through another broker and ended there cleanly, is not a death. And a
session that lapses while in its grace (:meth:`ActivityTracker.shorten`, or a shortened
report from the Redis mirror) is kept for :meth:`ActivityTracker.take_grace_lapses`: its
runner's subscription ended somewhere, and it was not reported again. That end is no
answer to anything: every broker sharing the store reads it so, whichever gave the grace.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from codex_presence._wire import DEFAULT_TTL, ActivityState
from codex_presence.broker.record import ANONYMOUS, Agent, Report, SessionRecord, record_class

__all__ = [
    "ANONYMOUS",
    "ENDED_KEPT",
    "IDLE_ACTIVITY",
    "Activity",
    "ActivityTracker",
    "Background",
    "SessionCounts",
]

_IDLE = ActivityState.IDLE
_BLOCKED = ActivityState.BLOCKED
ENDED_KEPT = 1024
"""Sessions remembered as reported idle (the oldest forgotten first)."""

SessionCounts = tuple[int, int]
"""How many of a member's sessions are (working, blocked)."""
Background = tuple[int, int | None]
"""How many commands or tasks a member's sessions left running, and since when (unix ms;
None when none)."""
_NO_BACKGROUND: Background = (0, None)


@record_class
class Activity:
    """A member's activity, derived from their sessions' records: the strongest state,
    since when it holds (unix ms; None when idle), how many sessions are working and
    blocked, the background over every session, and each listed session with its record,
    in the roster's order (:attr:`agents` makes their entries)."""

    state: ActivityState = _IDLE
    since: int | None = None
    sessions: SessionCounts = (0, 0)
    background: Background = _NO_BACKGROUND
    listed: tuple[tuple[str, SessionRecord], ...] = ()
    """(session, record) of each session the roster lists: their entries are made when
    read (once per change: the roster keeps each member's encoding), not at each report."""

    @property
    def agents(self) -> tuple[dict[str, Any], ...]:
        """Each listed session's roster entry
        (:meth:`~codex_presence.broker.record.SessionRecord.entry`)."""
        return tuple(record.entry(session) for session, record in self.listed)

    @property
    def can_lapse(self) -> bool:
        """Whether anything in it lapses with a TTL or a grace: a working or blocked
        state, or background work (an idle member with none has nothing to lapse)."""
        return self.state is not _IDLE or self.background[0] > 0


IDLE_ACTIVITY = Activity()


@dataclass(slots=True)
class _Held:
    """A session held: its record, and when it lapses (the tracker's clock). A report of
    a session still held changes it in place (:meth:`ActivityTracker.put`: a heartbeat
    its lapse alone); a shortening replaces it. Never seen outside the tracker (the
    :class:`Activity` lists records), and not frozen: a frozen one's checks cost every
    report a tenth of its making, and a new one each transition ~1,400 instructions."""

    record: SessionRecord
    expires: float


class ActivityTracker:
    """Each member's sessions in memory (their :class:`~.record.SessionRecord`), and when
    each lapses. A member's :class:`Activity` is replaced only when it changes, so that a
    reader can tell "the same" by identity (the broker's roster cache does)."""

    __slots__ = (
        "_clock",
        "_due",
        "_ended_idle",
        "_grace_lapses",
        "_idle_agents",
        "_in_grace",
        "_next",
        "_sessions",
        "_shown",
        "changes",
        "ttl",
    )

    def __init__(self, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        if not ttl > 0:
            raise ValueError(f"the activity TTL must be positive, not {ttl!r}")
        self.ttl = ttl
        self._clock = clock
        self._sessions: dict[str, dict[str, _Held]] = {}
        self._shown: dict[str, Activity] = {}
        self._next: dict[str, float] = {}
        """Each member's earliest lapse: until then, their shown activity holds."""
        self._due = math.inf
        """No lapse is due before this (a lower bound of :attr:`_next`'s values: lowered
        with each deadline set, made exact by :meth:`next_expiry`), so that
        :meth:`resolve_due` costs nothing on every roster read."""
        self._ended_idle: dict[tuple[str, str], None] = {}
        """Sessions held until a report of idle ended them, the latest last."""
        self._idle_agents: dict[tuple[str, str], Agent] = {}
        """The agent object of each idle session that had one, the latest last: a report
        without one keeps it, however long the session idled."""
        self._in_grace: set[tuple[str, str]] = set()
        """Sessions held on their grace (shortened), not reported again since."""
        self._grace_lapses: deque[tuple[str, str]] = deque(maxlen=ENDED_KEPT)
        """Sessions that lapsed on their grace, not yet taken."""
        self.changes = 0
        """How many times a member's shown activity may have changed: every write (a
        report, a record put, a shortening, a forgetting) and every lapse resolved on a
        read. What tells a roster kept by the broker that it is out of date."""

    def report(self, name: str, report: Report, now_ms: int = 0) -> bool:
        """``name``'s ``report.session`` reported (at ``now_ms``, unix ms), holding the
        tracker's TTL; whether the member's activity shown changed."""
        old = self._sessions.get(name, {}).get(report.session) if name in self._shown else None
        if old is not None and self._clock() >= old.expires:
            old = None  # lapsed: a new spell
        if old is None:
            agent = self._idle_agents.get((name, report.session))
            record = SessionRecord.first(report, now_ms, agent)
        else:
            record = old.record.after(report, now_ms)
        return self.put(name, report.session, record)

    def put(
        self,
        name: str,
        session: str,
        record: SessionRecord,
        ttl: float | None = None,
        *,
        grace: bool = False,
    ) -> bool:
        """Hold ``record`` for ``name``'s ``session`` for ``ttl`` seconds (the tracker's by
        default), as given (a shared store's record says it), or end the session if it is
        no longer held (idle without background); whether the member's activity shown
        changed. ``grace``: not a report but a shortening (a shared store's record of a
        grace)."""
        self.changes += 1
        held = self._sessions.get(name)
        key = (name, session)
        old = None if held is None else held.get(session)
        now = self._clock()
        expires = now + (self.ttl if ttl is None else ttl)
        if (
            old is not None
            and old.record.state is record.state is not _IDLE
            and now < old.expires <= expires
            and old.record == record
        ):
            # a heartbeat (most reports): the same record held longer, nothing shown
            # changes (an earlier _next only rechecks). Held, so neither ended idle
            # nor idle with an agent kept.
            if grace:
                self._in_grace.add(key)
            else:
                self._in_grace.discard(key)
            old.expires = expires
            return False
        previous = self._shown.get(name)  # self.entry(name), its clock read once
        if previous is None:
            previous = IDLE_ACTIVITY
        elif now >= self._next[name]:
            previous = self.entry(name)  # a lapse due: resolved first
            held = self._sessions.get(name)
        if record.state is _IDLE and record.background <= 0:  # not held (record.held)
            self._in_grace.discard(key)
            self._idle_agents.pop(key, None)
            if record.agent is not None:
                self._idle_agents[key] = record.agent
                if len(self._idle_agents) > ENDED_KEPT:
                    del self._idle_agents[next(iter(self._idle_agents))]
            if held is None or held.pop(session, None) is None:
                return False
            self._ended_idle[key] = None
            if len(self._ended_idle) > ENDED_KEPT:
                del self._ended_idle[next(iter(self._ended_idle))]
        else:
            if old is None:  # (a session held is neither ended idle nor idle with an agent)
                self._ended_idle.pop(key, None)
                self._idle_agents.pop(key, None)
            # As in the heartbeat's path, but only now: the lapses resolved above read
            # whether their session was in its grace.
            if grace:
                self._in_grace.add(key)
            else:
                self._in_grace.discard(key)
            if old is not None and held is not None and held.get(session) is old:
                old.record, old.expires = record, expires  # not lapsed above: in place
            else:
                if held is None:
                    held = self._sessions[name] = {}
                held[session] = _Held(record, expires)
        return self._recount(name, previous)

    def shorten(self, name: str, session: str, seconds: float) -> bool:
        """``name``'s ``session`` lapses within ``seconds`` from now unless reported again
        (its subscription ended); whether it held anything to shorten."""
        self.changes += 1
        self.entry(name)  # drop what lapsed already
        held = self._sessions.get(name, {}).get(session)
        if held is None:
            return False
        deadline = self._clock() + seconds
        if deadline < held.expires:
            self._sessions[name][session] = replace(held, expires=deadline)
            self._next[name] = min(self._next[name], deadline)
            self._due = min(self._due, deadline)
        self._in_grace.add((name, session))
        return True

    def forget_sessions(self, name: str) -> bool:
        """Drop every session of ``name``: a shared store is read again in full; whether
        the activity shown changed."""
        self.changes += 1
        previous = self.entry(name)
        held = self._sessions.get(name)
        if held is None:
            return False
        for session in held:
            self._in_grace.discard((name, session))
        held.clear()
        return self._recount(name, previous)

    def holds(self, name: str, session: str) -> bool:
        """Whether ``name``'s ``session`` is working or blocked, or has a background (the
        TTL resolved)."""
        self.entry(name)
        return session in self._sessions.get(name, {})

    def record(self, name: str, session: str) -> SessionRecord | None:
        """``name``'s ``session``'s record, the TTL resolved; None when it is not held."""
        self.entry(name)
        held = self._sessions.get(name, {}).get(session)
        return None if held is None else held.record

    def ended_idle(self, name: str, session: str) -> bool:
        """Whether ``name``'s ``session``, held until lately, ended by a report of idle (not
        by a lapse), and nothing was reported of it since."""
        return (name, session) in self._ended_idle

    def take_grace_lapses(self) -> list[tuple[str, str]]:
        """The sessions (member, session) that lapsed on their grace since the last call,
        every lapse due by now resolved first."""
        self.next_expiry()
        taken = list(self._grace_lapses)
        self._grace_lapses.clear()
        return taken

    def held(self, name: str) -> int:
        """How many of ``name``'s sessions are working or blocked, or have a background
        (the TTL resolved)."""
        self.entry(name)
        return len(self._sessions.get(name, {}))

    def _recount(self, name: str, previous: Activity) -> bool:
        """Derive ``name``'s shown activity from its sessions; whether it changed."""
        held = self._sessions.get(name)
        if not held:
            self._sessions.pop(name, None)
            self._shown.pop(name, None)
            self._next.pop(name, None)
            return previous is not IDLE_ACTIVITY
        current = self._one(name, held) if len(held) == 1 else self._derived(name, held)
        if current.state is previous.state and current == previous:
            return False
        self._shown[name] = current
        return True

    def _one(self, name: str, held: dict[str, _Held]) -> Activity:
        """:meth:`_derived` for a member with one session (most members, at every change
        of most reports: the same activity, with no loop, sort or generator)."""
        for session, one in held.items():
            record = one.record
            state = record.state
            expires = self._next[name] = one.expires
            if expires < self._due:
                self._due = expires
            background = record.background
            return Activity(
                state,
                None if state is _IDLE else record.since,
                (0, 1) if state is _BLOCKED else (0, 0) if state is _IDLE else (1, 0),
                (background, record.background_since) if background > 0 else _NO_BACKGROUND,
                ((session, record),) if state is not _IDLE or record.agent is not None else (),
            )
        raise AssertionError("one session held")

    def _derived(self, name: str, held: dict[str, _Held]) -> Activity:
        """``name``'s activity from its sessions ``held`` (and its next lapse noted)."""
        working = blocked = count = 0
        background_since: int | None = None
        strongest_since: dict[ActivityState, int] = {}
        shown = False
        for one in held.values():
            record = one.record
            state = record.state
            if state is _BLOCKED:
                blocked += 1
            elif state is not _IDLE:
                working += 1
            if state is not _IDLE:
                shown = True
                since = strongest_since.get(state)
                if since is None or record.since < since:
                    strongest_since[state] = record.since
            elif record.agent is not None:
                shown = True  # record.shown, inlined: this runs at every change
            if record.background > 0:
                count += record.background
                if background_since is None or record.background_since < background_since:
                    background_since = record.background_since
        strongest = _BLOCKED if blocked else ActivityState.WORKING if working else _IDLE
        self._next[name] = earliest = min(one.expires for one in held.values())
        self._due = min(self._due, earliest)
        listed: tuple[tuple[str, SessionRecord], ...] = ()
        if shown:
            ordered = sorted(held.items(), key=lambda item: item[1].record.order())
            listed = tuple((session, one.record) for session, one in ordered)
        return Activity(
            strongest,
            strongest_since.get(strongest),
            (working, blocked),
            (count, background_since) if count else _NO_BACKGROUND,
            listed,
        )

    def entry(self, name: str) -> Activity:
        """``name``'s :class:`Activity`, the TTL resolved: the same object for as long as
        none of it changes."""
        shown = self._shown.get(name)
        if shown is None:
            return IDLE_ACTIVITY
        now = self._clock()
        if now < self._next[name]:
            return shown
        held = self._sessions[name]
        for session in [s for s, one in held.items() if now >= one.expires]:
            del held[session]
            if (name, session) in self._in_grace:
                self._in_grace.discard((name, session))
                self._grace_lapses.append((name, session))
        if self._recount(name, shown):
            self.changes += 1
        return self._shown.get(name, IDLE_ACTIVITY)

    def get(self, name: str) -> ActivityState:
        return self.entry(name).state

    def background(self, name: str) -> Background:
        """How many commands ``name``'s sessions left running, and since when."""
        return self.entry(name).background

    def since(self, name: str) -> int | None:
        """Since when (unix ms) ``name``'s working or blocked state holds; None when idle."""
        return self.entry(name).since

    def next_expiry(self) -> float | None:
        now = self._clock()
        for name in [n for n, deadline in self._next.items() if now >= deadline]:
            self.entry(name)
        earliest = min(self._next.values(), default=None)
        self._due = math.inf if earliest is None else earliest
        return earliest

    def resolve_due(self) -> None:
        """Resolve the lapses due by now (each one counts in :attr:`changes`): a scan of
        every member only when one can be due, not on every roster read."""
        if self._clock() >= self._due:
            self.next_expiry()

    def next_lapse(self) -> float | None:
        """Seconds until :meth:`next_expiry` (None: nothing can lapse)."""
        deadline = self.next_expiry()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def __len__(self) -> int:
        """Members held, lapsed or not (for tests and stats)."""
        return len(self._shown)
