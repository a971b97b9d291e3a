"""The timeline of a recorded session: entries in, state transitions out, as the daemon
derived them live. Pure, so tests, ``replay`` and the demo share it; reading files and
pacing the entries in real time is ``replay``'s (:mod:`codex_presence.cli.replay`).

Both feeders replay: a codex session (``wrap``'s client and server lines) through the
codex mapping, a Claude Code session (``claude``'s hooks, transcript and session file)
through the Claude Code mapping, told apart by the first entry (a Claude Code recording
whose session file led says so by its SessionStart hook, which the mapping reads). The
Claude Code mapping's timer fires between entries, at its deadline, as the live shell's
would have.
Rows are changes of the state; a change of the background count alone (work left
running, :mod:`codex_presence.core.activity`) makes no row, and is kept in
:attr:`TimelineBuilder.background`. Connection lines (``codex-presence codex``) go through
the same rule as live (:class:`~codex_presence.core.codex.websocket.ClientLinks`): the
client's hang-up closes the mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import orjson

from codex_presence.core.activity import Transition
from codex_presence.core.claude.mapping import ClaudeMapping
from codex_presence.core.claude.protocol import SOURCES as CLAUDE_SOURCES
from codex_presence.core.codex.mapping import CodexMapping, Direction
from codex_presence.core.codex.prefilter import DEFAULT_MAX_LINE
from codex_presence.core.codex.websocket import HANGUP, ClientLinks
from codex_presence.core.recording import Entry
from codex_presence.core.wording import event_words

__all__ = [
    "BackgroundRow",
    "Mapping",
    "TimelineBuilder",
    "TimelineRow",
    "iter_timeline",
    "timeline",
]

Mapping = CodexMapping | ClaudeMapping


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One transition of a replayed session."""

    t: float | None
    """Seconds since the start of the recording (None for server-stdout files)."""
    line: int | None
    """1-based input line of the message that caused it (None for end of stream). A
    Claude Code timer row names the line that last set the timer."""
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
    """Feeds entries to a mapping and turns its transitions into rows, as the daemon did
    live: a codex line longer than ``max_line`` is not analysed (it was not, live; the
    recorder keeps only its size), every handle closes where the live analysis closed them
    (a ``closed`` line), and the ``eof`` row comes at the recording's end line, if it has
    one. Without a ``mapping``, the first entry chooses which."""

    def __init__(self, mapping: Mapping | None = None, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        self._mapping = mapping
        self.max_line = max_line
        self.oversized = 0
        self.gaps: list[Entry] = []
        """The recording's gap lines: after each, the replay may differ from the session."""
        self._last_t: float | None = None
        self._timer_line: int | None = None
        """The line after which the Claude Code mapping's deadline last changed."""
        self._links = ClientLinks()
        self._messages = 0
        """Claude Code messages and connection lines fed (codex messages: the stats)."""
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
        """Messages of a session fed so far: codex's JSON-RPC messages (skipped deltas
        included), Claude Code's hooks and file entries, connection lines. None: the file
        held nothing to replay."""
        mapping = self._mapping
        if not isinstance(mapping, CodexMapping):
            return self._messages
        stats = mapping.stats
        return self._messages + stats.lines - stats.not_json - stats.wrong_shape - stats.not_rpc

    @property
    def mapping(self) -> Mapping:
        if self._mapping is None:
            self._mapping = CodexMapping()
        return self._mapping

    def feed(self, entry: Entry) -> list[TimelineRow]:
        """The rows ``entry`` causes (a Claude Code timer due before it first)."""
        if self._mapping is None and entry.direction in CLAUDE_SOURCES:
            self._mapping = ClaudeMapping()
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
        if isinstance(mapping, ClaudeMapping):
            rows += self._feed_claude(mapping, entry)
            return rows
        direction = cast(Direction, entry.direction)
        if entry.connection is not None:
            self._messages += 1
            if not self._links.apply(*entry.connection):
                return rows
            transition = mapping.close(HANGUP)
        elif (entry.size is not None and entry.size > self.max_line) or (
            entry.message is None and entry.raw is None  # only its size was recorded
        ):
            self.oversized += 1
            return rows
        elif entry.message is None:
            assert entry.raw is not None
            transition = mapping.feed_line(direction, entry.raw)
        else:
            transition = mapping.feed_message(direction, entry.message)
        if transition is not None:
            message = entry.message
            if message is None and entry.raw is not None and transition.changes_state:
                message = _parsed(entry.raw)  # a server-stdout line: parsed for the words only
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

    # -- Claude Code ---------------------------------------------------------------------

    def _feed_claude(self, mapping: ClaudeMapping, entry: Entry) -> list[TimelineRow]:
        t = entry.t if entry.t is not None else (self._last_t or 0.0)
        if entry.direction not in CLAUDE_SOURCES or entry.message is None:
            mapping.stats.lines += 1
            mapping.stats.not_json += entry.message is None
            return []
        self._messages += 1
        before = mapping.deadline
        transitions = mapping.feed(entry.direction, entry.message, t)
        if mapping.deadline != before:
            self._timer_line = entry.line
        return [
            row for tr in transitions for row in self._rows(entry.t, entry.line, tr, entry.message)
        ]

    def _due(self, t: float | None) -> list[TimelineRow]:
        """The Claude Code mapping's timer, if it fires by ``t`` (at its own time)."""
        mapping = self._mapping
        if not isinstance(mapping, ClaudeMapping) or t is None:
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
    entries: Iterable[Entry], *, mapping: Mapping | None = None
) -> Iterator[TimelineRow]:
    """Rows as they happen; the last one, if the state was not idle, is the ``eof`` row."""
    builder = TimelineBuilder(mapping)
    for entry in entries:
        yield from builder.feed(entry)
    row = builder.finish()
    if row is not None:
        yield row


def timeline(entries: Iterable[Entry], *, mapping: Mapping | None = None) -> list[TimelineRow]:
    """The whole timeline of a session, ending idle."""
    return list(iter_timeline(entries, mapping=mapping))
