"""Replay: a recorded session in, its state timeline out.

:func:`timeline` is pure — entries in, rows out — so tests and the CLI share it;
:func:`replay_paths` is the thin shell that reads files and, with ``speed``, waits between
messages to reproduce the session's pace (scaled), for watching a timeline unfold.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from codex_presence.core.codex import CodexMapping
from codex_presence.core.prefilter import DEFAULT_MAX_LINE
from codex_presence.core.recording import Entry, read_relevant_entries

__all__ = [
    "TimelineBuilder",
    "TimelineRow",
    "iter_timeline",
    "paced",
    "replay_paths",
    "timeline",
]


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
        if entry.message is None:
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


async def paced(
    entries: Iterable[Entry],
    speed: float | None,
    *,
    clock: Callable[[], float] = anyio.current_time,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> AsyncIterator[Entry]:
    """Entries at the pace they were recorded, scaled by ``speed``; at once with ``speed``
    None, and for entries without a time (server-stdout files). ``clock`` and ``sleep`` are
    for tests."""
    start = clock()
    first_t: float | None = None
    for entry in entries:
        if speed is not None and entry.t is not None:
            first_t = entry.t if first_t is None else first_t
            delay = start + (entry.t - first_t) / speed - clock()
            if delay > 0:
                await sleep(delay)
        yield entry


async def replay_paths(
    paths: Iterable[Path],
    *,
    speed: float | None = None,
    on_row: Callable[[Path, TimelineRow], None],
    on_done: Callable[[Path, TimelineBuilder], None] | None = None,
) -> None:
    """Replay each file in turn (``-``: standard input), calling ``on_row`` for every
    transition as it happens and ``on_done`` with each file's builder (its gaps and
    counts) at its end.

    Raises :class:`OSError` for a file that cannot be read (before replaying any of it).
    """
    for path in paths:
        if str(path) == "-":
            data = sys.stdin.buffer.read()
        else:
            with path.open("rb") as stream:
                data = stream.read()
        builder = TimelineBuilder()
        async for entry in paced(read_relevant_entries(data), speed):
            row = builder.feed(entry)
            if row is not None:
                on_row(path, row)
        last = builder.finish()
        if last is not None:
            on_row(path, last)
        if on_done is not None:
            on_done(path, builder)
