"""One agent session as the broker carries it, from the report to the roster: the
:class:`Report` a runner sent (parsed), and the :class:`SessionRecord` every store keeps
of the session it is about.

A member may run several agent sessions at once; each report names its session (or none:
the anonymous session, :data:`ANONYMOUS`, a session like the others). What the broker
knows of a session is one record with named fields: its state and since when it holds,
its background count and since when it has one, and the ``agent`` object the runner
reported (client, version, host, project, what it waits on: AGENT-RECORD), kept whole and
never interpreted. The memory store's tracker (:mod:`~.tracker`) holds these records; the
Redis store keeps the same fields as a JSON object under the session's key and in its
events (:mod:`~.redis.records`), and each roster entry lists them (:meth:`SessionRecord.entry`).

A new per-session field is added here (the record, the report, :meth:`SessionRecord.after`,
:meth:`SessionRecord.entry`), in the Redis codec and its script, and where a report is
parsed (:mod:`~.app`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, dataclass_transform

from codex_presence._wire import ActivityState

__all__ = ["ANONYMOUS", "KEEP", "Agent", "Keep", "Report", "SessionRecord", "record_class"]

ANONYMOUS = ""
"""The session a report without a session id is about."""

Agent = Mapping[str, Any]
"""A session's ``agent`` object, validated (:func:`~codex_presence._wire.agent_problem`)."""


class Keep(enum.Enum):
    """A report without ``agent``: the stored one stays as it was."""

    AGENT = "keep"


KEEP: Literal[Keep.AGENT] = Keep.AGENT

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def record_class(cls: type[_T]) -> type[_T]:
    """A record made at every report: frozen to the type checker (nothing assigns its
    fields), a plain slotted dataclass at run time. A frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__``: on Python 3.11 that made each record
    cost 2.3 us to make instead of 0.9, on every report of every member (issue 32: the
    Redis store's cost per report). Equal and hashed by value, as a frozen one."""
    made: Callable[[type[_T]], type[_T]] = dataclass(slots=True, unsafe_hash=True)
    return made(cls)


_IDLE = ActivityState.IDLE
_ORDER = {ActivityState.BLOCKED: 0, ActivityState.WORKING: 1, _IDLE: 2}


@record_class
class Report:
    """What one ``POST /presence/activity`` says of the member's ``session``."""

    state: ActivityState
    session: str = ANONYMOUS
    background: int = 0
    """Commands or tasks the session left running."""
    agent: Agent | Literal[Keep.AGENT] | None = KEEP
    """The session's ``agent`` object; None clears the stored one; :data:`KEEP` leaves it."""

    @property
    def holds(self) -> bool:
        """Whether the session is held after it: working, blocked, or with background."""
        return self.state is not _IDLE or self.background > 0


@record_class
class SessionRecord:
    """One session of a member as a store holds it (the TTL apart: each store times it)."""

    state: ActivityState
    since: int
    """Unix ms: when this state began (a report of the same state keeps it)."""
    background: int = 0
    background_since: int = 0
    """Unix ms: since when the session has a background count (0 when it has none)."""
    agent: Agent | None = None

    @property
    def held(self) -> bool:
        """Whether a store keeps it: working, blocked, or with background."""
        return self.state is not _IDLE or self.background > 0

    @property
    def shown(self) -> bool:
        """Whether the roster lists it among the member's ``agents``."""
        return self.state is not _IDLE or self.agent is not None

    def after(self, report: Report, now_ms: int) -> SessionRecord:
        """The record once ``report`` (received at ``now_ms``) is applied to this one:
        the since kept by the same state, the background since kept while there is one,
        the agent kept unless the report says it."""
        return SessionRecord(  # by position: made at every report (issue 32's cost)
            report.state,
            self.since if report.state is self.state else now_ms,
            max(0, report.background),
            0
            if report.background <= 0
            else self.background_since
            if self.background > 0
            else now_ms,
            self.agent if report.agent is KEEP else report.agent,
        )

    @classmethod
    def first(cls, report: Report, now_ms: int, agent: Agent | None = None) -> SessionRecord:
        """The record of a session the store does not hold (new, or ended: ``agent`` is
        the one it had, kept unless the report says it)."""
        return cls(
            report.state,
            now_ms,
            max(0, report.background),
            now_ms if report.background > 0 else 0,
            agent if report.agent is KEEP else report.agent,
        )

    def entry(self, session: str) -> dict[str, Any]:
        """Its object in a roster entry's ``agents``: the session, its state, since and
        background, and the ``agent`` object's members spread in."""
        entry: dict[str, Any] = {
            "session": session,
            "state": self.state.value,
            "since": self.since,
            "background": self.background,
        }
        if self.agent:
            entry.update(self.agent)
        return entry

    def order(self) -> tuple[int, int]:
        """Where it goes in ``agents``: blocked first, then working, then idle; then by since."""
        return _ORDER[self.state], self.since
