"""The timeline of a recorded session: entries in, state transitions out, as the relay
derived them live. Pure, so tests, ``replay`` and the demo share it; reading files and
pacing the entries in real time is ``replay``'s (:mod:`codex_presence.cli.replay`).
Connection lines (``codex-presence codex``) go through the same rule as live
(:class:`~codex_presence.core.websocket.ClientLinks`): the client's hang-up closes the
mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from codex_presence.core.codex import CodexMapping
from codex_presence.core.prefilter import DEFAULT_MAX_LINE
from codex_presence.core.recording import Entry
from codex_presence.core.websocket import HANGUP, ClientLinks

__all__ = ["TimelineBuilder", "TimelineRow", "iter_timeline", "timeline"]


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One transition of a replayed session."""

    t: float | None
    """Seconds since the start of the recording (None for server-stdout files)."""
    line: int | None
    """1-based input line of the message that caused it (None for end of stream)."""
    state: str
    cause: str

    def as_json(self) -> dict[str, object]:
        return {"t": self.t, "line": self.line, "state": self.state, "cause": self.cause}


class TimelineBuilder:
    """Feeds entries to a mapping and turns its transitions into rows, as the relay did
    live: a line longer than ``max_line`` is not analysed (it was not, live), and the
    ``eof`` row comes at the recording's end line, if it has one."""

    def __init__(
        self, mapping: CodexMapping | None = None, *, max_line: int = DEFAULT_MAX_LINE
    ) -> None:
        self.mapping = mapping if mapping is not None else CodexMapping()
        self.max_line = max_line
        self.oversized = 0
        self.gaps: list[Entry] = []
        """The recording's gap lines: after each, the replay may differ from the session."""
        self._last_t: float | None = None
        self._links = ClientLinks()

    def feed(self, entry: Entry) -> TimelineRow | None:
        if entry.t is not None:
            self._last_t = entry.t
        if entry.end:
            return None
        if entry.gap:
            self.gaps.append(entry)
            return None
        if entry.size is not None and entry.size > self.max_line:
            self.oversized += 1
            return None
        if entry.connection is not None:
            if not self._links.apply(*entry.connection):
                return None
            transition = self.mapping.close(HANGUP)
        elif entry.message is None:
            assert entry.raw is not None
            transition = self.mapping.feed_line(entry.direction, entry.raw)
        else:
            transition = self.mapping.feed_message(entry.direction, entry.message)
        if transition is None:
            return None
        return TimelineRow(
            t=entry.t, line=entry.line, state=transition.state.value, cause=transition.cause
        )

    def finish(self) -> TimelineRow | None:
        """End of stream: the row for the final return to idle, if the state was not idle."""
        transition = self.mapping.close("eof")
        if transition is None:
            return None
        return TimelineRow(t=self._last_t, line=None, state=transition.state.value, cause="eof")


def iter_timeline(
    entries: Iterable[Entry], *, mapping: CodexMapping | None = None
) -> Iterator[TimelineRow]:
    """Rows as they happen; the last one, if the state was not idle, is the ``eof`` row."""
    builder = TimelineBuilder(mapping)
    for entry in entries:
        row = builder.feed(entry)
        if row is not None:
            yield row
    row = builder.finish()
    if row is not None:
        yield row


def timeline(entries: Iterable[Entry], *, mapping: CodexMapping | None = None) -> list[TimelineRow]:
    """The whole timeline of a session, ending idle."""
    return list(iter_timeline(entries, mapping=mapping))
