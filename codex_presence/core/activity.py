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

The state itself, :class:`ActivityState`, is the wire's vocabulary (:mod:`codex_presence._wire`),
re-exported here.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field

from codex_presence._wire import MAX_BACKGROUND, ActivityState

__all__ = ["MAX_BACKGROUND", "ActivitySignal", "ActivityState", "HandleKind", "Transition"]


class HandleKind(enum.Enum):
    """The three sources of the derived state."""

    TURN = "turn_active"
    TOOL = "tool_inflight"
    BLOCK = "blocked"


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

    @property
    def changes_state(self) -> bool:
        """False when only the background count changed."""
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

    def open(self, kind: HandleKind, key: HandleKey) -> None:
        handles = self._handles[kind]
        if key in handles:
            self.anomalies.double_open += 1
        handles.add(key)

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
        """Publish the derived state and the background count; returns the transition if
        either differs from the last."""
        state = self.state
        background = len(self._background)
        if state is self._committed and background == self._committed_background:
            return None
        transition = Transition(
            previous=self._committed,
            state=state,
            cause=cause,
            background=background,
            previous_background=self._committed_background,
        )
        self._committed = state
        self._committed_background = background
        return transition
