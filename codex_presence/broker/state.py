"""The reference broker's state and rules, without HTTP: who is connected, who is doing
what, and the fan-out of changes to every open stream.

:class:`Broker` applies the rules to a :class:`~codex_presence.broker.store.Store`: by
default the in-memory one (the connection counts of
:mod:`codex_presence.broker.connections`, the activity with its TTL of
:mod:`codex_presence.broker.tracker`, in one process, as the design says), or the Redis one
that several brokers share (:mod:`codex_presence.broker.redis.store`), which also tells the
broker what changed on the others. :mod:`codex_presence.broker.app` puts HTTP in front of it.

TTL lapses are resolved on read (there is no sweeper), so nothing *has* to happen when a
report lapses. The fan-out task nevertheless wakes at the earliest TTL deadline, reads the
members whose shown activity may have lapsed, and sends a ``presence`` event for each one
that did: a UI never has to poll ``GET /roster`` to see a crashed runner go idle. Changes
are coalesced: at most one batch every ``fanout_interval`` seconds (longer with many
subscribers: the pause grows so that the fan-out stays near :data:`FANOUT_SENDS_PER_SECOND`
writes per second), each batch encoded once and shared by every subscriber, so that a burst
of reports costs each subscriber one write, not one per report, and a member who flips
twice in a window is sent once. ``lastSeen`` alone changing sends nothing; it rides along
with the next event and is exact in ``GET /roster``.

Keep-alives. A waiting stream holds no timer of its own: each stream is put in one of
:data:`KEEPALIVE_LANES` lanes as it opens (in turn), and one broker task wakes one lane
every ``keepalive / KEEPALIVE_LANES`` seconds, so that every stream hears from the broker
each ``keepalive`` seconds while ten thousand of them are never woken at once (a broker-wide
tick woke them all in the same instant, every time).

The roster (``GET /roster``, and the first event of a stream) is encoded once per change:
a store that can tell when anything it shows changed (:meth:`.store.Store.version`: both
do, the Redis one for its mirror) has the whole body kept until then; otherwise each
member's encoded object is kept until that member changes.

Sessions. A subscription may name the session it belongs to (``?session=ID``, the id that
session's reports carry): the broker counts the subscriptions bound to each session here,
and when the last one ends, the store gives that session's working or blocked state
``session_grace`` seconds (:data:`~codex_presence._wire.SESSION_GRACE`) to be reported
again, not the whole TTL: a runner killed mid-turn reads as idle seconds after its
subscription drops, and one that reconnects within the grace (it re-sends its state)
changes nothing a person sees.

A session that lapses by that grace while working or blocked died (its runner was killed,
or lost its network for longer than the grace): the broker tells its watcher
(:meth:`ActivityWatcher.lost`; the notifier's "session lost"), as
:mod:`codex_presence.broker.deaths` finds. A report lapsing by its TTL without a
subscription ever bound to it is not a death: nothing says the runner is gone.

When a shared store becomes unreachable, every stream is told so (a ``stale`` event) and
keeps what it has; when the store is back, every stream gets the whole roster again.

The rules take members and plain values, never an HTTP request: who a request is, is the
HTTP layer's (:mod:`~codex_presence.broker.auth`); a contract keeps HTTP frameworks out of
this module.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import anyio
import orjson
from anyio.abc import TaskStatus

from codex_presence._wire import (
    ACTIVITY_STATES,
    CHANGED_EVENT,
    DEFAULT_TTL,
    KEEPALIVE,
    PRESENCE_EVENT,
    ROSTER_EVENT,
    SESSION_GRACE,
    STALE_EVENT,
    ActivityState,
    Presence,
    presence,
    privilege,
)
from codex_presence.broker.deaths import Deaths, Mourner
from codex_presence.broker.history import HistoryRecorder
from codex_presence.broker.record import ANONYMOUS, Report
from codex_presence.broker.store import MemoryStore, Store, StoreMisconfigured
from codex_presence.broker.team import Member, Team
from codex_presence.broker.tracker import Activity

__all__ = ["ActivityWatcher", "Broker"]

logger = logging.getLogger("codex_presence.broker")


class ActivityWatcher(Mourner, Protocol):
    """Told each member's activity as the broker publishes it, and every member's once the
    state was (re)read in full; runs beside the fan-out. The notifier
    (:mod:`codex_presence.broker.notify.notifier`) is one. :meth:`observe` must not wait; a death
    (:meth:`~codex_presence.broker.deaths.Mourner.lost`) is told before its lapse is
    observed."""

    def observe(
        self, name: str, state: ActivityState, since_ms: int | None, agents: object = None
    ) -> None: ...

    async def run(self) -> None: ...


FANOUT_INTERVAL = 0.05
FANOUT_SENDS_PER_SECOND = 5000
LAPSE_SCANS_PER_SECOND = 20_000
"""Members that can lapse read per second, at most, looking for lapses due."""
KEEPALIVE_LANES = 64
"""The lanes streams are spread over for their keep-alives: one lane is woken at a time."""
_LOG_SIZE = 64
_IDLE = ActivityState.IDLE


def _sse_head(event: str) -> bytes:
    """What starts a server-sent event named ``event``, up to its data."""
    return b"event: " + event.encode() + b"\ndata: "


def _kept(data: bytes) -> bytes:
    """``data`` in an allocation of its own size, to be kept: orjson (3.13) hands back its
    bytes in the 4 kB buffer it wrote them into, so each small one kept cost 4 kB (the
    roster's cached objects: 40 MB at 10,000 members, for 1 MB of JSON)."""
    return bytes(memoryview(data))


def _sse(event: str, data: bytes) -> bytes:
    return _sse_head(event) + data + b"\n\n"


class Broker:
    """The broker's state and rules, without HTTP.

    ``store`` is where the state lives; without it, in memory, with ``activity_ttl`` and
    ``clock`` (monotonic seconds) for its TTL. ``wall_clock`` dates ``createdAt`` and
    ``lastSeen``. ``session_grace``: seconds a session's activity outlives the last
    subscription bound to it.
    """

    def __init__(
        self,
        *,
        team: Team,
        store: Store | None = None,
        activity_ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        fanout_interval: float = FANOUT_INTERVAL,
        keepalive: float = KEEPALIVE,
        session_grace: float = SESSION_GRACE,
        watcher: ActivityWatcher | None = None,
        history: HistoryRecorder | None = None,
    ) -> None:
        if not session_grace >= 0:
            raise ValueError(f"the session grace must be 0 or more, not {session_grace!r}")
        self.team = team
        self.session_grace = session_grace
        self._bound: dict[tuple[str, str], int] = {}
        """Open subscriptions here per (member, session) they are bound to."""
        self.watcher = watcher
        self.history = history
        """Told each member's presence as it is published (``GET /history``)."""
        if store is None:
            store = MemoryStore(ttl=activity_ttl, clock=clock)
        self.store = store
        self._deaths = None if watcher is None else Deaths(store, watcher, self._now_ms)
        self._wall_clock = wall_clock
        self.started_at = self._now_ms()
        """When this broker started (unix ms): ``/healthz`` says it, so that a page whose
        sign-in a restart ended (sign-ins in memory) can say why."""
        self._roles = {m.name: (m.role.to_json() if m.role else None) for m in team.members}
        self._names = tuple(m.name for m in team.members)
        self._privileges = orjson.dumps(
            {m.name: privilege(m.role.permissions) if m.role else None for m in team.members}
        )
        self._encoded: dict[str, tuple[object, Activity, bytes]] = {}
        self._roster: tuple[int, bytes] | None = None
        """The whole roster body and the store's version it was made at (see
        :meth:`roster_json`)."""
        self._fanout_interval = fanout_interval
        self._keepalive = keepalive
        self.streams = 0
        self.carrying = 0
        """The streams that carry the changes (not quiet): what each batch is written to."""
        # fan-out state
        self.version = 0
        self._log: deque[tuple[int, bytes]] = deque(maxlen=_LOG_SIZE)
        self._dirty: dict[str, None] = {}
        self._shown: dict[str, Activity] = {}
        """The activity entry last published of each member whose entry can lapse (working,
        blocked, or background work): the store hands out the same object until something
        in it changes, so a lapse of any part (the state, a session's count, the
        background) is a new object here."""
        self._pending = anyio.Event()
        self._lanes = [anyio.Event() for _ in range(KEEPALIVE_LANES)]
        """Per lane: set by a batch published, by the lane's keep-alive tick, and by
        anything every stream must look at (a team changed, the broker closing)."""
        self._quiet_lanes = [anyio.Event() for _ in range(KEEPALIVE_LANES)]
        """The same for quiet streams (no roster, no changes): never set by a batch."""
        self._next_lane = 0
        self._ticks = 0
        self.closing = False
        self.stale: str | None = None
        """Why the shared store is unreachable, while it is (None: the state is current)."""
        self.failed = False
        """The background work (:meth:`run`) failed: the server must stop (see
        :class:`~codex_presence.broker.server.BrokerServer`)."""
        self.companions: list[Callable[..., Coroutine[Any, Any, None]]] = []
        """More background work, run beside the fan-out from the start (each is
        started with a ``task_status``): the team file's reloader."""
        self.misconfigured: str | None = None
        """Why the store refused this broker's configuration at the start (then
        :attr:`failed` too): the command says it as a configuration error."""

    # -- the team ----------------------------------------------------------------------

    def replace_team(self, team: Team) -> None:
        """The team file changed (``team add``, ``remove``, ``rotate``): from now on,
        ``team`` says who may do what. Every stream gets the whole roster again; a stream
        whose member was removed, or whose token no longer counts, ends (each stream looks
        at its next wake, which this is). The store follows (a shared one reads the
        members added from the shared state, and shows them offline until then)."""
        names = tuple(m.name for m in team.members)
        if team.name != self.team.name:
            raise ValueError(
                f"the team's name changed ({self.team.name!r} to {team.name!r}): restart "
                "the broker to serve another team"
            )
        self.store.replace_team(team)
        if self.history is not None:
            self.history.follow_team(frozenset(names))
        self.team = team
        self._roles = {m.name: (m.role.to_json() if m.role else None) for m in team.members}
        self._names = names
        self._privileges = orjson.dumps(
            {m.name: privilege(m.role.permissions) if m.role else None for m in team.members}
        )
        self._encoded.clear()
        self._roster = None
        self._shown = {n: a for n, a in self._shown.items() if n in self._roles}
        self._dirty = {n: None for n in self._dirty if n in self._roles}
        self._log.clear()
        self.version += 1  # no log entry at this version: since() sends the whole roster
        self._wake_all(quiet_too=True)

    # -- the rules ---------------------------------------------------------------------

    @property
    def activity_ttl(self) -> float:
        """Seconds a working/blocked report holds without a heartbeat."""
        return self.store.ttl

    def _now_ms(self) -> int:
        return int(self._wall_clock() * 1000)

    async def report(self, member: Member, report: Report) -> None:
        """``member`` reported ``report`` of one of their sessions: an emit (lastSeen
        ticks), maybe a change. Raises
        :class:`~codex_presence.broker.store.StoreUnavailable` when it was not recorded,
        :class:`~codex_presence.broker.store.TooManySessions` when it may not be."""
        now_ms = self._now_ms()
        changed = await self.store.report(member.name, report, now_ms)
        if self._deaths is not None and report.session != ANONYMOUS:
            self._deaths.reported(member.name, report.session, report.state, now_ms)
        if changed:
            self._changed(member.name)

    def attach(self, name: str, session: str | None = None, *, quiet: bool = False) -> None:
        """A subscriber for ``name`` opened (bound to ``session``, if it named one;
        ``quiet``: keep-alives only, no batch written to it)."""
        self.streams += 1
        if not quiet:
            self.carrying += 1
        count = self.store.attach(name, self._now_ms())
        if session is not None:
            key = (name, session)
            bound = self._bound[key] = self._bound.get(key, 0) + 1
            if bound == 1:
                self.store.bind(name, session)
            if self._deaths is not None:
                self._deaths.bound(name, session)
        logger.debug("%s subscribed (connected=%d)", name, count)
        self._changed(name)

    def detach(self, name: str, session: str | None = None, *, quiet: bool = False) -> None:
        """A subscriber for ``name`` (bound to ``session``, if it named one) closed,
        however it closed: the last one bound to a session gives it the grace."""
        self.streams -= 1
        if not quiet:
            self.carrying -= 1
        count = self.store.detach(name)
        if session is not None:
            key = (name, session)
            bound = self._bound.pop(key, 1) - 1
            if bound > 0:
                self._bound[key] = bound
            else:
                self.store.release(name, session, self.session_grace)
                if self._deaths is not None:
                    self._deaths.released(name, session)
        logger.debug("%s unsubscribed (connected=%d)", name, count)
        self._changed(name)

    def presence(self, name: str) -> Presence:
        conn = self.store.connection(name)
        activity = self.store.activity_entry(name)
        return presence(
            name=name,
            connected=conn.connected,
            created_at=conn.created_at,
            last_seen=conn.last_seen,
            role=self._roles[name],
            activity=activity.state,
            activity_since=activity.since,
            sessions=activity.sessions,
            background=activity.background,
            agents=activity.agents,
        )

    def roster_json(self) -> bytes:
        """``GET /roster``'s body. Each member's encoded object is cached until their
        connection or activity (or its start) changes, because with a thousand members
        building and encoding every object on every request is most of the request's
        cost."""
        version = self.store.version()
        kept = self._roster
        if kept is not None and kept[0] == version:
            return kept[1]
        cache = self._encoded
        get_connection = self.store.connection
        get_activity = self.store.activity_entry
        parts = []
        for name in self._names:  # a hit allocates nothing: fewer GC pauses in the tail
            connection = get_connection(name)
            activity = get_activity(name)  # the same object until it changes
            hit = cache.get(name)
            if hit is None or hit[1] is not activity or hit[0] is not connection:
                hit = (connection, activity, _kept(orjson.dumps(self.presence(name))))
                cache[name] = hit
            parts.append(hit[2])
        body = b"[" + b",".join(parts) + b"]"
        self._roster = (version, body)
        return body

    def roster_event(self, you: str, *, before: bytes = b"") -> bytes:
        """The stream's ``roster`` event (after ``before``): the whole roster, and each
        member's privilege bucket (the page shows it without a copy of the rule); followed
        by a ``stale`` event while the shared store is unreachable."""
        head = {"team": self.team.name, "you": you}
        return self._whole_event(ROSTER_EVENT, head, self.roster_json(), before)

    def changed_event(self, you: str, *, before: bytes = b"") -> bytes:
        """A light stream's whole ``changed`` event (after ``before``): what a ``roster``
        event says but the members, which the client reads with ``GET /roster``; followed
        by a ``stale`` event while the shared store is unreachable."""
        head = {"version": self.version, "team": self.team.name, "you": you}
        return self._whole_event(CHANGED_EVENT, head, None, before)

    def _whole_event(
        self, event: str, head: dict[str, Any], members: bytes | None, before: bytes
    ) -> bytes:
        """``before``, then ``event`` with ``head``'s fields, the ``members`` (JSON, if
        given) and the privilege buckets, then ``stale`` while the shared store is
        unreachable. Joined once: at 10,000 members the roster is 1.3 MB, and each
        concatenation was another copy."""
        stale = b"" if self.stale is None else self._stale_event()
        listed = () if members is None else (b',"members":', members)
        return b"".join(
            (
                before,
                _sse_head(event),
                orjson.dumps(head)[:-1],
                *listed,
                b',"privileges":',
                self._privileges,
                b"}\n\n",
                stale,
            )
        )

    def _stale_event(self) -> bytes:
        return _sse(STALE_EVENT, orjson.dumps({"stale": True, "reason": self.stale}))

    # -- what the store tells -----------------------------------------------------------

    def changed(self, name: str) -> None:
        """``name``'s presence changed elsewhere: fan it out."""
        if name in self._roles:
            self._changed(name)

    def store_down(self, reason: str) -> None:
        """Every stream is told that what it shows may be stale, and keeps it."""
        self.stale = reason
        self._append(self._stale_event())

    def store_back(self) -> None:
        """The state was read again in full: every stream gets the whole roster (which
        also says the roster is current again)."""
        self.stale = None
        self._log.clear()
        self._dirty.clear()
        self._shown = {n: a for n in self._names if (a := self.store.activity_entry(n)).can_lapse}
        self.version += 1  # no log entry at this version: since() sends the roster
        self._wake_all()
        self._watch_all()

    def _watch_all(self) -> None:
        if self.watcher is not None:
            for name in self._names:
                activity = self.store.activity_entry(name)
                agents = list(activity.agents) or None
                self.watcher.observe(name, activity.state, activity.since, agents)

    # -- fan-out -----------------------------------------------------------------------

    def _changed(self, name: str) -> None:
        if name not in self._roles:
            return  # removed from the team (its last stream ending): nothing to show
        self._dirty[name] = None
        self._pending.set()

    def take_lane(self) -> int:
        """The keep-alive lane of a stream that opens: the next one, in turn."""
        lane = self._next_lane
        self._next_lane = (lane + 1) % KEEPALIVE_LANES
        return lane

    def waiter(self, lane: int, *, quiet: bool = False) -> anyio.Event:
        """What a stream of ``lane`` waits on: set at its keep-alive tick, when a team
        changed or the broker closes, and (unless ``quiet``) when a batch is published;
        then replaced. A stream woken with nothing new to send sends a keep-alive."""
        return (self._quiet_lanes if quiet else self._lanes)[lane]

    def keepalive_tick(self) -> int:
        """Wake the streams of the next lane in turn (their keep-alive); which one."""
        lane = self._ticks % KEEPALIVE_LANES
        self._ticks += 1
        for lanes in (self._lanes, self._quiet_lanes):
            event, lanes[lane] = lanes[lane], anyio.Event()
            event.set()
        return lane

    def since(self, version: int, *, you: str, light: bool = False) -> tuple[bytes, int]:
        """Everything published after ``version``, as bytes to send, and the new version.

        A subscriber too far behind for the log gets the whole roster instead; a light one
        (``?light=1``) the whole ``changed`` event (:meth:`changed_event`), which sends
        it to read ``GET /roster``.
        """
        if self._log and self._log[0][0] <= version + 1:
            chunk = b"".join(data for v, data in self._log if v > version)
        elif light:
            chunk = self.changed_event(you)
        else:
            chunk = self.roster_event(you)
        return chunk, self.version

    def _find_lapses(self) -> None:
        if self._deaths is not None:
            self._deaths.find()
        entry = self.store.activity_entry
        for name, shown in list(self._shown.items()):
            if entry(name) is not shown:
                self._dirty[name] = None

    def publish(self) -> bool:
        """Encode the pending changes once, log them, wake every subscriber."""
        self._find_lapses()
        if not self._dirty:
            return False
        parts = []
        for name in self._dirty:
            p = self.presence(name)
            activity = p.get("activity")
            if (shown := self.store.activity_entry(name)).can_lapse:
                self._shown[name] = shown
            else:
                self._shown.pop(name, None)
            if self.watcher is not None:
                state = _IDLE if activity is None else ACTIVITY_STATES[activity]
                self.watcher.observe(name, state, p.get("activitySince"), p.get("agents"))
            if self.history is not None:
                self.history.observe(name, p, self._now_ms())
            parts.append(_sse(PRESENCE_EVENT, orjson.dumps(p)))
        self._dirty.clear()
        self._append(b"".join(parts))
        return True

    def _append(self, chunk: bytes) -> None:
        self.version += 1
        self._log.append((self.version, chunk))
        self._wake_all()

    def _wake_all(self, *, quiet_too: bool = False) -> None:
        """Wake the streams that carry changes (and with ``quiet_too``, every stream)."""
        for lanes in (self._lanes, self._quiet_lanes) if quiet_too else (self._lanes,):
            woken = list(lanes)
            lanes[:] = [anyio.Event() for _ in woken]
            for event in woken:
                event.set()

    def recheck_streams(self) -> None:
        """Wake every stream to check that it is still authorized (a browser sign-in
        ended); streams otherwise check at each event and keep-alive tick."""
        self._wake_all(quiet_too=True)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The broker's background work: its store's (for a shared one, the link) and the
        fan-out; ``task_status`` is told once the state was first read.

        A failure before that is raised (the server does not start). A failure after it
        is logged, ends every stream and sets :attr:`failed`, for the server to stop: a
        broker whose state is no longer kept must not go on answering as if it were."""
        started = False
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.store.run, self)
                for companion in self.companions:
                    await tg.start(companion)
                tg.start_soon(self.run_fanout)
                tg.start_soon(self.run_keepalives)
                if self.watcher is not None:
                    self._watch_all()
                    tg.start_soon(self.watcher.run)
                task_status.started()
                started = True
        except Exception as exc:
            misconfigured = None if started else _misconfiguration(exc)
            if misconfigured is not None:  # said by the command, on one line, not a trace
                self.misconfigured = str(misconfigured)
                self.failed = True
                self.close()
                task_status.started()
                return
            if not started:
                raise
            logger.critical("the broker's background work failed: stopping", exc_info=True)
            self.failed = True
            self.close()

    async def run_fanout(self) -> None:
        """Publish changes as they come (coalesced), and TTL lapses as they fall due."""
        while not self.closing:
            lapse = self.store.next_lapse()
            # A deadline that passed since the last batch is dropped by next_lapse(): seen
            # here, it goes out now rather than at the next deadline or change.
            self._find_lapses()
            # A lapse due is looked for at most once per fan-out interval, or per
            # LAPSE_SCANS_PER_SECOND members that can lapse: with ten thousand members
            # heartbeating, the next deadline is always a moment away (a heartbeat moves
            # it without a word), and each look reads every one of them (at 10,000, a
            # look every 50 ms took a tenth of the broker's core; a lapse is now seen
            # within half a second of its deadline, against a TTL of 30 s).
            gap = max(self._fanout_interval, len(self._shown) / LAPSE_SCANS_PER_SECOND)
            lapse = 0.0 if self._dirty else math.inf if lapse is None else max(lapse, gap)
            with anyio.move_on_after(lapse):
                await self._pending.wait()
            self._pending = anyio.Event()
            if self.publish():
                # The pause bounds the writes of the fan-out: one per stream per batch. It
                # follows a batch only: a change after a quiet spell goes out at once.
                await anyio.sleep(
                    max(self._fanout_interval, self.carrying / FANOUT_SENDS_PER_SECOND)
                )

    async def run_keepalives(self) -> None:
        """One lane's keep-alive tick every ``keepalive / KEEPALIVE_LANES`` seconds: each
        stream hears from the broker every ``keepalive`` seconds, a lane at a time."""
        step = self._keepalive / KEEPALIVE_LANES
        while not self.closing:
            await anyio.sleep(step)
            self.keepalive_tick()

    def close(self) -> None:
        """End every stream (the server is shutting down)."""
        self.closing = True
        self._pending.set()
        self._wake_all(quiet_too=True)


def _misconfiguration(exc: BaseException) -> StoreMisconfigured | None:
    """The :class:`StoreMisconfigured` that ``exc`` is, or holds (a task group's)."""
    if isinstance(exc, StoreMisconfigured):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _misconfiguration(inner)) is not None:
                return found
    return None
