"""Who is told what, and when: the broker's notification policy, sans-I/O.

"Blocked" exists so that a person looks; a notification reaches that person where they are
(issue 25). The policy is fed each member's activity as the broker shows it (the state and
since when it holds, as ``GET /roster`` says), and a session's death when the broker sees
one, and answers, for a given ``now``, which notices are due and until when nothing is:

* **blocked** ("needs input"): a member blocked for at least a target's ``after`` seconds is
  announced once per blocked spell (an *episode*: one ``activitySince``), so an approval
  answered at once pings nobody. With ``repeat`` > 0, a spell that goes on is announced
  again every ``repeat`` seconds, never more often: an hour's wait is not a minute's spam.
  Reminders fall on a grid from the spell's start (so every broker names them alike); a
  slot less than ``repeat`` after the notice before it is skipped, and a policy that first
  sees a spell late (a broker restarted) announces the latest slot only, never the missed.
* **answered** ("back to work", or "no longer needs input" when the member went idle): the
  end of a spell that was announced to that target, for the targets that ask for it; a
  spell answered within the delay was never announced, so its end is not either.
* **lost** ("session lost"): a member whose session died while working or blocked, after
  the target's ``after`` seconds, as "needs input": a member back at work or blocked again
  by then (a runner restarted) pings nobody. The broker calls :meth:`NotifyPolicy.lost`
  (through the notifier) when a session bound to a subscription lapses by the death grace
  (:mod:`codex_presence.broker.state`); its key is the session's id and the start of the
  state it died in, which every broker sees alike. A member whose runners die over and
  over (or who fakes their deaths) gets at most :data:`LOST_PER_MINUTE` such notices per
  target in any minute; the rest are dropped, and counted (:attr:`NotifyPolicy.dropped`).

Each target picks its members (all, or named) and its events. Every notice carries a
:attr:`Notice.key` made of what every broker of a team sees alike (the target's id, the
member, the event, the spell's start, the reminder's number), so that brokers sharing
Redis claim each event under the same name and send it once.

A blocked notice says which agent waits on what, where, when the broker lists the
member's agents (issue 32): "bob · claude in api-server: approve `make`", in the words of
:mod:`codex_presence.core.agent_record` (the blocked agent that has waited longest; the
roster's ``agents`` as :meth:`NotifyPolicy.observe` is given them). A runner that shares
nothing (``--share none``) is told by its state alone, as before.

Members run with ``--no-trace`` are never announced: their runner reports no activity, so
the broker never sees them blocked (or working); it cannot tell them apart from an idle
member, and does not need to.

:class:`NotifyPolicy` knows no sockets or clocks: ``now`` (unix seconds) is passed in, as in
:mod:`codex_presence.core.report_policy`. The I/O shell is
:mod:`codex_presence.broker.notify.notifier`.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from codex_presence._wire import ActivityState, printable
from codex_presence.core.agent_record import agent_words, described, waits_words

__all__ = [
    "DEFAULT_AFTER",
    "LOST_PER_MINUTE",
    "Due",
    "Notice",
    "NotifyEvent",
    "NotifyPolicy",
    "Rule",
    "Wait",
    "event_words",
    "message",
    "waiting_words",
]

LOST_PER_MINUTE = 3
""""Session lost" notices per member and target in any 60 s, at most: one member faking
runner deaths made a broker send 316 a minute (872 with no delay)."""
DEFAULT_AFTER = 60.0
"""Seconds a member is blocked before a target hears of it: long enough for an approval
answered at once (or a prompt answered over a coffee) to ping nobody."""


class NotifyEvent(enum.StrEnum):
    """What a target can ask to be told of (the team file's ``on = [...]``)."""

    BLOCKED = "blocked"
    """A member needs input, for at least the target's delay."""
    ANSWERED = "answered"
    """An announced spell of blocked ended (answered, or the member went idle)."""
    LOST = "lost"
    """A member's session died while working or blocked."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What one target wants."""

    after: float = DEFAULT_AFTER
    """Seconds blocked before the first notice."""
    members: frozenset[str] | None = None
    """Whose activity (None: every member's)."""
    on: frozenset[NotifyEvent] = frozenset({NotifyEvent.BLOCKED})
    repeat: float = 0.0
    """Seconds between reminders while a spell goes on (0: none, once per spell)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.after) and self.after >= 0):
            raise ValueError(f"'after' must be a number of seconds >= 0, not {self.after!r}")
        if not (math.isfinite(self.repeat) and self.repeat >= 0):
            raise ValueError(f"'repeat' must be a number of seconds >= 0, not {self.repeat!r}")

    def wants(self, member: str, event: NotifyEvent) -> bool:
        return event in self.on and (self.members is None or member in self.members)


@dataclass(frozen=True, slots=True)
class Notice:
    """Tell target number ``target`` that ``member`` ... (``event``)."""

    target: int
    member: str
    event: NotifyEvent
    since_ms: int
    """Blocked: since when; answered: when the spell ended; lost: when the death was seen
    (unix ms)."""
    state: ActivityState
    """The member's state the notice speaks of: blocked; after a spell, what followed (so
    the words can say "back to work" or "no longer needs input"); lost: the state it died
    in."""
    key: str
    """The event's name, the same on every broker of the team (the claim's key)."""
    blocked_since_ms: int | None = None
    """For ``answered``: when the spell began."""
    state_since_ms: int | None = None
    """For ``lost``: since when the session was in the state it died in (unix ms)."""
    waiting: str | None = None
    """For ``blocked`` (and the ``answered`` that ends its wait): which agent waits on
    what, where ("claude in api-server: approve `make`"), when the broker's roster said."""


