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

import time
from collections import deque
from collections.abc import Callable

from codex_presence._wire import DEFAULT_TTL, ActivityState

__all__ = [
    "ANONYMOUS",
    "ENDED_KEPT",
    "Activity",
    "ActivityTracker",
    "Background",
    "SessionCounts",
]

_IDLE = ActivityState.IDLE
_BLOCKED = ActivityState.BLOCKED
ANONYMOUS = ""
"""The session a report without a session id is about."""
ENDED_KEPT = 1024
"""Sessions remembered as reported idle (the oldest forgotten first)."""

SessionCounts = tuple[int, int]
"""How many of a member's sessions are (working, blocked)."""
Background = tuple[int, int | None]
"""How many commands or tasks a member's sessions left running, and since when (unix ms;
None when none)."""
_NO_BACKGROUND: Background = (0, None)
Activity = tuple[ActivityState, int | None, SessionCounts, Background]
"""A member's activity, since when it holds (unix ms; None when idle), how many of their
sessions are working and blocked, and their background."""
_IDLE_ACTIVITY: Activity = (_IDLE, None, (0, 0), _NO_BACKGROUND)

_Held = tuple[ActivityState, int, float, int, int]
"""One session's state, since, when it lapses (the tracker's clock), its background count
and since when it has one."""


class ActivityTracker:
    """Each member's reported activity in memory, per session, and when each lapses. A
    member's :data:`Activity` is replaced only when it changes, so that a reader can tell
    "the same" by identity (the broker's roster cache does)."""

    __slots__ = (
        "_clock",
        "_ended_idle",
        "_grace_lapses",
        "_in_grace",
        "_next",
        "_sessions",
        "_shown",
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
        self._ended_idle: dict[tuple[str, str], None] = {}
        """Sessions held until a report of idle ended them, the latest last."""
        self._in_grace: set[tuple[str, str]] = set()
        """Sessions held on their grace (shortened), not reported again since."""
        self._grace_lapses: deque[tuple[str, str]] = deque(maxlen=ENDED_KEPT)
        """Sessions that lapsed on their grace, not yet taken."""

    def report(
        self,
        name: str,
        state: ActivityState,
        ttl: float | None = None,
        *,
        now_ms: int = 0,
        since: int | None = None,
        session: str = ANONYMOUS,
        background: int = 0,
        background_since: int | None = None,
        grace: bool = False,
    ) -> bool:
        """``name``'s ``session`` reported ``state`` with ``background`` commands left
        running, which holds ``ttl`` seconds (the tracker's by default); whether the
        member's activity shown changed. The state holds since ``since`` (unix ms) when
        given (a shared store's record says), else since ``now_ms`` if it is new to the
        session, else since it began; the background likewise (``background_since``).
        ``grace``: not a report but a shortening (a shared store's record of a grace)."""
        previous = self.entry(name)
        held = self._sessions.get(name)
        key = (name, session)
        if state is _IDLE and background <= 0:
            self._in_grace.discard(key)
            if held is None or held.pop(session, None) is None:
                return False
            self._ended_idle[key] = None
            if len(self._ended_idle) > ENDED_KEPT:
                del self._ended_idle[next(iter(self._ended_idle))]
        else:
            self._ended_idle.pop(key, None)
            if grace:
                self._in_grace.add(key)
            else:
                self._in_grace.discard(key)
            if held is None:
                held = self._sessions[name] = {}
            old = held.get(session)
            if since is None:
                since = old[1] if old is not None and old[0] is state else now_ms
            if background <= 0:
                background, background_since = 0, 0
            elif background_since is None:
                background_since = old[4] if old is not None and old[3] > 0 else now_ms
            expires = self._clock() + (self.ttl if ttl is None else ttl)
            held[session] = (state, since, expires, background, background_since)
        return self._recount(name, previous)

    def shorten(self, name: str, session: str, seconds: float) -> bool:
        """``name``'s ``session`` lapses within ``seconds`` from now unless reported again
        (its subscription ended); whether it held anything to shorten."""
        self.entry(name)  # drop what lapsed already
        held = self._sessions.get(name, {}).get(session)
        if held is None:
            return False
        deadline = self._clock() + seconds
        if deadline < held[2]:
            self._sessions[name][session] = (held[0], held[1], deadline, held[3], held[4])
            self._next[name] = min(self._next[name], deadline)
        self._in_grace.add((name, session))
        return True

    def forget_sessions(self, name: str) -> bool:
        """Drop every named session of ``name`` (the anonymous one stays): a shared store
        is read again in full; whether the activity shown changed."""
        previous = self.entry(name)
        held = self._sessions.get(name)
        if held is None:
            return False
        for session in [s for s in held if s != ANONYMOUS]:
            del held[session]
            self._in_grace.discard((name, session))
        return self._recount(name, previous)

    def holds(self, name: str, session: str) -> bool:
        """Whether ``name``'s ``session`` is working or blocked, or has a background (the
        TTL resolved)."""
        self.entry(name)
        return session in self._sessions.get(name, {})

    def session_state(self, name: str, session: str) -> tuple[ActivityState, int] | None:
        """``name``'s ``session``'s state and since when it holds (unix ms), the TTL
        resolved; None when it is not held."""
        self.entry(name)
        held = self._sessions.get(name, {}).get(session)
        return None if held is None else (held[0], held[1])

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
            return previous is not _IDLE_ACTIVITY
        working = blocked = count = 0
        background_since: int | None = None
        for state, _, _, running, running_since in held.values():
            if state is _BLOCKED:
                blocked += 1
            elif state is not _IDLE:
                working += 1
            if running > 0:
                count += running
                if background_since is None or running_since < background_since:
                    background_since = running_since
        strongest = _BLOCKED if blocked else ActivityState.WORKING if working else _IDLE
        since = (
            None
            if strongest is _IDLE
            else min(s for state, s, *_ in held.values() if state is strongest)
        )
        self._next[name] = min(expires for _, _, expires, *_ in held.values())
        background: Background = (count, background_since) if count else _NO_BACKGROUND
        current: Activity = (strongest, since, (working, blocked), background)
        if current == previous:
            return False
        self._shown[name] = current
        return True

    def entry(self, name: str) -> Activity:
        """``name``'s activity, since when it holds and its session counts, the TTL
        resolved: the same object for as long as none of them changes."""
        shown = self._shown.get(name)
        if shown is None:
            return _IDLE_ACTIVITY
        now = self._clock()
        if now < self._next[name]:
            return shown
        held = self._sessions[name]
        for session in [s for s, (_, _, expires, *_) in held.items() if now >= expires]:
            del held[session]
            if (name, session) in self._in_grace:
                self._in_grace.discard((name, session))
                self._grace_lapses.append((name, session))
        self._recount(name, shown)
        return self._shown.get(name, _IDLE_ACTIVITY)

    def get(self, name: str) -> ActivityState:
        return self.entry(name)[0]

    def background(self, name: str) -> Background:
        """How many commands ``name``'s sessions left running, and since when."""
        return self.entry(name)[3]

    def since(self, name: str) -> int | None:
        """Since when (unix ms) ``name``'s working or blocked state holds; None when idle."""
        return self.entry(name)[1]

    def next_expiry(self) -> float | None:
        now = self._clock()
        for name in [n for n, deadline in self._next.items() if now >= deadline]:
            self.entry(name)
        return min(self._next.values(), default=None)

    def next_lapse(self) -> float | None:
        """Seconds until :meth:`next_expiry` (None: nothing can lapse)."""
        deadline = self.next_expiry()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def __len__(self) -> int:
        """Members held, lapsed or not (for tests and stats)."""
        return len(self._shown)
