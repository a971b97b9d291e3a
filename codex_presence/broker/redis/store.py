"""Presence shared by several brokers through Redis: the :class:`RedisStore`.

What lives in Redis (keys under the team's prefix, see :mod:`~.link`):

``s:<session>:<name>``, ``S:<name>``, ``h:<broker>``
    Each agent session's record (the anonymous one's too: it is the session ``""``), the
    member's held sessions, and the subscriptions bound here: see :mod:`~.activity`.
    Redis's own expiry is the TTL, and idle is the absence from ``S:<name>``, as the design
    says. A record's ``since`` (the roster's ``activitySince``) is when the state began: a
    report of the same state keeps it, another state (or a report after the key expired)
    starts it anew.
``m:<name>``
    A hash: ``c`` (``createdAt``, the earliest any broker saw) and ``s`` (``lastSeen``, the
    latest), unix ms. Merged with min/max, so that any order of writes gives the same.
``c:<broker>``
    One broker's open streams per member (``name -> count``), written only by that broker,
    expiring :data:`BOUND` s after its last heartbeat.
``brokers``
    A sorted set: every live broker by the Redis time of its last heartbeat.
``seq``
    A counter that numbers every change of presence; each event carries its number.

Every change is one Lua script (atomic: nothing is ever half-written) that also publishes
the event saying what it changed, as a JSON object with named keys:

* ``{"seq", "kind": "s", "name", "session", "ttl", "createdAt", "lastSeen", "record"}`` —
  a session's report (heartbeats too: they carry ``lastSeen``), or its grace;
* ``{"seq", "kind": "c", "name", "broker", "count", "createdAt", "lastSeen"}`` — a
  broker's streams for a member;
* ``{"seq", "kind": "b", "broker", "counts": {name: count}}`` — a broker (re)registered
  all its counts;
* ``{"seq", "kind": "g", "broker"}`` — a broker found dead: its counts leave the roster.

Every number in them, and in the keys the snapshot reads, goes through the bounded reader
of :mod:`~.records`: a key or an event holding what no broker writes (a time of ``1e30``,
twenty digits) is dropped alone and counted (:attr:`RedisLink.dropped_count
<codex_presence.broker.redis.link.RedisLink.dropped_count>`); the team goes on.

Reads never wait on Redis. Each broker keeps a mirror — activity in an
:class:`~codex_presence.broker.tracker.ActivityTracker` (each entry with the TTL its event
carried), every live broker's counts, and ``createdAt``/``lastSeen`` — read in full (one
script: a consistent snapshot with its ``seq``) whenever the link (re)connects, and kept
current by the events, in order: an event numbered at or below the snapshot's is already in
it, and a session's record only moves forward in ``seq`` (a broker applies its own report
as soon as its script returns, and ignores the echo). So ``GET /roster`` at a thousand
members costs what it costs in memory.

The numbers only grow, unless the keys are flushed or ``seq`` deleted behind the brokers'
backs: then every later event would be taken for one already applied, and reports would
change nothing anywhere. The channel delivers the events in the order of their numbers, and
every broker gets at least one (its own registration) after each resync; so an event
numbered at or below the one before it says the numbering started again: the broker ends
the link's connection, as an outage, and reads the state in full again.

Members. Who is in the team is each broker's own team file, not a set in Redis: the keys
are per member and no script needs the list (a report, a heartbeat write any name), only
the snapshot reads the members it is given. So a broker whose file changed while it runs
(:meth:`RedisStore.replace_team`) follows alone, and brokers whose files differ for a
while (one read the change, another not yet) each show their own file's members, from the
same keys: a member removed leaves this broker's mirror (their keys stay for the brokers
still on the old file, and lapse with the TTL); a member added is read from Redis by a
snapshot of that member alone, and what the channel says of them meanwhile is held back.
The snapshot publishes a marker (``{"seq": 0, "kind": "l", ...}``, which others ignore)
in the same atomic step, so the channel's order says which events it holds: it is applied
once both its reply and its marker came, and the events held back that came after the
marker are replayed on top. A broker registered again since the snapshot keeps the counts
of its registration, and one pruned since is not brought back.

Sessions (their reports, the subscriptions bound to them) are kept by
:mod:`~codex_presence.broker.redis.activity` into the same mirror. Before writing
anything, at each (re)connection, the broker checks that the keys hold its own team
(:mod:`~codex_presence.broker.redis.team`).

Values are read defensively: a record this version cannot read (written by another version
during a rolling upgrade, or by hand) counts as idle, is logged, and never stops a resync; a
value of the wrong type, or a time or counter that is not a number, costs its key alone (the
scripts of :mod:`~codex_presence.broker.redis.scripts` replace it, or read it as absent) and
is logged once with the key's name: never an outage of the team.

TTL lapses need no event and no keyspace notification (managed Redis often forbids the
``CONFIG SET`` they need): each mirror counts the TTL down from the event that set it, which
ends at most one delivery latency after Redis's own expiry, and the fan-out wakes at that
deadline as it does in memory. Redis's expiry stays the truth for every broker that
(re)reads the snapshot.

Connections. A broker's streams are its own facts: they are counted here at once and shared
by one background task, which sends the members whose count changed (coalesced) together
with the broker's heartbeat every :data:`BEAT` s. A broker that stops cleanly takes its
counts along (a ``g`` event). The heartbeat's script also prunes: any broker whose
heartbeat is older than :data:`BOUND` s is removed with its counts, and a ``g`` event says
so. A broker that dies (SIGKILL, power loss) thus leaves the roster within
``BOUND + BEAT`` = 12 s. A broker that was pruned while alive (Redis was away longer than
the bound) registers all its counts again. After any reconnection — Redis restarted, maybe
empty — each broker registers its counts in full and merges back the ``createdAt`` and
``lastSeen`` it knows; working and blocked members come back with their next heartbeat
(within 10 s), as after a broker restart in memory.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from anyio.abc import TaskStatus

from codex_presence._wire import DEFAULT_TTL, MAX_SESSIONS, ActivityState
from codex_presence.broker.connections import Connection
from codex_presence.broker.record import Report, SessionRecord
from codex_presence.broker.redis.activity import SessionActivity
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.records import COUNT_MAX, SEQ_MAX, TIME_MAX, Unreadable, number
from codex_presence.broker.redis.scripts import COUNTS, LEAVE, SNAPSHOT
from codex_presence.broker.redis.team import TeamCheck, team_marks
from codex_presence.broker.store import StoreListener
from codex_presence.broker.team import Team
from codex_presence.broker.tracker import Activity, ActivityTracker

__all__ = ["BEAT", "BOUND", "RedisStore"]

logger = logging.getLogger("codex_presence.broker")

BEAT = 2.0
"""Seconds between a broker's heartbeats in Redis."""
BOUND = 10.0
"""Seconds without a heartbeat after which a broker counts as dead: its counts leave the
roster at the next heartbeat of any other broker (so within ``BOUND + BEAT``)."""