@dataclass(frozen=True, slots=True)
class Due:
    """Deliver these now."""

    notices: tuple[Notice, ...]


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing is due before ``until`` (unix seconds; None: until something changes)."""

    until: float | None


def event_words(notice: Notice) -> str:
    """What happened, in a few words: "needs input", "back to work", ..."""
    if notice.event is NotifyEvent.BLOCKED:
        return "needs input"
    if notice.event is NotifyEvent.ANSWERED:
        if notice.state is ActivityState.WORKING:
            return "back to work"
        return "no longer needs input"
    return "session lost"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _clock_time(ms: int) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(ms / 1000))


def message(notice: Notice, *, team: str, now: float, link: str | None = None) -> tuple[str, str]:
    """A notice's title and body: who, what, since when (and for how long as of ``now``),
    the team, and the roster page's address when the broker knows it. The state only,
    never anything of the session's content, as every other surface."""
    who, what = notice.member, event_words(notice)
    title = f"{who}: {what}"
    if notice.event is NotifyEvent.BLOCKED:
        held = _duration(now - notice.since_ms / 1000)
        body = f"{who} needs input since {_clock_time(notice.since_ms)} ({held})"
        if notice.waiting:
            title = f"{who} · {notice.waiting}"
            body = f"{title}: {what} since {_clock_time(notice.since_ms)} ({held})"
    elif notice.event is NotifyEvent.ANSWERED:
        began = notice.blocked_since_ms if notice.blocked_since_ms is not None else 0
        waited = _duration((notice.since_ms - began) / 1000)
        verb = f"is {what}" if notice.state is ActivityState.WORKING else what
        body = f"{who} {verb} since {_clock_time(notice.since_ms)} (waited {waited})"
        if notice.waiting:  # which agent's wait it was
            body += f"; {notice.waiting}"
    else:
        body = (
            f"{who}'s session was lost at {_clock_time(notice.since_ms)} while {notice.state.value}"
        )
        if notice.state_since_ms is not None:
            held = _duration((notice.since_ms - notice.state_since_ms) / 1000)
            body += f" (since {_clock_time(notice.state_since_ms)}, {held})"
    body += f" - team {team}"
    if link:
        body += f"\n{link}"
    return title, body


def waiting_words(agents: object) -> str | None:
    """``claude in api-server: approve `make``` for the blocked agent (of the roster's
    ``agents``) that has waited longest, or None when none that said what it is (a
    ``client``: see :func:`~codex_presence.core.agent_record.described`) is blocked."""
    if not isinstance(agents, list):
        return None
    blocked = [
        a for a in agents if isinstance(a, dict) and a.get("state") == "blocked" and described(a)
    ]
    if not blocked:
        return None

    def since(agent: dict[str, object]) -> int:
        value = agent.get("since")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    first = min(blocked, key=since)
    return printable(f"{agent_words(first)}: {waits_words(first.get('waits'))}")


@dataclass(slots=True)
class _Spell:
    since_ms: int
    waiting: str | None = None
    announced: dict[int, int] = field(default_factory=dict)
    """Target -> the number of the next reminder slot (0: nothing announced yet)."""


