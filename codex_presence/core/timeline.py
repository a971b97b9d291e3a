"""The timeline of a recorded session: entries in, state transitions out, as the daemon
derived them live. Pure, so tests, ``replay`` and the demo share it; reading files and
pacing the entries in real time is ``replay``'s (:mod:`codex_presence.cli.replay`).

Every client's sessions replay, each through its own feeder
(:class:`~codex_presence.core.feeder.Feeder`), chosen by the source of the first entry
(the registry, :mod:`codex_presence.core.clients`, says whose it is; plain output with no
source is its :data:`~codex_presence.core.clients.PLAIN_OUTPUT` client's). A feeder's
timer fires between entries, at its deadline, as the live shell's would have.
Rows are changes of the state; a change of the background count alone (work left
running, :mod:`codex_presence.core.activity`) makes no row, and is kept in
:attr:`TimelineBuilder.background`. Connection lines go to the feeder, which applies the
same rule as live (a client's hang-up closes it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import orjson

from codex_presence.core.activity import Transition
from codex_presence.core.clients import PLAIN_OUTPUT, client_of
from codex_presence.core.feeder import MAX_LINE, Feeder
from codex_presence.core.recording import Entry
from codex_presence.core.wording import event_words

__all__ = [
    "BackgroundRow",
    "TimelineBuilder",
    "TimelineRow",
    "iter_timeline",
    "timeline",
]


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One transition of a replayed session."""

    t: float | None
    """Seconds since the start of the recording (None for server-stdout files)."""
    line: int | None
    """1-based input line of the message that caused it (None for end of stream). A
    feeder's timer row names the line that last set the timer."""
    state: str
    cause: str
    """The message (or event) that caused it, by name: what ``replay --json`` says."""
    event: str = ""
    """The same as an event a person knows ("approval requested", "turn completed"):
    :func:`~codex_presence.core.wording.event_words`."""

    def as_json(self) -> dict[str, object]:
        return {"t": self.t, "line": self.line, "state": self.state, "cause": self.cause}


STOPPED = "stopped"
"""The cause of the last row of a recording that stops mid-session (no end line)."""


@dataclass(frozen=True, slots=True)
class BackgroundRow:
    """One change of a replayed session's background count (work left running)."""

    t: float | None
    line: int | None
    count: int
    cause: str


