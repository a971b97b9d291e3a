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

__all__ = ["ActivityTracker"]

_IDLE = ActivityState.IDLE


class ActivityTracker:
    """Each member's reported activity in memory: ``name -> (state, expires_at, since)``."""

    __slots__ = ("_clock", "_entries", "ttl")

    def __init__(self, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        if not ttl > 0:
            raise ValueError(f"the activity TTL must be positive, not {ttl!r}")
        self.ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[ActivityState, float, int]] = {}

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
        previous = self.get(name)
        if state is _IDLE:
            self._entries.pop(name, None)
            return previous is not state
        if since is None:
            since = self._entries[name][2] if previous is state else now_ms
        expires_at = self._clock() + (self.ttl if ttl is None else ttl)
        self._entries[name] = (state, expires_at, since)
        return previous is not state

    def get(self, name: str) -> ActivityState:
        entry = self._entries.get(name)
        if entry is None:
            return _IDLE
        state, expires_at, _ = entry
        if self._clock() >= expires_at:
            del self._entries[name]
            return _IDLE
        return state

    def since(self, name: str) -> int | None:
        """Since when (unix ms) ``name``'s working or blocked state holds; None when idle."""
        return None if self.get(name) is _IDLE else self._entries[name][2]

    def next_expiry(self) -> float | None:
        now = self._clock()
        lapsed = [name for name, (_, expires, _) in self._entries.items() if now >= expires]
        for name in lapsed:
            del self._entries[name]
        return min((entry[1] for entry in self._entries.values()), default=None)

    def next_lapse(self) -> float | None:
        """Seconds until :meth:`next_expiry` (None: nothing can lapse)."""
        deadline = self.next_expiry()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def __len__(self) -> int:
        """Entries held, lapsed or not (for tests and stats)."""
        return len(self._entries)
