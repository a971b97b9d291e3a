"""The activity signal: keyed handles in, one idle/working/blocked state out.

This module owns the design's derivation rule and nothing else::

    blocked ? 'blocked' : (turn_active or tool_inflight) ? 'working' : 'idle'

It is sans-I/O in the manner of h11: it knows no pipes, sockets or clocks. A feeder
(a client's mapping, :mod:`codex_presence.core.feeder`) opens and closes *handles* — a
turn, a tool, a human-facing request — each under a key of its choosing, then calls
:meth:`ActivitySignal.commit` with the cause, and gets back the :class:`Transition` if
the derived state changed. Handles are sets, not counters, so opening one twice or
closing one that is not open can never drive a count negative or leave it stuck: such
calls are absorbed and tallied in :attr:`anomalies`.

Apart from the state, the signal keeps **background work**: keyed handles for the commands
and tasks a session left running (a command that outlives its interrupted turn, a shell
started in the background). They never make the state working or blocked (idle still means
"nothing needs the agent or a person"); their count travels on the :class:`Transition`, and
:meth:`ActivitySignal.commit` also returns one when only that count changed (``previous`` is
then ``state``: :attr:`Transition.changes_state` tells them apart). Background handles live
apart from the three kinds: closing a scope's handles leaves them open, because outliving
their turn is what they are for; the feeder closes them by their own rules.

Each blocker may carry what it waits on (:class:`Waits`: the kind, the tool, the command,
as the feeder read them from its source), and the feeder may note where its agent works
and which version it is (:meth:`ActivitySignal.note`: :class:`AgentFacts`). A transition
carries both: the waits of the newest blocker that has them while blocked (blockers
without any keep what the blocked spell last waited on, or say ``other``), and the
facts; :meth:`ActivitySignal.commit` returns one too when only they changed
(:attr:`Transition.changes_agent`). They never change the state.

The state itself, :class:`ActivityState`, is the wire's vocabulary (:mod:`codex_presence._wire`),
re-exported here.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field, replace

from codex_presence._wire import MAX_BACKGROUND, ActivityState

__all__ = [
    "MAX_BACKGROUND",
    "MAX_WAITS_TEXT",
    "ActivitySignal",
    "ActivityState",
    "AgentFacts",
    "HandleKind",
    "Transition",
    "Waits",
]

MAX_WAITS_TEXT = 240
"""Characters of a blocker's tool or command kept (the runner cuts what it shares shorter)."""


class HandleKind(enum.Enum):
    """The three sources of the derived state."""

    TURN = "turn_active"
    TOOL = "tool_inflight"
    BLOCK = "blocked"


@dataclass(frozen=True, slots=True)
class Waits:
    """What a blocker waits on, as the feeder read it: ``kind`` one of ``command``,
    ``file_change``, ``question``, ``permission``, ``elicitation``, ``other``; the
    ``tool`` that asks; ``command`` the command line (or argument vector) to approve, or the
    question, file or message that says what is asked. Raw: what leaves the machine is the
    runner's to decide (:mod:`codex_presence.core.agent_record`)."""

    kind: str = "other"
    tool: str | None = None
    command: str | tuple[str, ...] | None = None

    @classmethod
    def of(cls, kind: str, tool: object = None, command: object = None) -> Waits:
        """A :class:`Waits` from whatever the source said: a value that is not text (or a
        list of text, for a command) is left out, and text is cut to
        :data:`MAX_WAITS_TEXT` characters."""
        return cls(kind, _text(tool), _command(command))


def _text(value: object) -> str | None:
    return value[:MAX_WAITS_TEXT] if isinstance(value, str) and value else None


def _command(value: object) -> str | tuple[str, ...] | None:
    if isinstance(value, list) and value and all(isinstance(word, str) for word in value):
        return tuple(word[:MAX_WAITS_TEXT] for word in value[:32])
    return _text(value)


