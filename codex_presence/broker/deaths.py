"""Which sessions died: a session bound to a subscription whose death grace lapsed while
it was working or blocked, told to the broker's watcher (the notifier's "session lost").

The broker gives a session its grace when the last subscription bound to it here ends
(:mod:`codex_presence.broker.state`). If, by the end of the grace, the session was neither
reported again nor subscribed again, and the store no longer holds it working or blocked,
its runner died (killed, or away from the network for longer than the grace).
:class:`Deaths` keeps what that takes: each named session's state and since as reported
here, and the sessions in their grace; the broker's fan-out asks :meth:`Deaths.find` at
each wake-up (it wakes at the store's lapses, the grace's end among them).

One broker tells: the one that applies the grace. It knows the session's state from the
reports it received, or, when they went to another broker (a load balancer in front of
several), from the member's activity while that session is the member's only busy one.
The state's since, which the store records and every broker reads alike, names the event,
with the session id (:meth:`~codex_presence.core.notify_policy.NotifyPolicy.lost`).

Not a death: a session that reported idle (a runner that exits cleanly), one reported or
subscribed again within the grace (a network blip), and a report that lapses by its TTL
without a subscription ever bound to its session (nothing says its runner is gone). A
dying session is told lost only when it *lapsed*: one that came back through another broker
(its reports go there, and this one never hears them) and ended there with a report of
idle went cleanly, whenever that was (:meth:`~.tracker.ActivityTracker.ended_idle`). One
that came back there and changed its state or since is that broker's to tell, should it
die: its record here is not what it was at its release, and this broker lets it go (it
would tell the death a second time, in the state it had when it left).

Every broker hears of a lapse on a grace, whichever gave it
(:meth:`~.tracker.ActivityTracker.take_grace_lapses`): one that is not its to tell ends the
member's blocked spell without a word (:meth:`Mourner.lapsed`), so that no broker sharing
the store says "no longer needs input" of a runner that died.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from codex_presence._wire import ActivityState
from codex_presence.broker.record import SessionRecord
from codex_presence.broker.store import Store

__all__ = ["Deaths", "Mourner"]

logger = logging.getLogger("codex_presence.broker")

BUSY_KEPT = 1024
"""Sessions whose state is remembered before the lapsed ones are pruned."""
_IDLE = ActivityState.IDLE
_Spell = tuple[ActivityState, int] | None
"""A session's state and since, as its store holds it (None: the store cannot say)."""


@dataclass(frozen=True, slots=True)
class _Dying:
    """A session in its grace: what it was doing, since when, and the store's record of
    it then (None: the store cannot say)."""

    state: ActivityState
    since: int
    recorded: _Spell


class Mourner(Protocol):
    """Told of a session's death (the broker's watcher)."""

    def lost(
        self,
        name: str,
        state: ActivityState,
        at_ms: int,
        *,
        since_ms: int | None = None,
        session: str | None = None,
    ) -> None: ...

    def lapsed(self, name: str) -> None:
        """A session of ``name`` lapsed on its grace, another broker's to tell (or none's):
        whatever it held ended without an answer."""


@runtime_checkable
class _SessionHolder(Protocol):
    def holds(self, name: str, session: str) -> bool: ...

    def record(self, name: str, session: str) -> SessionRecord | None: ...

    def ended_idle(self, name: str, session: str) -> bool: ...

    def take_grace_lapses(self) -> list[tuple[str, str]]: ...


def _holder(store: Store) -> _SessionHolder | None:
    """What tells ``store``'s sessions: the memory store's tracker, the Redis store's
    mirror (None: a store that cannot say; then no death is ever told)."""
    holder = getattr(store, "tracker", store)
    return holder if isinstance(holder, _SessionHolder) else None


def holds(store: Store, name: str, session: str) -> bool:
    """Whether ``store`` holds ``name``'s ``session`` working or blocked (the TTL
    resolved); True when it cannot say."""
    holder = _holder(store)
    return True if holder is None else holder.holds(name, session)


class Deaths:
    """The sessions of ``store`` that die, told to ``mourner`` with ``now_ms`` (unix ms)."""

    def __init__(self, store: Store, mourner: Mourner, now_ms: Callable[[], int]) -> None:
        self._store = store
        self._mourner = mourner
        self._now_ms = now_ms
        self._busy: dict[tuple[str, str], tuple[ActivityState, int]] = {}
        """Each named session working or blocked, as reported here: its state and since."""
        self._busy_cap = BUSY_KEPT
        self._dying: dict[tuple[str, str], _Dying] = {}
        """Sessions in their grace."""

    def reported(self, name: str, session: str, state: ActivityState, now_ms: int) -> None:
        """``name``'s ``session`` reported ``state`` at ``now_ms``, and the store recorded it."""
        key = (name, session)
        self._dying.pop(key, None)  # reported again: alive (or idle: nothing to lose)
        if state is _IDLE:
            self._busy.pop(key, None)
            return
        shown = self._store.activity_entry(name)
        since = shown.since
        if not (shown.state is state and since is not None and sum(shown.sessions) <= 1):
            old = self._busy.get(key)  # this session's since, as the store sets it
            since = old[1] if old is not None and old[0] is state else now_ms
        self._busy[key] = (state, since)
        if len(self._busy) > self._busy_cap:  # sessions that lapsed without a subscription
            self._busy = {k: v for k, v in self._busy.items() if holds(self._store, *k)}
            self._busy_cap = max(BUSY_KEPT, 2 * len(self._busy))

    def bound(self, name: str, session: str) -> None:
        """A subscription bound to ``name``'s ``session`` opened here: back within the grace."""
        self._dying.pop((name, session), None)

    def released(self, name: str, session: str) -> None:
        """The last subscription bound to ``name``'s ``session`` here ended (the store gave
        it the grace): if it is working or blocked, it is dying."""
        if not holds(self._store, name, session):
            return
        busy = self._busy.pop((name, session), None)
        if busy is None:  # its reports went to another broker: the member's, if only its
            shown = self._store.activity_entry(name)
            if shown.state is _IDLE or shown.since is None or sum(shown.sessions) > 1:
                return
            busy = (shown.state, shown.since)
        holder = _holder(self._store)
        state, since = busy
        spell = None if holder is None else _spell(holder, name, session)
        self._dying[(name, session)] = _Dying(state, since, spell)

    def find(self) -> None:
        """Tell of each dying session whose grace lapsed; of another broker's, that it
        lapsed."""
        holder = _holder(self._store)
        if holder is None:
            return  # a store that cannot say: no death is ever told
        for key in holder.take_grace_lapses():
            if key not in self._dying:
                self._mourner.lapsed(key[0])
        for (name, session), dying in list(self._dying.items()):
            if holder.holds(name, session):
                if _spell(holder, name, session) != dying.recorded:
                    # Reported anew through another broker: alive there, and that broker
                    # tells its death, in the state it then has.
                    del self._dying[(name, session)]
                continue
            del self._dying[(name, session)]
            if holder.ended_idle(name, session):
                logger.debug("%s's session %s ended idle through another broker", name, session)
                continue
            logger.info("%s's session %s lapsed after its subscription ended", name, session)
            self._mourner.lost(
                name, dying.state, self._now_ms(), since_ms=dying.since, session=session
            )


def _spell(holder: _SessionHolder, name: str, session: str) -> _Spell:
    """``name``'s ``session``'s state and since, as ``holder`` records it (None: not held)."""
    record = holder.record(name, session)
    return None if record is None else (record.state, record.since)
