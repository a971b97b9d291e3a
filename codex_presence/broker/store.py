"""Where the broker's state lives: the :class:`Store` interface, and the in-memory store.

The broker's rules (:class:`~codex_presence.broker.state.Broker`) read and write presence
through a :class:`Store`, of which there are two:

* :class:`MemoryStore` — the design's reference: the connection registry
  (:mod:`~codex_presence.broker.connections`) and the activity tracker with its TTL
  (:mod:`~codex_presence.broker.tracker`), in this process. The default.
* :class:`~codex_presence.broker.redis.store.RedisStore` — the same state shared by every
  broker of the team through Redis (``codex-presence broker --redis URL``).

The split follows what must wait and what must not. A report is the one write a client
waits for (``POST /presence/activity`` answers 204 once it is recorded where every broker
sees it, 503 if it cannot be), so :meth:`Store.report` is async and may raise
:class:`StoreUnavailable`. Attaching and detaching a subscriber are this broker's own
facts: they are counted here at once and shared in the background, so they never wait and
never fail (a stream's ``finally`` must not block on the network). Reads — each member's
:class:`~codex_presence.broker.connections.Connection` and activity, on every ``GET /roster``
and every fan-out batch — are local and synchronous in both stores: the shared one keeps a
mirror.

Each member's activity is kept per session (:mod:`~codex_presence.broker.tracker`): a report
may name its session, and at most ``max_sessions`` of a member's sessions may be working or
blocked (or have a background count) at once (a report that would start one more raises
:class:`TooManySessions`: 429).
A subscription that names a session is *bound* to it; when the last one bound to it on
this broker ends, :meth:`Store.release` gives the session a short grace instead of the TTL.

A store tells the broker what changed elsewhere through a :class:`StoreListener` (the
broker): a member whose presence changed on another broker, the shared state becoming
unreachable (streams then say the roster is stale) and coming back (a fresh roster for
everyone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from codex_presence._wire import DEFAULT_TTL, MAX_SESSIONS, ActivityState
from codex_presence.broker.connections import Connection, ConnectionRegistry
from codex_presence.broker.record import ANONYMOUS, Report
from codex_presence.broker.team import Team
from codex_presence.broker.tracker import Activity, ActivityTracker

__all__ = [
    "MemoryStore",
    "Store",
    "StoreListener",
    "StoreMisconfigured",
    "StoreUnavailable",
    "TooManySessions",
]


class StoreUnavailable(Exception):
    """The shared state cannot be reached, so a write was not made (or a browser session
    could not be checked): the request gets 503 with this reason."""


class StoreMisconfigured(Exception):
    """The shared store refused the broker's configuration at its first connection (a
    wrong or missing password): no retry can mend that, so the broker does not start, and
    says this reason on one line."""


class TooManySessions(Exception):
    """A report would make one more of a member's sessions working or blocked than the
    store holds: it gets 429 with this reason, and is not recorded."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"at most {limit} sessions of one member may be working or blocked at once; "
            "report idle in one, or wait for one to lapse"
        )


class StoreListener(Protocol):
    """What a store tells the broker about changes it did not make itself."""

    def changed(self, name: str) -> None:
        """``name``'s connection count or activity changed (on another broker, or a lapse
        this store learned of)."""

    def store_down(self, reason: str) -> None:
        """The shared state became unreachable: what this broker shows may be stale."""

    def store_back(self) -> None:
        """The shared state is reachable again and was read in full: anything may have
        changed."""