class TimelineBuilder:
    """Feeds entries to a feeder and turns its transitions into rows, as the daemon did
    live: a line longer than ``max_line`` is not analysed (it was not, live; the recorder
    keeps only its size), every handle closes where the live analysis closed them (a
    ``closed`` line), and the ``eof`` row comes at the recording's end line, if it has
    one. Without a ``mapping``, the first entry's source chooses the feeder."""

    def __init__(self, mapping: Feeder | None = None, *, max_line: int = MAX_LINE) -> None:
        self._mapping = mapping
        self.max_line = max_line
        self.oversized = 0
        self.gaps: list[Entry] = []
        """The recording's gap lines: after each, the replay may differ from the session."""
        self._last_t: float | None = None
        self._timer_line: int | None = None
        """The line after which the feeder's deadline last changed."""
        self._connections = 0
        """Connection lines fed."""
        self.background: list[BackgroundRow] = []
        """Every change of the background count, in order."""
        self.version = 1
        """The recording format's version (its version line; 1 without one)."""
        self.ended = False
        """The recording's end line was read: the session ended (see :attr:`stops_mid_session`)."""
        self.cut_line: int | None = None
        """The last line fed, when it is a recording line cut short: the recording was cut
        off mid-line (its end line missing with it)."""

    @property
    def session_messages(self) -> int:
        """Messages of a session fed so far (:attr:`~codex_presence.core.feeder.Feeder.messages`)
        and connection lines. None: the file held nothing to replay."""
        mapping = self._mapping
        return self._connections + (0 if mapping is None else mapping.messages)

    @property
    def mapping(self) -> Feeder:
        """The feeder (the plain output's client's, if no entry chose one)."""
        if self._mapping is None:
            self._mapping = PLAIN_OUTPUT.new_feeder()
        return self._mapping

    def feed(self, entry: Entry) -> list[TimelineRow]:
        """The rows ``entry`` causes (a feeder's timer due before it first)."""
        if self._mapping is None and _has_source(entry):
            client = client_of(entry.direction)
            if client is not None:
                self._mapping = client.new_feeder()
        rows = self._due(entry.t)
        self.cut_line = entry.line if _cut_short(entry) else None
        if entry.t is not None:
            self._last_t = entry.t
        if entry.version is not None:
            self.version = entry.version
            return rows
        if entry.end:
            self.ended = True
            return rows
        if entry.gap:
            self.gaps.append(entry)
            return rows
        mapping = self.mapping
        if entry.closed is not None:
            closed = mapping.close(entry.closed)
            return [*rows, *self._rows(entry.t, entry.line, closed)]
        t = entry.t if entry.t is not None else (self._last_t or 0.0)
        before = mapping.deadline
        if entry.connection is not None:
            self._connections += 1
            transitions = mapping.feed_connection(*entry.connection, t)
        elif (entry.size is not None and entry.size > self.max_line) or (
            entry.message is None and entry.raw is None  # only its size was recorded
        ):
            self.oversized += 1
            return rows
        elif entry.message is None:
            assert entry.raw is not None
            transitions = mapping.feed_raw(entry.direction, entry.raw, t)
        else:
            transitions = mapping.feed(entry.direction, entry.message, t)
        if mapping.deadline != before:
            self._timer_line = entry.line
        for transition in transitions:
            message = entry.message
            if message is None and entry.raw is not None and transition.changes_state:
                message = _parsed(entry.raw)  # a plain output line: parsed for the words only
            rows += self._rows(entry.t, entry.line, transition, message)
        return rows

    @property
    def last_t(self) -> float | None:
        """The time of the last entry fed, if it had one."""
        return self._last_t

    @property
    def stops_mid_session(self) -> bool:
        """The recording (version 2 on) has no end line: it stops mid-session, its runner
        killed or its disk full, not at the session's end. (A version 1 recording cannot
        tell: it replays as if the session ended.)"""
        return self.version >= 2 and not self.ended

    def finish(self) -> TimelineRow | None:
        """End of stream: the row for the final return to idle, if the state was not idle;
        its cause is ``eof``, or :data:`STOPPED` when the recording stops mid-session."""
        cause = STOPPED if self.stops_mid_session else "eof"
        rows = self._rows(self._last_t, None, self.mapping.close(cause))
        return rows[0] if rows else None

    def _due(self, t: float | None) -> list[TimelineRow]:
        """The feeder's timer, if it fires by ``t`` (at its own time)."""
        mapping = self._mapping
        if mapping is None or t is None:
            return []
        deadline = mapping.deadline
        if deadline is None or deadline > t:
            return []
        return self._rows(deadline, self._timer_line, mapping.tick(deadline))

    def _rows(
        self,
        t: float | None,
        line: int | None,
        transition: Transition | None,
        message: object = None,
    ) -> list[TimelineRow]:
        """The row of a change of state (none for a change of the background count alone,
        which is kept in :attr:`background`)."""
        if transition is None:
            return []
        if transition.changes_background:
            self.background.append(BackgroundRow(t, line, transition.background, transition.cause))
        return [self._row(t, line, transition, message)] if transition.changes_state else []

    @staticmethod
    def _row(
        t: float | None, line: int | None, transition: Transition, message: object = None
    ) -> TimelineRow:
        cause = transition.cause
        event = event_words(cause, message, previous=transition.previous.value)
        return TimelineRow(t=t, line=line, state=transition.state.value, cause=cause, event=event)


def _has_source(entry: Entry) -> bool:
    """A line of a session's source (not a version, end, closed or gap line)."""
    return entry.version is None and not entry.end and entry.closed is None and not entry.gap


def _cut_short(entry: Entry) -> bool:
    """A recording line (they all start ``{"t":``) that is not JSON: cut short."""
    if entry.raw is None or not entry.raw.startswith(b'{"t":'):
        return False
    try:
        orjson.loads(entry.raw)
    except orjson.JSONDecodeError:
        return True
    return False


def _parsed(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def iter_timeline(
    entries: Iterable[Entry], *, mapping: Feeder | None = None
) -> Iterator[TimelineRow]:
    """Rows as they happen; the last one, if the state was not idle, is the ``eof`` row."""
    builder = TimelineBuilder(mapping)
    for entry in entries:
        yield from builder.feed(entry)
    row = builder.finish()
    if row is not None:
        yield row


def timeline(entries: Iterable[Entry], *, mapping: Feeder | None = None) -> list[TimelineRow]:
    """The whole timeline of a session, ending idle."""
    return list(iter_timeline(entries, mapping=mapping))
