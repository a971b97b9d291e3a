"""Agent sessions' activity in Redis, and the subscriptions bound to them: the
:class:`SessionActivity` that :class:`~codex_presence.broker.redis.store.RedisStore` uses.

Every session has the same keys under the team's prefix (the anonymous session, a report
without a session id, is the session ``""``: one schema):

``s:<session>:<name>``
    That session's :class:`~codex_presence.broker.record.SessionRecord` as a JSON object
    (``{"state", "since", "background", "backgroundSince", "agent"}``, those that are 0
    or null left out: :mod:`~.records`), set with ``PX`` = the TTL while the session is
    held (working, blocked, or with a background count). A session that ends idle keeps
    its record (its ``agent``) for :data:`~.scripts.IDLE_KEPT_MS`, out of ``S:<name>``,
    for a later report without ``agent`` to find it; one without an agent is deleted. The
    session id's alphabet has no ``:``, so the name after it is whatever follows.
``S:<name>``
    A sorted set: the member's held sessions, each by when (Redis time, ms) its key
    expires; what the snapshot reads, and what bounds a member's sessions: a report that
    would make more than ``max_sessions`` of them working or blocked is refused
    (:class:`~codex_presence.broker.store.TooManySessions`; the anonymous session is never
    refused).
``h:<broker>``
    A hash: the sessions (``<session>:<name>``) whose subscription is on that broker. When
    another broker prunes that one as dead (the ``g`` event, see :mod:`~.store`), every
    broker that hears it shortens those sessions to the grace (the first one does it and
    deletes the hash), so a dead broker's sessions go when its connection counts go.

Events, on the team's channel and numbered by the same ``seq`` as every other, are JSON
objects: ``{"seq", "kind": "s", "name", "session", "ttl", "createdAt", "lastSeen",
"record"}`` — a session's report, or its TTL shortened to the grace (its subscription
ended). Each is read by :meth:`SessionActivity.heard`, its numbers and record through
:mod:`~.records`: one holding what no broker writes is dropped alone.

The scripts are :func:`~.scripts.report_script`'s and :data:`~.scripts.BINDINGS`; the snapshot
(:data:`~.scripts.SNAPSHOT`) is the store's. A key found holding another type is garbage:
the scripts that write it delete it and start anew, the snapshot skips it.

Binding and releasing never wait (they happen in a stream's ``finally``): they are queued,
latest per session, and sent at once by :meth:`SessionActivity.keep`; after a reconnection
this broker binds all its sessions again.

The mirror keeps each session's latest event number, to apply events in order whichever
way they come (a script's reply, its echo): for the sessions held and, past that, for the
:data:`~codex_presence.broker.tracker.ENDED_KEPT` latest others, so that the ids a member
ever reported do not grow a broker's memory (the in-memory store keeps as many).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

import anyio
import orjson

from codex_presence._wire import SESSION_GRACE
from codex_presence.broker.record import KEEP, Report
from codex_presence.broker.redis import records
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.records import SEQ_MAX, TIME_MAX, TTL_MAX, number
from codex_presence.broker.redis.scripts import BINDINGS, report_script
from codex_presence.broker.store import TooManySessions
from codex_presence.broker.tracker import ENDED_KEPT, ActivityTracker

__all__ = ["SessionActivity"]

logger = logging.getLogger("codex_presence.broker")


class SessionActivity:
    """The sessions of the members in ``known`` (the store's set, which follows the team
    file) in Redis, mirrored into ``tracker`` (the store's), and this broker's bindings.
    ``touched(name, createdAt, lastSeen)`` merges what an event says of a member's times;
    ``changed(name)`` tells the broker to fan a member out; ``say_lost(keys)`` says the
    keys a script found unreadable."""

    def __init__(
        self,
        link: RedisLink,
        *,
        tracker: ActivityTracker,
        known: AbstractSet[str],
        ttl_ms: int,
        max_sessions: int,
        touched: Callable[[str, int, int], None],
        changed: Callable[[str], None],
        say_lost: Callable[[list[bytes]], None],
    ) -> None:
        self._link = link
        self._me = link.broker_id
        self._tracker = tracker
        self._known = known
        self._ttl_ms = ttl_ms
        self._max = max_sessions
        self._grace_ms = round(SESSION_GRACE * 1000)
        """The grace of the latest release (the broker's): a dead broker's sessions get it."""
        self._touched = touched
        self._changed = changed
        self._say_lost = say_lost
        self.synced_seq = 0
        self._seq: dict[tuple[str, str], int] = {}
        """Each session's latest event number applied (bounded: :meth:`_prune`)."""
        self._seq_cap = 2 * ENDED_KEPT
        self._bound: set[tuple[str, str]] = set()
        """The sessions whose subscription is on this broker."""
        self._queued: dict[tuple[str, str], bool] = {}
        """Bindings to send: (name, session) -> bound (else released)."""
        self._dead: set[str] = set()
        """Brokers found dead whose sessions are still to shorten."""
        self._flush = anyio.Event()
        self._report_script = link.script(report_script(ttl_ms, max_sessions))
        self._bindings_script = link.script(BINDINGS)
        link.add_listener(self)

    @property
    def remembered(self) -> int:
        """Sessions whose latest event number the mirror keeps (bounded)."""
        return len(self._seq)

    # -- what the store asks -----------------------------------------------------------

    async def report(self, name: str, report: Report, now_ms: int) -> bool:
        args: list[Any] = [name, report.session, report.state.value, now_ms]
        if report.agent is not KEEP:
            args += (report.background, orjson.dumps(report.agent))
        elif report.background:
            args.append(report.background)
        reply = await self._link.call(
            self._report_script, args, doing="the report was not recorded; send it again"
        )
        if reply is None:
            raise TooManySessions(self._max)
        event, lost, seq = reply
        if lost:
            self._say_lost(lost)
        if not (type(seq) is int and 0 <= seq <= SEQ_MAX):
            seq = number(seq, SEQ_MAX, "a report's seq")
        if seq <= self._seq.get((name, report.session), 0):
            return False  # its echo came first (most often), and was applied: not decoded
        changed = self.heard(seq, orjson.loads(event))
        if changed is not None:  # applied from the reply: its echo need not be read
            self._link.expect_echo(event, seq)
        return bool(changed)

    def bind(self, name: str, session: str) -> None:
        self._bound.add((name, session))
        self._queue((name, session), bound=True)

    def release(self, name: str, session: str, grace: float) -> None:
        self._grace_ms = max(0, round(grace * 1000))
        self._bound.discard((name, session))
        self._queue((name, session), bound=False)

    def _queue(self, key: tuple[str, str], *, bound: bool) -> None:
        self._queued.pop(key, None)  # the latest, last
        self._queued[key] = bound
        self._flush.set()

    def load(self, name: str, held: list[Any]) -> None:
        """A snapshot's sessions of ``name`` (``[session, record, pttl, ...]``): each
        readable one replaces what the mirror held; an unreadable one is said and skipped
        (it counts as idle)."""
        self._tracker.forget_sessions(name)
        for i in range(0, len(held), 3):
            session = held[i].decode(errors="replace")
            pttl = held[i + 2]
            try:
                record = records.record(orjson.loads(held[i + 1]))
            except (records.Unreadable, orjson.JSONDecodeError) as exc:
                self._link.dropped(self._link.key("s", session, name), str(exc))
                continue
            if isinstance(pttl, int) and pttl > 0:
                held_for = min(pttl, self._ttl_ms) / 1000  # a key set by hand: no longer
                self._tracker.put(name, session, record, held_for)

    # -- the link's listener -----------------------------------------------------------

    async def resync(self) -> None:
        """Bind every session of this broker again, and send what waited (the store read
        the sessions in its snapshot)."""
        self._seq.clear()
        self._queued = {key: False for key, bound in self._queued.items() if not bound}
        await self._send(rebind=True)

    async def keep(self) -> None:
        """Send bindings and releases as they come."""
        while True:
            await self._flush.wait()
            self._flush = anyio.Event()
            await self._send(rebind=False)

    async def _send(self, *, rebind: bool) -> None:
        queued, self._queued = self._queued, {}
        dead, self._dead = self._dead, set()
        args: list[Any] = [self._me, self._grace_ms]
        if rebind:
            args.extend(("B", "", ""))
            for name, session in self._bound:
                args.extend(("b", name, session))
        for (name, session), bound in queued.items():
            if not (rebind and bound):
                args.extend(("b" if bound else "r", name, session))
        for broker in dead:
            args.extend(("d", broker, ""))
        if len(args) > 2:
            _, lost = await self._link.run_script(self._bindings_script, args)
            if lost:
                self._say_lost(lost)

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("kind") == "g":
            broker = event.get("broker")
            if broker == self._me:  # taken for dead: shortened; bind again
                self._queue_rebind()
            elif isinstance(broker, str):
                seq = number(event.get("seq"), SEQ_MAX, "an event's seq")
                if seq > self.synced_seq:
                    self._dead.add(broker)
                    self._flush.set()

    def _queue_rebind(self) -> None:
        for key in self._bound:
            self._queued[key] = True
        self._flush.set()

    def on_down(self, reason: str) -> None:
        """The store says it."""

    def on_back(self) -> None:
        """The store says it."""

    async def leave(self) -> None:
        """Streams end before the link: their releases went out with :meth:`keep`."""

    # -- the mirror --------------------------------------------------------------------

    def heard(self, seq: int, data: dict[str, Any]) -> bool | None:
        """An ``s`` event numbered ``seq`` (a script's reply, or from the channel, ours or
        another broker's), applied unless a later one for that session was: whether the
        member's activity shown changed (None: nothing applied). It is read in full only
        when it is new for its session (each report comes twice, its script's reply and its
        echo, whichever is first; the later event applied carried times at least as wide);
        one holding what no broker writes raises :class:`~.records.Unreadable`. A
        shortened TTL (a release's grace) wakes the fan-out too, for it to see the lapse."""
        get = data.get
        name, session = get("name"), get("session")
        if type(name) is not str or type(session) is not str:
            raise records.Unreadable("a session event without a name or a session")
        key = (name, session)
        if seq <= self._seq.get(key, 0) or name not in self._known:
            return None
        ttl, created, seen, stored = get("ttl"), get("createdAt"), get("lastSeen"), get("record")
        if not (  # what every event a broker wrote holds: read at once (issue 32's cost)
            type(ttl) is int
            and type(created) is int
            and type(seen) is int
            and 0 <= ttl <= TTL_MAX
            and 0 <= created <= TIME_MAX
            and 0 <= seen <= TIME_MAX
        ):
            ttl = number(ttl, TTL_MAX, "an event's ttl")
            created = number(created, TIME_MAX, "an event's createdAt")
            seen = number(seen, TIME_MAX, "an event's lastSeen")
        checked = None
        if type(stored) is dict and stored.get("agent") is not None:
            held = self._tracker.record(name, session)  # its agent, checked when it came
            checked = None if held is None else held.agent
        record = records.record(stored, checked)
        self._touched(name, created, seen)
        self._seq.pop(key, None)  # the latest, last
        self._seq[key] = seq
        if len(self._seq) > self._seq_cap:
            self._prune()
        shortened = ttl < self._ttl_ms
        changed = self._tracker.put(
            name,
            session,
            record,
            (ttl if shortened else self._ttl_ms) / 1000,  # a forged one outlives no TTL of ours
            grace=shortened,  # a report holds the TTL; a release, its grace
        )
        if changed or shortened:
            self._changed(name)
        return changed

    def forget(self, name: str) -> None:
        """``name`` left the team: the mirror forgets their sessions."""
        self._tracker.forget_sessions(name)
        for key in [key for key in self._seq if key[0] == name]:
            del self._seq[key]

    def _prune(self) -> None:
        """Keep the event numbers of the sessions held, and of the :data:`ENDED_KEPT`
        latest others: an older one's next event is applied as new (its number is later
        than any this broker forgot, since the numbers only grow)."""
        holds = self._tracker.holds
        others = [key for key in self._seq if not holds(*key)]
        for key in others[: max(0, len(others) - ENDED_KEPT)]:
            del self._seq[key]
        self._seq_cap = max(2 * ENDED_KEPT, 2 * len(self._seq))
