"""Replay: a recorded session in, its state timeline out.

:func:`timeline` is pure — entries in, rows out — so tests and the CLI share it;
:func:`replay_paths` is the thin shell that reads files and, with ``speed``, waits between
messages to reproduce the session's pace (scaled), for watching a timeline unfold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from ._codex import CodexMapping
from ._recording import Entry, read_relevant_entries

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
    """Feeds entries to a mapping and turns its transitions into rows."""

    def __init__(self, mapping: CodexMapping | None = None) -> None:
        self.mapping = mapping if mapping is not None else CodexMapping()
        self._last_t: float | None = None

    def feed(self, entry: Entry) -> TimelineRow | None:
        if entry.t is not None:
            self._last_t = entry.t
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


async def paced(entries: Iterable[Entry], speed: float) -> AsyncIterator[Entry]:
    """Entries at the pace they were recorded, scaled by ``speed`` (entries without a time,
    as in server-stdout files, come at once)."""
    start = anyio.current_time()
    first_t: float | None = None
    for entry in entries:
        if entry.t is not None:
            first_t = entry.t if first_t is None else first_t
            delay = start + (entry.t - first_t) / speed - anyio.current_time()
            if delay > 0:
                await anyio.sleep(delay)
        yield entry


async def replay_paths(
    paths: Iterable[Path],
    *,
    speed: float | None = None,
    on_row: Callable[[Path, TimelineRow], None],
) -> None:
    """Replay each file in turn, calling ``on_row`` for every transition as it happens.

    Raises :class:`OSError` for a file that cannot be read (before replaying any of it).
    """
    for path in paths:
        with path.open("rb") as stream:
            data = stream.read()
        entries = read_relevant_entries(data)
        if speed is None:
            for row in iter_timeline(entries):
                on_row(path, row)
            continue
        builder = TimelineBuilder()
        async for entry in paced(entries, speed):
            fed = builder.feed(entry)
            if fed is not None:
                on_row(path, fed)
        last = builder.finish()
        if last is not None:
            on_row(path, last)
