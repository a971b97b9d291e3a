"""``codex-presence replay FILE...``: print a recorded session's state timeline.

The timeline itself is :mod:`codex_presence.core.timeline`'s (pure); here are the I/O
around it: :func:`replay_paths` reads the files, and :func:`paced` waits between entries to
reproduce a session's pace (scaled), for watching a timeline unfold (the demo uses it too).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from codex_presence.core.recording import Entry
    from codex_presence.core.timeline import TimelineBuilder, TimelineRow

HELP = (
    "print the state timeline of recorded sessions (of any runner's --record, or plain "
    "app-server stdout)"
)

_EPILOG = """\
Reads the project's recording format (JSON Lines {"t", "from", "msg"}, as written by
`--record` of every runner, each replayed with its own client's mapping) or plain
app-server stdout (one JSON-RPC message per line), detected from the first line; FILE -
is standard input. One line per transition: time, new state, what happened in words
("approval requested", "turn completed") and, in parentheses, the line and the message
that caused it, as the relay derived it live (lines over 16 MiB are not analysed, as
live; the end of the session is dated by the recording's end line).
With --json, one object per transition, the cause by its message's name:
  {"t": <float or null>, "line": <1-based input line, null for eof>, "state": ...,
   "cause": ...}
and "file" first when several files are given. The last row's cause is "eof" when the
session ended, "stopped" when the recording stops mid-session (it has no end line: its
runner was killed or the disk filled; said on stderr too; recordings older than format
version 2 cannot tell, and replay as ended). A recording with gaps (the recorder
could not keep up), or cut off mid-line, replays with a warning on stderr.
Exit status: 0 on success, 1 when a file holds nothing to replay (no message of a client
it knows: empty, not JSON, other JSON, or a recording cut off before its first message),
2 for a missing or unreadable file."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.add_argument("files", nargs="+", metavar="FILE", type=Path, help="sessions to replay")
    parser.add_argument("--json", action="store_true", help="print one JSON object per transition")
    parser.add_argument(
        "--speed",
        type=float,
        default=None,
        metavar="X",
        help="replay in real time scaled by X (2 = twice as fast); default: as fast as possible",
    )


def run(args: argparse.Namespace) -> int:
    import anyio
    import orjson

    from codex_presence.cli.main import UsageError
    from codex_presence.core.clients import CLIENTS

    if args.speed is not None and not args.speed > 0:
        raise UsageError("--speed must be a positive number")
    for path in args.files:
        if str(path) == "-":
            continue
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            sys.stderr.write(f"codex-presence replay: cannot read {path}: {exc.strerror}\n")
            return 2
    several = len(args.files) > 1
    out = sys.stdout

    def on_row(path: Path, row: TimelineRow) -> None:
        if args.json:
            record = row.as_json()
            if several:
                record = {"file": str(path), **record}
            out.write(orjson.dumps(record).decode() + "\n")
        else:
            when = "        -" if row.t is None else f"{row.t:9.3f}"
            where = row.cause if row.line is None else f"line {row.line}, {row.cause}"
            prefix = f"{path}: " if several else ""
            out.write(f"{prefix}{when}  {row.state:<8} {row.event}  ({where})\n")
        out.flush()

    unreplayable: list[Path] = []

    def on_done(path: Path, builder: TimelineBuilder) -> None:
        say = f"codex-presence replay: {path}:"
        for gap in builder.gaps:
            sys.stderr.write(
                f"{say} a gap at {gap.t:.3f} s (line {gap.line}): the recorder left out "
                f"{gap.gap} bytes from the {gap.direction}; the timeline after it may "
                "differ from the session's\n"
            )
        if builder.oversized:
            sys.stderr.write(f"{say} {builder.oversized} line(s) over 16 MiB, not analysed\n")
        mapping = builder.mapping
        for unknown in sorted(mapping.unknowns, key=lambda u: (u.kind, u.name)):
            sys.stderr.write(
                f"{say} a {unknown.kind} this codex-presence does not know: {unknown.name!r}\n"
            )
        if builder.stops_mid_session and builder.session_messages:
            where = "" if builder.last_t is None else f" at {builder.last_t:.3f} s"
            sys.stderr.write(
                f"{say} the recording stops mid-session{where}, without the session's end: "
                "its runner was killed or the disk filled; what happened after is not in it\n"
            )
        if builder.cut_line is not None:
            sys.stderr.write(
                f"{say} line {builder.cut_line} is cut short and there is no end line: the "
                "recording was cut off mid-line (the session killed, or the file copied while "
                "it was written)\n"
            )
        stats = mapping.stats
        if not builder.session_messages:
            unreplayable.append(path)
            if not stats.lines and not builder.gaps:
                why = "the file is empty"
            elif builder.cut_line is not None and stats.not_json == stats.lines:
                why = "cut off within its first line"
            elif stats.not_json == stats.lines:
                why = "no line is JSON: not a recording or app-server output?"
            else:
                kinds = [client.messages for client in CLIENTS]
                known = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if kinds[:-1] else kinds)
                why = f"JSON, but no {known} message"
            sys.stderr.write(f"{say} nothing to replay: {why}\n")
        elif not mapping.changes_possible:
            sys.stderr.write(f"{say} no message that could change the state\n")

    try:
        anyio.run(
            lambda: replay_paths(args.files, speed=args.speed, on_row=on_row, on_done=on_done)
        )
    except BrokenPipeError:  # the reader went away (| head): main says nothing of it
        raise
    except OSError as exc:
        sys.stderr.write(f"codex-presence replay: {exc}\n")
        return 2
    return 1 if unreplayable else 0


async def paced(
    entries: Iterable[Entry],
    speed: float | None,
    *,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> AsyncIterator[Entry]:
    """Entries at the pace they were recorded, scaled by ``speed``; at once with ``speed``
    None, and for entries without a time (server-stdout files). ``clock`` and ``sleep`` are
    for tests (default: anyio's)."""
    import anyio

    clock = anyio.current_time if clock is None else clock
    sleep = anyio.sleep if sleep is None else sleep
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
    from codex_presence.core.recording import read_relevant_entries
    from codex_presence.core.timeline import TimelineBuilder

    for path in paths:
        if str(path) == "-":
            data = sys.stdin.buffer.read()
        else:
            with path.open("rb") as stream:
                data = stream.read()
        builder = TimelineBuilder()
        async for entry in paced(read_relevant_entries(data), speed):
            for row in builder.feed(entry):
                on_row(path, row)
        last = builder.finish()
        if last is not None:
            on_row(path, last)
        if on_done is not None:
            on_done(path, builder)