@dataclass(frozen=True, slots=True)
class AgentFacts:
    """What the feeder read about its agent, apart from the state: the version it reports
    and the directory it works in (both None until the source says)."""

    version: str | None = None
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """One change of the derived state, with the message that caused it."""

    previous: ActivityState
    state: ActivityState
    cause: str
    background: int = 0
    """Commands and tasks the session left running, after this change (never part of the
    state: an idle member may have some)."""
    previous_background: int = 0
    passing: bool = False
    """The feeder knows this state is one its source passes through on the way to another
    within tens of milliseconds (between a person's "no, stop" and the end of the turn): a
    reporter may wait a moment for the next one rather than show it."""

    waits: Waits | None = None
    """What the member waits on, while blocked (None otherwise)."""
    previous_waits: Waits | None = None
    facts: AgentFacts = AgentFacts()
    previous_facts: AgentFacts = AgentFacts()

    @property
    def changes_agent(self) -> bool:
        """Whether what the member waits on, or the facts about its agent, changed."""
        return self.waits != self.previous_waits or self.facts != self.previous_facts

    @property
    def changes_state(self) -> bool:
        """False when only the background count (or the agent's waits or facts) changed."""
        return self.previous is not self.state

    @property
    def changes_background(self) -> bool:
        return self.background != self.previous_background


# MAX_BACKGROUND (the wire's): background handles a signal keeps at most (the oldest
# forgotten first), so that a count never exceeds what a broker takes.

HandleKey = tuple[Hashable, ...]
"""A handle's key. By convention it starts with its scope (a thread id), so that a whole
scope can be closed at once with :meth:`ActivitySignal.close_scope`."""


@dataclass(slots=True)
class Anomalies:
    """Calls that were absorbed instead of corrupting the counts."""

    double_open: int = 0
    close_unknown: int = 0