class NotifyPolicy:
    """Every target's rules over every member's activity. ``target_ids`` name the targets
    in the event keys (stable across brokers: derived from the target, not its position)."""

    def __init__(self, rules: Sequence[Rule], target_ids: Sequence[str] | None = None) -> None:
        self.rules = tuple(rules)
        self.target_ids = (
            tuple(target_ids) if target_ids is not None else tuple(map(str, range(len(rules))))
        )
        if len(self.target_ids) != len(self.rules):
            raise ValueError("one id per target")
        self._spells: dict[str, _Spell] = {}
        self._pending: list[Notice] = []
        self._deaths: list[tuple[float, Notice]] = []
        """"Session lost" notices waiting for their target's delay: (when due, notice)."""
        self._told_lost: dict[tuple[str, int], list[float]] = {}
        """(member, target) -> when its latest "session lost" notices were due (the last
        minute's, for :data:`LOST_PER_MINUTE`)."""
        self.dropped: dict[str, int] = {}
        """Member -> "session lost" notices dropped past the limit (the notifier says so)."""
        self._said: dict[str, tuple[int, set[str]]] = {}
        """Member -> the episode of its latest notices and their keys: a spell that ends and
        starts again within its millisecond (one ``activitySince``) is the same episode,
        and nothing of it is said twice."""

    # -- what the broker tells ---------------------------------------------------------

    def observe(
        self,
        member: str,
        state: ActivityState,
        since_ms: int | None,
        now: float,
        agents: object = None,
    ) -> None:
        """``member``'s activity is ``state``, holding since ``since_ms`` (None when idle),
        as of ``now``, with the roster's ``agents`` when the broker lists them (what a
        blocked notice says waits). The same state and start again changes nothing but
        what waits."""
        if state is not ActivityState.IDLE and since_ms is not None and self._deaths:
            # back at work (or blocked again) since a death: that death pings nobody
            self._deaths = [
                (at, n) for at, n in self._deaths if n.member != member or n.since_ms > since_ms
            ]
        spell = self._spells.get(member)
        if state is ActivityState.BLOCKED and since_ms is not None:
            waiting = waiting_words(agents)
            if spell is not None:
                # Still blocked: the same wait, whatever its start now says. With several
                # agents, the member's since is the earliest of those blocked now: when
                # the first of two waiting agents is answered it moves to the second's,
                # while the member never stopped waiting (issue 34).
                spell.waiting = waiting or spell.waiting
                return
            self._spells[member] = _Spell(since_ms, waiting)
            return
        if spell is not None:
            del self._spells[member]
            # The wait ended now, or when the new state began if that was later than the
            # wait's start: an agent working since before another one blocked says nothing
            # of when the wait ended (issue 34: "back to work since <its start>, waited 0 s").
            if since_ms is not None and since_ms >= spell.since_ms:
                ended = since_ms
            else:
                ended = max(round(now * 1000), spell.since_ms)
            self._end(member, spell, state, ended)

    def lost(
        self,
        member: str,
        state: ActivityState,
        at_ms: int,
        *,
        since_ms: int | None = None,
        session: str | None = None,
    ) -> None:
        """``member``'s session died at ``at_ms`` while in ``state``, held since
        ``since_ms``. Only a death while working or blocked is news. The event's key is
        ``session`` and ``since_ms`` when given (what every broker sees alike: the broker
        that saw the death and one that restarted name it the same), else ``at_ms``.

        A death ends the member's blocked spell without an "answered" (the runner did not
        answer: it died). Another session still blocked starts it again at the broker's
        next :meth:`observe`, under the same keys, so nothing of it is said twice."""
        self._spells.pop(member, None)
        if state is ActivityState.IDLE:
            return
        episode = f"{session}.{since_ms}" if session is not None and since_ms is not None else at_ms
        for target, rule in enumerate(self.rules):
            if rule.wants(member, NotifyEvent.LOST):
                key = self._key(target, member, NotifyEvent.LOST, episode, 0)
                self._deaths.append(
                    (
                        at_ms / 1000 + rule.after,
                        Notice(
                            target,
                            member,
                            NotifyEvent.LOST,
                            at_ms,
                            state,
                            key,
                            state_since_ms=since_ms,
                        ),
                    )
                )

    def lapsed(self, member: str) -> None:
        """A session of ``member`` lapsed on its death grace, and another broker (the one
        that gave it) tells of the death: the blocked spell ends, unanswered, as at
        :meth:`lost`, and nothing is said here. Another session still blocked starts it
        again at the next :meth:`observe`, under the same keys."""
        self._spells.pop(member, None)

    def forget(self, names: Iterable[str]) -> None:
        """Drop what is known of ``names`` without a word (not members any more)."""
        for name in names:
            self._spells.pop(name, None)
            self._said.pop(name, None)

    def blocked_since(self, member: str) -> int | None:
        """Since when (unix ms) ``member`` is blocked as far as the policy knows."""
        spell = self._spells.get(member)
        return None if spell is None else spell.since_ms

    # -- what to do --------------------------------------------------------------------

    def next_action(self, now: float) -> Due | Wait:
        """The notices due at ``now`` (each returned once), or until when none is."""
        due, self._pending = self._pending, []
        soonest: float | None = None
        waiting: list[tuple[float, Notice]] = []
        for at, notice in self._deaths:
            if now < at:
                waiting.append((at, notice))
                soonest = at if soonest is None else min(soonest, at)
            elif self._within_limit(notice, now):
                due.append(notice)
            else:
                self.dropped[notice.member] = self.dropped.get(notice.member, 0) + 1
        self._deaths = waiting
        for member, spell in self._spells.items():
            start = spell.since_ms / 1000
            for target, rule in enumerate(self.rules):
                if not rule.wants(member, NotifyEvent.BLOCKED):
                    continue
                slot = spell.announced.get(target, 0)
                at = start + rule.after + slot * rule.repeat
                if slot > 0 and rule.repeat <= 0:
                    continue  # announced, and no reminders
                if now < at:
                    soonest = at if soonest is None else min(soonest, at)
                    continue
                if rule.repeat > 0:  # the latest slot that has come, never the missed ones
                    slot = max(slot, math.floor((now - start - rule.after) / rule.repeat))
                key = self._key(target, member, NotifyEvent.BLOCKED, spell.since_ms, slot)
                if self._first_time(member, spell.since_ms, key):
                    due.append(
                        Notice(
                            target,
                            member,
                            NotifyEvent.BLOCKED,
                            spell.since_ms,
                            ActivityState.BLOCKED,
                            key,
                            waiting=spell.waiting,
                        )
                    )
                if rule.repeat > 0:  # the next slot at least ``repeat`` from now
                    gap = (now + rule.repeat - start - rule.after) / rule.repeat
                    slot = max(slot + 1, math.ceil(gap - 1e-9))
                    following = start + rule.after + slot * rule.repeat
                    soonest = following if soonest is None else min(soonest, following)
                spell.announced[target] = slot + 1 if rule.repeat <= 0 else slot
        if due:
            return Due(tuple(due))
        return Wait(soonest)

    # -- inside ------------------------------------------------------------------------

    def _end(self, member: str, spell: _Spell, state: ActivityState, at_ms: int) -> None:
        for target, slot in spell.announced.items():
            if slot > 0 and self.rules[target].wants(member, NotifyEvent.ANSWERED):
                key = self._key(target, member, NotifyEvent.ANSWERED, spell.since_ms, 0)
                if not self._first_time(member, spell.since_ms, key):
                    continue
                self._pending.append(
                    Notice(
                        target,
                        member,
                        NotifyEvent.ANSWERED,
                        at_ms,
                        state,
                        key,
                        blocked_since_ms=spell.since_ms,
                        waiting=spell.waiting,
                    )
                )

    def _within_limit(self, notice: Notice, now: float) -> bool:
        """Whether ``notice`` (a death) is within its member's :data:`LOST_PER_MINUTE` for
        its target; counted if so."""
        told = self._told_lost.setdefault((notice.member, notice.target), [])
        told[:] = [t for t in told if now - t < 60]
        if len(told) >= LOST_PER_MINUTE:
            return False
        told.append(now)
        return True

    def _first_time(self, member: str, episode: int, key: str) -> bool:
        """Whether ``key`` is news for ``member`` (one episode's keys are kept at a time)."""
        said = self._said.get(member)
        if said is None or said[0] != episode:
            said = self._said[member] = (episode, set())
        if key in said[1]:
            return False
        said[1].add(key)
        return True

    def _key(self, target: int, member: str, event: NotifyEvent, episode: int | str, n: int) -> str:
        return f"{self.target_ids[target]}:{member}:{event.value}:{episode}:{n}"