class Store(Protocol):
    """The broker's state: connection counts, activity with its TTL, ``lastSeen``."""

    @property
    def shared(self) -> bool:
        """Whether other brokers share this state (``/healthz`` says which store)."""

    @property
    def ttl(self) -> float:
        """Seconds a report to this broker holds without a heartbeat (``/whoami`` says)."""

    @property
    def refusing(self) -> str | None:
        """Why the shared state refuses this broker's writes while it is reachable (every
        report would get 503: ``/healthz`` says 503 too); None when it takes them."""

    def connection(self, name: str) -> Connection:
        """``name``'s connection presence, over every broker sharing the state."""

    def activity(self, name: str) -> ActivityState:
        """``name``'s activity, the TTL resolved."""

    def activity_entry(self, name: str) -> Activity:
        """``name``'s activity, since when (unix ms) its working or blocked state holds
        (a heartbeat keeps it, a change of state starts it again; None when idle) and how
        many of their sessions are working and blocked: the same object for as long as
        none of them changes."""

    def subscribers_here(self, name: str) -> int:
        """``name``'s streams open on this broker (what the per-member cap bounds)."""

    def version(self) -> int:
        """A number that changes whenever anything a roster shows may have changed (every
        write, ``lastSeen`` included, and every lapse due by now), so that the broker can
        keep the encoded roster until it does."""

    def next_lapse(self) -> float | None:
        """Seconds until the earliest TTL deadline known (None: none), for the fan-out to
        wake then."""

    async def report(self, name: str, report: Report, now_ms: int) -> bool:
        """Record ``report`` of ``name``'s session at ``now_ms`` (an emit: ``lastSeen``
        ticks); whether the activity shown changed. Raises :class:`StoreUnavailable` when
        it could not be recorded, :class:`TooManySessions` when it may not be."""

    def bind(self, name: str, session: str) -> None:
        """The first subscription bound to ``name``'s ``session`` opened on this broker."""

    def release(self, name: str, session: str, grace: float) -> None:
        """The last subscription bound to ``name``'s ``session`` on this broker ended: a
        working or blocked state of that session lapses within ``grace`` seconds unless it
        is reported again. Never waits, never fails."""

    def replace_team(self, team: Team) -> None:
        """The team file changed: ``team``'s members from now on (a member removed leaves
        what the store shows; one added shows their state). Never waits."""

    def attach(self, name: str, now_ms: int) -> int:
        """A stream for ``name`` opened here; ``name``'s connected count now."""

    def detach(self, name: str) -> int:
        """A stream for ``name`` closed here; ``name``'s connected count now."""

    async def run(
        self,
        listener: StoreListener,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep the state (shared: the link to it) until cancelled; ``task_status`` is
        told once the state was first read (or found unreachable)."""


class MemoryStore:
    """The state in this process, as the design's reference broker keeps it."""

    shared = False
    refusing = None

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self.registry = ConnectionRegistry()
        self.tracker = ActivityTracker(ttl=ttl, clock=clock)
        self._writes = 0

    def connection(self, name: str) -> Connection:
        return self.registry.get(name)

    def activity(self, name: str) -> ActivityState:
        return self.tracker.get(name)

    def activity_entry(self, name: str) -> Activity:
        return self.tracker.entry(name)

    def subscribers_here(self, name: str) -> int:
        return self.registry.get(name).connected

    def version(self) -> int:
        self.tracker.resolve_due()  # the lapses due by now are resolved: each one counts
        return self._writes + self.tracker.changes

    def next_lapse(self) -> float | None:
        return self.tracker.next_lapse()

    async def report(self, name: str, report: Report, now_ms: int) -> bool:
        tracker = self.tracker
        if (
            report.session != ANONYMOUS
            and report.holds
            and not tracker.holds(name, report.session)
            and tracker.held(name) >= self.max_sessions
        ):
            raise TooManySessions(self.max_sessions)
        self._writes += 1  # lastSeen ticks
        self.registry.touch(name, now_ms)
        return tracker.report(name, report, now_ms)

    def bind(self, name: str, session: str) -> None:
        """Nothing to remember: in one process, the broker is the store."""

    def release(self, name: str, session: str, grace: float) -> None:
        self.tracker.shorten(name, session, grace)

    def replace_team(self, team: Team) -> None:
        """Nothing to read: every member's state is here (a member removed is no longer
        shown; their entries lapse with their TTL)."""

    def attach(self, name: str, now_ms: int) -> int:
        self._writes += 1
        return self.registry.attach(name, now_ms)

    def detach(self, name: str) -> int:
        self._writes += 1
        return self.registry.detach(name)

    async def run(
        self,
        listener: StoreListener,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Nothing to keep: the state is here."""
        task_status.started()