@dataclass(slots=True)
class ActivitySignal:
    """turn_active + tool_inflight + blocked, each a set of keyed handles."""

    _handles: dict[HandleKind, set[HandleKey]] = field(
        default_factory=lambda: {kind: set() for kind in HandleKind}
    )
    _committed: ActivityState = ActivityState.IDLE
    anomalies: Anomalies = field(default_factory=Anomalies)
    _background: dict[HandleKey, None] = field(default_factory=dict)
    """Background handles, oldest first (bounded: :data:`MAX_BACKGROUND`)."""
    _committed_background: int = 0
    _waits: dict[HandleKey, Waits] = field(default_factory=dict)
    """What the open blockers that said so wait on, oldest first."""
    _committed_waits: Waits | None = None
    facts: AgentFacts = AgentFacts()
    """The latest facts the feeder noted (:meth:`note`)."""
    _committed_facts: AgentFacts = AgentFacts()

    # -- reading -------------------------------------------------------------------------

    @property
    def state(self) -> ActivityState:
        """The state derived from the handles open right now (committed or not)."""
        if self._handles[HandleKind.BLOCK]:
            return ActivityState.BLOCKED
        if self._handles[HandleKind.TURN] or self._handles[HandleKind.TOOL]:
            return ActivityState.WORKING
        return ActivityState.IDLE

    def count(self, kind: HandleKind) -> int:
        """How many handles of this kind are open (never negative, by construction)."""
        return len(self._handles[kind])

    def is_open(self, kind: HandleKind, key: HandleKey) -> bool:
        return key in self._handles[kind]

    def keys(self, kind: HandleKind) -> Iterator[HandleKey]:
        return iter(tuple(self._handles[kind]))

    @property
    def background(self) -> int:
        """How many background handles are open right now (committed or not)."""
        return len(self._background)

    def is_background(self, key: HandleKey) -> bool:
        return key in self._background

    def background_keys(self) -> Iterator[HandleKey]:
        return iter(tuple(self._background))

    def subscopes(self, scope: Hashable) -> set[Hashable]:
        """The second element of every open key that starts with ``scope``, of any kind
        (by the keys' convention: the turns of a thread)."""
        return {
            key[1]
            for handles in self._handles.values()
            for key in handles
            if key[0] == scope and len(key) > 1
        }

    # -- writing -------------------------------------------------------------------------

    def open(self, kind: HandleKind, key: HandleKey, waits: Waits | None = None) -> None:
        """Open a handle; a blocker may say what it waits on (``waits``)."""
        handles = self._handles[kind]
        if key in handles:
            self.anomalies.double_open += 1
        handles.add(key)
        if kind is HandleKind.BLOCK:
            self._waits.pop(key, None)  # the newest last
            if waits is not None:
                self._waits[key] = waits

    def tell_waits(self, key: HandleKey, waits: Waits) -> None:
        """An open blocker that said nothing of what it waits on is now known to wait on
        ``waits`` (its source said so later); a closed one, or one that said, is left."""
        if key in self._handles[HandleKind.BLOCK] and key not in self._waits:
            self._waits[key] = waits

    def note(self, *, version: object = None, cwd: object = None) -> None:
        """The source said which version its agent is or where it works (a value that is
        not text says nothing and changes nothing)."""
        facts = self.facts
        if isinstance(version, str) and version:
            facts = replace(facts, version=version[:MAX_WAITS_TEXT])
        if isinstance(cwd, str) and cwd:
            facts = replace(facts, cwd=cwd[:4096])
        self.facts = facts

    @property
    def waits(self) -> Waits | None:
        """What the member waits on right now: the newest open blocker's waits (``other``
        when no open blocker said), or None when not blocked."""
        blockers = self._handles[HandleKind.BLOCK]
        if not blockers:
            return None
        for key in reversed(tuple(self._waits)):
            if key in blockers:
                return self._waits[key]
        return _UNSAID

    def close(self, kind: HandleKind, key: HandleKey) -> bool:
        """Close one handle; returns whether it was open."""
        try:
            self._handles[kind].remove(key)
        except KeyError:
            self.anomalies.close_unknown += 1
            return False
        return True

    def close_scope(
        self, *prefix: Hashable, kinds: tuple[HandleKind, ...] = tuple(HandleKind)
    ) -> int:
        """Close every handle whose key starts with ``prefix``; returns how many closed."""
        n = len(prefix)
        closed = 0
        for kind in kinds:
            handles = self._handles[kind]
            doomed = [key for key in handles if key[:n] == prefix]
            handles.difference_update(doomed)
            closed += len(doomed)
        return closed

    def close_all(self) -> None:
        """Close every handle of the three kinds (background handles stay: see
        :meth:`close_all_background`)."""
        for handles in self._handles.values():
            handles.clear()

    def open_background(self, key: HandleKey) -> None:
        """A command or task left running; the oldest is forgotten past :data:`MAX_BACKGROUND`."""
        if key in self._background:
            self.anomalies.double_open += 1
            return
        self._background[key] = None
        while len(self._background) > MAX_BACKGROUND:
            del self._background[next(iter(self._background))]

    def close_background(self, key: HandleKey) -> bool:
        """Close one background handle; returns whether it was open (no anomaly if not:
        feeders close them by several rules, and more than one may apply)."""
        return self._background.pop(key, 0) is None

    def close_background_scope(self, *prefix: Hashable) -> int:
        n = len(prefix)
        doomed = [key for key in self._background if key[:n] == prefix]
        for key in doomed:
            del self._background[key]
        return len(doomed)

    def close_all_background(self) -> None:
        self._background.clear()

    def commit(self, cause: str) -> Transition | None:
        """Publish the derived state, the background count, the waits and the facts;
        returns the transition if any differs from the last."""
        blockers = self._handles[HandleKind.BLOCK]
        if len(self._waits) > len(blockers):  # forget the waits of closed blockers
            self._waits = {key: w for key, w in self._waits.items() if key in blockers}
        state = self.state
        background = len(self._background)
        waits = self.waits
        if waits is _UNSAID and self._committed_waits is not None:
            waits = self._committed_waits  # what the spell waited on, until a blocker says
        if (
            state is self._committed
            and background == self._committed_background
            and waits == self._committed_waits
            and self.facts == self._committed_facts
        ):
            return None
        transition = Transition(
            previous=self._committed,
            state=state,
            cause=cause,
            background=background,
            previous_background=self._committed_background,
            waits=waits,
            previous_waits=self._committed_waits,
            facts=self.facts,
            previous_facts=self._committed_facts,
        )
        self._committed = state
        self._committed_background = background
        self._committed_waits = waits
        self._committed_facts = self.facts
        return transition


_UNSAID = Waits()
"""A blocker's waits when it did not say: ``other``."""
