"""The activity tracker: who is working or blocked right now, with the design's TTL.

Only ``working`` and ``blocked`` occupy the tracker; ``idle`` is the absence of an entry.
Each entry also keeps since when its state holds (``activitySince``, unix ms): a heartbeat
of the same state keeps it, a change of state (a lapse included) starts it again.
Each report holds for ``ttl`` seconds (:data:`~codex_presence._wire.DEFAULT_TTL` by default,
fractional allowed) and a runner re-reports at a third of it while non-idle (the broker
states its TTL in ``GET /whoami``; :func:`~codex_presence._wire.heartbeat_for`). There is no
sweeper: every read resolves the TTL
against the injected clock, and drops what has lapsed, so a runner that died mid-turn
reads as idle again within the TTL whether or not anything ever runs in the background.

A report may carry its own TTL: the Redis store's mirror
(:mod:`codex_presence.broker.redis_store`) holds what another broker recorded, for as long
as that broker said it holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from codex_presence._wire import DEFAULT_TTL, ActivityState

__all__ = ["Activity", "ActivityTracker"]

_IDLE = ActivityState.IDLE

Activity = tuple[ActivityState, int | None]
"""A member's activity and since when it holds (unix ms; None when idle)."""
_IDLE_ACTIVITY: Activity = (_IDLE, None)


class ActivityTracker:
    """Each member's reported activity in memory: ``name -> (state, since)``, and when it
    lapses. The pair is replaced only when it changes, so that a reader can tell "the same"
    by identity (the broker's roster cache does)."""

    __slots__ = ("_clock", "_entries", "_expires", "ttl")

    def __init__(self, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        if not ttl > 0:
            raise ValueError(f"the activity TTL must be positive, not {ttl!r}")
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[ActivityState, int]] = {}
        self._expires: dict[str, float] = {}

    def report(
        self,
        name: str,
        state: ActivityState,
        ttl: float | None = None,
        *,
        now_ms: int = 0,
        since: int | None = None,
    ) -> bool:
        """``name`` reported ``state``, which holds ``ttl`` seconds (the tracker's by
        default); whether the state shown changed. The state holds since ``since`` (unix
        ms) when given (a shared store's record says), else since ``now_ms`` if it is new,
        else since it began."""
        previous = self.entry(name)
        if state is _IDLE:
            self._entries.pop(name, None)
            self._expires.pop(name, None)
            return previous[0] is not state
        if since is None:
            since = previous[1] if previous[0] is state and previous[1] is not None else now_ms
        if previous[0] is not state or previous[1] != since:
            self._entries[name] = (state, since)
        self._expires[name] = self._clock() + (self.ttl if ttl is None else ttl)
        return previous[0] is not state

    def entry(self, name: str) -> Activity:
        """``name``'s activity and since when it holds, the TTL resolved: the same object
        for as long as neither changes."""
        entry = self._entries.get(name)
        if entry is None:
            return _IDLE_ACTIVITY
        if self._clock() >= self._expires[name]:
            del self._entries[name], self._expires[name]
            return _IDLE_ACTIVITY
        return entry

    def get(self, name: str) -> ActivityState:
        return self.entry(name)[0]

    def since(self, name: str) -> int | None:
        """Since when (unix ms) ``name``'s working or blocked state holds; None when idle."""
        return self.entry(name)[1]

    def next_expiry(self) -> float | None:
        now = self._clock()
        lapsed = [name for name, expires in self._expires.items() if now >= expires]
        for name in lapsed:
            del self._entries[name], self._expires[name]
        return min(self._expires.values(), default=None)

    def next_lapse(self) -> float | None:
        """Seconds until :meth:`next_expiry` (None: nothing can lapse)."""
        deadline = self.next_expiry()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def __len__(self) -> int:
        """Entries held, lapsed or not (for tests and stats)."""
        return len(self._entries)