HELD_BACK_MOST = 4096
"""Events about one member held back while their state is read (a round trip's worth);
past it, the link reads everything again."""


@dataclass
class _Load:
    """A snapshot of members added while the broker runs, in flight."""

    names: list[str]
    marker: str
    reply: Any = None
    marked: bool = False
    """Its marker came on the channel: every event after it is later than the snapshot."""


_IDLE = ActivityState.IDLE


class RedisStore:
    """The presence of ``names`` in Redis, through ``link``, mirrored here for reading.

    ``ttl`` is the activity TTL this broker applies to the reports it receives; ``clock``
    (monotonic seconds) counts the mirror's TTLs down. ``beat`` and ``bound`` are the
    broker heartbeat and the time after which a silent broker counts as dead.
    """

    shared = True

    def __init__(
        self,
        link: RedisLink,
        *,
        names: Sequence[str],
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        beat: float = BEAT,
        bound: float = BOUND,
        marks: Mapping[str, str] | None = None,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"the activity TTL must be positive, not {ttl!r}")
        self._link = link
        self._me = link.broker_id
        self._names = tuple(names)
        """The team file's members, in its order."""
        self._known = set(names)
        """The members whose state the mirror holds and follows (the team file's, but for
        those still :attr:`_loading`)."""
        self._loading: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        """Members added while the broker runs whose state is being read: what the channel
        says of them meanwhile, held back (see :meth:`replace_team`)."""
        self._load: _Load | None = None
        """The read of :attr:`_loading` in flight."""
        self._registered: dict[str, int] = {}
        """Each other broker's latest registration (the ``seq`` of its ``b`` event)."""
        self.ttl = ttl
        self._ttl_ms = max(1, round(ttl * 1000))
        self._beat = beat
        self._bound_ms = max(1, round(bound * 1000))
        self._activity = ActivityTracker(ttl=ttl, clock=clock)
        self._refreshed = 0
        """Connections rebuilt in the mirror (:meth:`version`)."""
        self._synced_seq = 0
        self._event_seq = 0
        """The number of the last event on the channel since the resync."""
        self._here: dict[str, int] = {}
        self._there: dict[str, dict[str, int]] = {}
        self._connected: dict[str, int] = {}
        """Each member's count (:attr:`_here` and :attr:`_there` summed) where not 0."""
        self._created: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        """Each member's earliest createdAt and latest lastSeen heard: plain numbers, the
        :class:`Connection` made when read (the times change at every report, a read is
        rarer)."""
        self._unsent: dict[str, int] = {}
        """Members whose count here changed since the last heartbeat -> the latest attach
        time (0: detaches only)."""
        self._flush = anyio.Event()
        self._register_again = False
        self._listener: StoreListener | None = None
        self._counts_script = link.script(COUNTS)
        self._snapshot_script = link.script(SNAPSHOT)
        self._leave_script = link.script(LEAVE)
        self._team = None if marks is None else TeamCheck(link, marks)
        """Each member's :func:`~.team.team_marks`, checked (None: not checked)."""
        self._marks_changed = False
        """The team file changed: its marks are to be written again."""
        self._lost_said: set[str] = set()
        """The keys holding a value the scripts could not read, as last said."""
        link.add_listener(self)
        link.on_echo(self._numbered)
        self._sessions = SessionActivity(
            link,
            tracker=self._activity,
            known=self._known,
            ttl_ms=self._ttl_ms,
            max_sessions=max_sessions,
            touched=self._touched,
            changed=self._changed,
            say_lost=lambda lost: self._say_lost(lost, replaced=True),
        )

    @property
    def sessions_remembered(self) -> int:
        """Sessions the mirror remembers beyond those it holds (bounded: issue 35, item 9)."""
        return self._sessions.remembered

    @property
    def refusing(self) -> str | None:
        return self._link.refusing

    @property
    def link(self) -> RedisLink:
        """The link this store keeps (the notifier's claims share it)."""
        return self._link

    # -- reads: the mirror ---------------------------------------------------------------

    def connection(self, name: str) -> Connection:
        return Connection(
            self._connected.get(name, 0), self._created.get(name, 0), self._seen.get(name, 0)
        )

    def activity(self, name: str) -> ActivityState:
        return self._activity.get(name)

    def activity_entry(self, name: str) -> Activity:
        return self._activity.entry(name)

    def holds(self, name: str, session: str) -> bool:
        """Whether ``name``'s ``session`` is working or blocked (the mirror's TTL resolved)."""
        return self._activity.holds(name, session)

    def record(self, name: str, session: str) -> SessionRecord | None:
        """``name``'s ``session``'s record, as any broker last recorded it."""
        return self._activity.record(name, session)

    def ended_idle(self, name: str, session: str) -> bool:
        """Whether ``name``'s ``session`` ended by a report of idle, through any broker."""
        return self._activity.ended_idle(name, session)

    def take_grace_lapses(self) -> list[tuple[str, str]]:
        """The sessions that lapsed on a grace any broker gave (the mirror's)."""
        return self._activity.take_grace_lapses()

    def subscribers_here(self, name: str) -> int:
        return self._here.get(name, 0)

    def version(self) -> int:
        """The mirror's writes: each member's connection is rebuilt in one place
        (:meth:`_refresh`) and its activity lives in the tracker, which counts its own
        writes and lapses (the lapses due by now resolved first)."""
        self._activity.resolve_due()
        return self._refreshed + self._activity.changes

    def next_lapse(self) -> float | None:
        return self._activity.next_lapse()

    # -- writes ------------------------------------------------------------------------

    def report(self, name: str, report: Report, now_ms: int) -> Coroutine[Any, Any, bool]:
        # The session activity's coroutine itself, not one more awaiting it: ~1,700
        # instructions of every report (issue 32).
        return self._sessions.report(name, report, now_ms)

    def bind(self, name: str, session: str) -> None:
        self._sessions.bind(name, session)

    def release(self, name: str, session: str, grace: float) -> None:
        self._sessions.release(name, session, grace)

    def attach(self, name: str, now_ms: int) -> int:
        self._here[name] = self._here.get(name, 0) + 1
        self._touched(name, now_ms, now_ms)
        self._unsent[name] = now_ms
        self._flush.set()
        return self._refresh(name)

    def detach(self, name: str) -> int:
        count = self._here.get(name, 0) - 1
        if count > 0:
            self._here[name] = count
        else:
            self._here.pop(name, None)
        self._unsent.setdefault(name, 0)
        self._flush.set()
        return self._refresh(name)

    # -- the link ----------------------------------------------------------------------

    async def run(
        self, listener: StoreListener, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._listener = listener
        await self._link.run(task_status=task_status)

    async def resync(self) -> None:
        """Register every count of this broker, then read the whole state (whatever the
        values: one this version cannot read counts as idle)."""
        self._event_seq = 0  # the numbering may have started again
        self._load = None  # the whole team is read here, members just added too
        self._loading.clear()
        self._known.clear()
        self._known.update(self._names)
        self._marks_changed = False
        if self._team is not None:
            await self._team.check(lambda lost: self._say_lost(lost, replaced=True))
        await self._send_counts(full=True)
        seq, brokers, members, lost = await self._link.run_script(
            self._snapshot_script, ["", *self._names]
        )
        self._lost_said.intersection_update(key.decode(errors="replace") for key in lost)
        self._say_lost(lost, replaced=False)
        self._synced_seq = self._sessions.synced_seq = self._read(
            seq, SEQ_MAX, self._link.key("seq")
        )
        self._there = self._brokers_counts(brokers)
        self._registered = dict.fromkeys(self._there, self._synced_seq)
        for name, member in zip(self._names, members, strict=True):
            self._load_member(name, member)
        for name in self._names:
            self._refresh(name)

    def _brokers_counts(self, brokers: list[Any]) -> dict[str, dict[str, int]]:
        """The snapshot's ``[broker, HGETALL c:<broker>, ...]``: the other brokers' counts."""
        there: dict[str, dict[str, int]] = {}
        for i in range(0, len(brokers), 2):
            broker = brokers[i].decode(errors="replace")
            if broker != self._me:
                there[broker] = self._counts(broker, brokers[i + 1])
        return there

    def _load_member(self, name: str, member: list[Any]) -> None:
        """A snapshot's ``[createdAt, lastSeen, sessions]`` of ``name``, into the mirror."""
        created, seen, held = member
        where = self._link.key("m", name)
        self._touched(name, self._read(created, TIME_MAX, where), self._read(seen, TIME_MAX, where))
        self._sessions.load(name, held)

    # -- the team file changing --------------------------------------------------------

    def replace_team(self, team: Team) -> None:
        """The team file changed (read again while the broker runs): its members from now
        on. A member removed leaves the mirror at once (their keys stay in Redis, for the
        brokers still on the old file, and lapse with their TTL). A member added shows
        offline until their state was read (:meth:`_follow_team`, at once in the
        background), which then goes out as a change; meanwhile, what the channel says of
        them is held back. Never waits."""
        names = tuple(m.name for m in team.members)
        wanted = set(names)
        for name in [n for n in self._known if n not in wanted]:
            self._forget(name)
        for name in [n for n in self._loading if n not in wanted]:
            del self._loading[name]
        for name in names:
            if name not in self._known and name not in self._loading:
                self._loading[name] = []
        self._names = names
        if self._team is not None:
            marks = team_marks(team)
            if marks != self._team.marks:
                self._team.marks = marks
                self._marks_changed = True
        if self._loading or self._marks_changed:
            self._flush.set()  # the heartbeat's task does it (a failure is an outage)

    def _forget(self, name: str) -> None:
        self._known.discard(name)
        self._sessions.forget(name)
        for mirrored in (self._connected, self._created, self._seen):
            mirrored.pop(name, None)
        for counts in self._there.values():
            counts.pop(name, None)

    async def _follow_team(self) -> None:
        """Write the team file's new marks, and read the state of the members added (one
        snapshot of them, which publishes a marker on the channel: applied once both its
        reply and its marker came, the events held back that came after the marker
        replayed on top: nothing lost, nothing applied twice, whichever came first)."""
        if self._marks_changed and self._team is not None:
            self._marks_changed = False
            say = lambda lost: self._say_lost(lost, replaced=True)  # noqa: E731
            await self._team.check(say, followed=True)
        if not self._loading or self._load is not None:
            return
        load = self._load = _Load(list(self._loading), secrets.token_hex(8))
        marker = orjson.dumps({"seq": 0, "kind": "l", "broker": self._me, "load": load.marker})
        reply = await self._link.run_script(self._snapshot_script, [marker, *load.names])
        if self._load is load:
            load.reply = reply
            self._loaded()

    def _loaded(self) -> None:
        """Apply the members' snapshot once both its reply and its marker came."""
        load = self._load
        if load is None or load.reply is None or not load.marked:
            return
        self._load = None
        raw_seq, brokers, members, lost = load.reply
        self._say_lost(lost, replaced=False)
        seq = self._read(raw_seq, SEQ_MAX, self._link.key("seq"))
        counts = self._brokers_counts(brokers)
        for name, member in zip(load.names, members, strict=True):
            held_back = self._loading.pop(name, None)
            if held_back is None:
                continue  # removed again meanwhile
            self._known.add(name)
            for broker, there in self._there.items():  # not one pruned since (no ghost)
                if self._registered.get(broker, 0) > seq:
                    continue  # registered since the snapshot: its counts are the later
                count = counts.get(broker, {}).get(name, 0)
                if count:
                    there[name] = count
                else:
                    there.pop(name, None)
            self._load_member(name, member)
            for event_seq, event in held_back:
                if event_seq > seq:
                    self._apply(event_seq, event["kind"], event)
            self._refresh(name)
            self._changed(name)
        if self._loading:
            self._flush.set()  # added while this load was in flight

    def _read(self, value: object, most: int, where: str) -> int:
        """A number read from Redis through the bounded reader; 0 (and said, counted) for
        what no broker writes."""
        try:
            return number(value, most, "a number")
        except Unreadable as exc:
            self._link.dropped(where, str(exc))
            return 0

    def _counts(self, broker: str, flat: list[bytes]) -> dict[str, int]:
        """``HGETALL c:<broker>``'s flat reply as ``name -> count`` (a count no broker
        writes is dropped)."""
        where = self._link.key("c", broker)
        counts = {}
        for i in range(0, len(flat), 2):
            count = self._read(flat[i + 1], COUNT_MAX, where)
            if count:
                counts[flat[i].decode(errors="replace")] = count
        return counts

    def _say_lost(self, lost: list[bytes], *, replaced: bool) -> None:
        """Say, once for each, the keys whose value a script could not read (see
        :mod:`~codex_presence.broker.redis.scripts`): ``replaced`` by a write, or read as
        absent by the snapshot (said again only once a snapshot found the key readable)."""
        for key in dict.fromkeys(raw.decode(errors="replace") for raw in lost):
            if key in self._lost_said:
                if replaced:
                    self._lost_said.discard(key)
                continue
            if not replaced:
                self._lost_said.add(key)
            logger.warning(
                "redis: %s holds a value this broker cannot read (written by hand, or by "
                "another version?): %s",
                key,
                "replaced" if replaced else "read as absent until it is written again",
            )

    async def keep(self) -> None:
        """The heartbeat, carrying the counts that changed (at once when one did)."""
        while True:
            with anyio.move_on_after(self._beat):
                await self._flush.wait()
            self._flush = anyio.Event()
            await self._follow_team()
            await self._send_counts(full=self._register_again)

    async def _send_counts(self, *, full: bool) -> None:
        """The heartbeat: with every count of this broker (``full``: its registration),
        or with those that changed since the last one."""
        here = self._here
        entries: list[tuple[str, int, int, int]]
        if full:
            self._register_again = False
            self._unsent.clear()
            entries = []
            for name in self._names:
                seen = self._seen.get(name, 0)
                if here.get(name) or seen:
                    entries.append((name, here.get(name, 0), self._created.get(name, 0), seen))
        else:
            unsent, self._unsent = self._unsent, {}
            entries = [(name, here.get(name, 0), at, at) for name, at in unsent.items()]
        args: list[Any] = [self._me, self._bound_ms, "1" if full else "0"]
        for entry in entries:
            args.extend(entry)
        known, lost = await self._link.run_script(self._counts_script, args)
        self._say_lost(lost, replaced=True)
        if not known and not full:  # pruned while alive (Redis was away past the bound)
            await self._send_counts(full=True)

    def on_event(self, event: dict[str, Any]) -> None:
        seq, kind = event.get("seq"), event["kind"]
        if not (type(seq) is int and 0 <= seq <= SEQ_MAX):  # (number's own first check)
            seq = number(seq, SEQ_MAX, "an event's seq")
        if kind == "l":  # a snapshot's marker (not numbered): this broker's, or not
            load = self._load
            if load is not None and event.get("load") == load.marker:
                load.marked = True
                self._loaded()
            return
        if seq > self._event_seq:  # (_numbered's own first check: the numbers grow)
            self._event_seq = seq
        elif seq and not self._numbered(seq):  # 0: not numbered (a browser sign-in's end)
            return
        if seq <= self._synced_seq:
            return  # in the snapshot already (or not numbered)
        if kind == "s" and not self._loading:  # most events: a report's
            self._sessions.heard(seq, event)  # which tells the broker of a change
        else:
            self._apply(seq, kind, event)

    def _numbered(self, seq: int) -> bool:
        """The channel brought the event numbered ``seq`` (or its echo, not read again):
        whether the numbers still grow (else the link reads everything again)."""
        if seq <= self._event_seq:
            self._link.reconnect(
                f"the change numbers went back ({seq} after {self._event_seq}): the "
                "team's keys were flushed or deleted (or another deployment uses this "
                "prefix and team: see --redis-prefix); reading them again"
            )
            return False
        self._event_seq = seq
        return True

    def _apply(self, seq: int, kind: str, event: dict[str, Any]) -> None:
        """An event numbered ``seq``, after the snapshot's: into the mirror (held back
        while its member's state is being read)."""
        if kind in ("s", "c") and self._loading:
            name = event.get("name")
            held_back = self._loading.get(name) if isinstance(name, str) else None
            if held_back is not None:
                if len(held_back) >= HELD_BACK_MOST:
                    self._link.reconnect(f"too many events about {name} while reading them")
                held_back.append((seq, event))
                return
        if kind == "s":
            self._sessions.heard(seq, event)  # which tells the broker of a change
        elif kind == "c":
            name, broker = event.get("name"), event.get("broker")
            count = number(event.get("count"), COUNT_MAX, "an event's count")
            created = number(event.get("createdAt"), TIME_MAX, "an event's createdAt")
            seen = number(event.get("lastSeen"), TIME_MAX, "an event's lastSeen")
            if broker == self._me or name not in self._known or not isinstance(broker, str):
                return
            counts = self._there.setdefault(broker, {})
            if count > 0:
                counts[name] = count
            else:
                counts.pop(name, None)
            self._touched(name, created, seen)
            self._recount([name])
        elif kind == "b":
            broker, flat = event.get("broker"), event.get("counts")
            if not isinstance(broker, str) or not isinstance(flat, dict):
                raise Unreadable("a broker's counts that are no object")
            new = {n: number(c, COUNT_MAX, "an event's count") for n, c in flat.items()}
            if broker != self._me:
                old = self._there.get(broker, {})
                self._there[broker] = new
                self._registered[broker] = seq
                self._recount({*old, *new})
        elif kind == "g":
            broker = event.get("broker")
            if broker == self._me:  # another broker took this one for dead
                self._register_again = True
                self._flush.set()
            elif isinstance(broker, str):
                self._registered.pop(broker, None)
                self._recount(self._there.pop(broker, {}))

    async def leave(self) -> None:
        """Stopping cleanly: this broker's counts leave the roster now, not after the
        bound (a rolling restart moves subscribers without counting them twice)."""
        _, lost = await self._link.run_script(self._leave_script, [self._me])
        self._say_lost(lost, replaced=True)

    def on_down(self, reason: str) -> None:
        if self._listener is not None:
            self._listener.store_down(reason)

    def on_back(self) -> None:
        if self._listener is not None:
            self._listener.store_back()

    # -- the mirror --------------------------------------------------------------------

    def _touched(self, name: str, created: int, seen: int) -> None:
        """An event's times of ``name`` merged into the mirror's (at every report: the
        count is unchanged, not summed again)."""
        if seen > self._seen.get(name, 0):
            self._seen[name] = seen
        if created and not 0 < self._created.get(name, 0) <= created:
            self._created[name] = created
        self._refreshed += 1

    def _refresh(self, name: str) -> int:
        """``name``'s count summed again (a count changed here or on another broker)."""
        connected = self._here.get(name, 0)
        for counts in self._there.values():
            connected += counts.get(name, 0)
        if connected:
            self._connected[name] = connected
        else:
            self._connected.pop(name, None)
        self._refreshed += 1
        return connected

    def _recount(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self._known:
                continue
            before = self._connected.get(name, 0)
            if self._refresh(name) != before:
                self._changed(name)

    def _changed(self, name: str) -> None:
        if self._listener is not None:
            self._listener.changed(name)
