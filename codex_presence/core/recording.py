"""The recording format: one JSON object per line, every source, with timestamps.

A recording line is ``{"t": <seconds since start>, "from": <source>, "msg": <message>}``.
Each client's sessions have their own sources (the registry, :mod:`codex_presence.core.clients`,
says whose each is): a relayed session's ``"client"`` and ``"server"`` (what crossed the
wire each way), a hook-driven session's hooks and files (``"hook"``, ``"transcript"``,
…); which client a recording holds is told by its first message. A recording written
since format version 2 starts with a version line,
``{"t": 0.0, "version": 2}`` (:data:`VERSION`); older ones (version 1) have none. A line
that was not JSON is kept as ``"raw": "<text>"`` (or ``"raw_b64"`` when it was not even
UTF-8), so nothing that crossed the wire is lost. More kinds of line carry no
message: ``{"t": <seconds>, "end": "eof"}``, last, dates the end of the session. It is
written only when the session ended and the whole recording reached the file: from
version 2 on, a recording without it stops mid-session (its runner was killed, or the disk
filled), which a version 1 recording cannot tell (the fixture recorders of version 1 wrote
no end line at all); ``{"t": <seconds>, "from": …, "gap": <bytes>}`` says
that that many bytes of that source are left out there (the recorder could not keep up, or
they crossed before ``wrap``'s analysis was ready and did not fit in its start-up buffer;
the lines they cut are left out whole); ``{"t": <seconds>, "from": …, "oversized": <bytes>}``
stands for a line too long to record (longer than the relay's ``max_line``: the relay did not
analyse it either), and ``{"t": <seconds>, "closed": "gap"}`` says that the live analysis
closed every handle there, after bytes it could not analyse (its start-up buffer overflowed;
gap lines say which), so that the replay does too. A session relayed over websocket
connections also has connection lines, ``{"t": <seconds>,
"conn": <n>, "event": "open" | "hangup" | "lost"}``: client connection ``n`` (counted from
1) was opened, ended by the client's close frame (a hang-up), or ended without one
(dropped); its messages are message lines, one per websocket text message, and a reconnect
is a new ``open``. :func:`encode_entry` writes a message line;
:func:`read_entries` reads a file in either the recording format or a client's plain output
(:data:`~codex_presence.core.clients.PLAIN_OUTPUT`'s: one message per line, no timestamps),
telling them apart from the first line.

The writer embeds a JSON line's bytes as they were — it re-serialises nothing — and always
writes ``t`` and ``from`` before ``msg``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from codex_presence.core.clients import PLAIN_OUTPUT, SOURCES, Client, client_of
from codex_presence.core.feeder import CONNECTION_EVENTS, ConnectionEvent

__all__ = [
    "VERSION",
    "ConnectionEvent",
    "Entry",
    "RecordingFormat",
    "Source",
    "detect_format",
    "encode_closed",
    "encode_connection",
    "encode_end",
    "encode_entry",
    "encode_entry_parts",
    "encode_gap",
    "encode_oversized",
    "encode_version",
    "read_entries",
    "read_relevant_entries",
]

RecordingFormat = Literal["recording", "server-stdout"]

VERSION = 2
"""The recording format's version, said by a recording's first line (:func:`encode_version`).
1 (no version line): the end line may be missing from a session that ended; 2: a recording
without its end line stops mid-session."""

Source = str
"""A recording line's ``from``: one of a client's sources
(:data:`~codex_presence.core.clients.SOURCES`)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One message of a session, as read back from a file."""

    line: int
    """1-based line number in the file it came from."""
    t: float | None
    direction: Source
    message: Any
    """The parsed message, or ``None`` when the line is passed on as raw bytes."""
    raw: bytes | None = None
    """The original bytes of the line when it was not parsed here: a line of plain server
    stdout (left to the mapping's pre-filter, which skips deltas without parsing them) or
    a line that is not JSON."""
    size: int | None = None
    """Bytes of the message as it crossed the wire, where known: the relay analyses no
    line longer than its ``max_line``, and neither does a replay. An oversized line (left
    out of the recording) has only its size: no message, no raw bytes."""
    end: bool = False
    """The end line: no message, only the time the session ended."""
    gap: int = 0
    """A gap line: bytes the recorder left out here (no message)."""
    closed: str | None = None
    """The live analysis closed every handle here, for this cause (no message)."""
    connection: tuple[int, ConnectionEvent] | None = None
    """A connection line: the client connection's number and what happened to it."""
    version: int | None = None
    """The version line (the recording's first): the format's version (no message)."""


def encode_entry(t: float, direction: Source, line: bytes) -> bytes:
    """One recording line for ``line`` (its trailing newline, if any, is dropped)."""
    return b"".join(encode_entry_parts(t, direction, line))


def encode_entry_parts(t: float, direction: Source, line: bytes) -> tuple[bytes, ...]:
    """:func:`encode_entry` in parts whose concatenation is the recording line: a JSON
    line's bytes are one of them, uncopied (a writer with ``writelines`` never copies a
    long line). A message with a newline inside (a websocket message may hold one) is kept
    as ``raw``: embedded, it would split the recording's line."""
    body = line[:-1] if line.endswith(b"\n") else line
    head = b'{"t":%.6f,"from":"%s",' % (t, direction.encode())
    if b"\n" not in body:
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            return head, b'"msg":', body, b"}\n"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return head, b'"raw_b64":', orjson.dumps(base64.b64encode(body).decode()), b"}\n"
    try:
        return head, b'"raw":', orjson.dumps(text), b"}\n"
    except TypeError:  # lone surrogates cannot be written as JSON strings
        return head, b'"raw_b64":', orjson.dumps(base64.b64encode(body).decode()), b"}\n"


def encode_version() -> bytes:
    """The version line that starts a recording."""
    return b'{"t":0.000000,"version":%d}\n' % VERSION


def encode_end(t: float) -> bytes:
    """The end line: the session ended ``t`` seconds in."""
    return b'{"t":%.6f,"end":"eof"}\n' % t


def encode_closed(t: float, cause: str) -> bytes:
    """The analysis closed every handle ``t`` seconds in, for ``cause`` (``gap``)."""
    return b'{"t":%.6f,"closed":%s}\n' % (t, orjson.dumps(cause))


def encode_connection(t: float, connection: int, event: ConnectionEvent) -> bytes:
    """A connection line: client connection ``connection`` was opened, hung up or lost."""
    return b'{"t":%.6f,"conn":%d,"event":"%s"}\n' % (t, connection, event.encode())


def encode_gap(t: float, direction: Source, size: int) -> bytes:
    """A gap line: ``size`` bytes of ``direction`` from ``t`` on were left out."""
    return b'{"t":%.6f,"from":"%s","gap":%d}\n' % (t, direction.encode(), size)


def encode_oversized(t: float, direction: Source, size: int) -> bytes:
    """The line that stands for one too long to record: ``size`` bytes (newline apart)."""
    return b'{"t":%.6f,"from":"%s","oversized":%d}\n' % (t, direction.encode(), size)


def _as_entry(number: int, value: Any, size: int | None = None) -> Entry | None:
    """A recording entry, or None if ``value`` is not one."""
    if not isinstance(value, dict):
        return None
    t = value.get("t")
    if isinstance(t, bool) or not isinstance(t, int | float):
        return None
    if value.get("from") not in SOURCES:
        if value.get("end") == "eof" and len(value) == 2:
            return Entry(line=number, t=float(t), direction="server", message=None, end=True)
        version = value.get("version")
        if isinstance(version, int) and not isinstance(version, bool) and len(value) == 2:
            return Entry(number, float(t), "server", None, version=version)
        if isinstance(value.get("closed"), str) and len(value) == 2:
            return Entry(number, float(t), "server", None, closed=value["closed"])
        conn, event = value.get("conn"), value.get("event")
        if (
            isinstance(conn, int)
            and not isinstance(conn, bool)
            and conn > 0
            and event in CONNECTION_EVENTS
            and len(value) == 3
        ):
            return Entry(number, float(t), "client", None, connection=(conn, event))
        return None
    gap = value.get("gap")
    if isinstance(gap, int) and not isinstance(gap, bool) and gap > 0 and len(value) == 3:
        return Entry(line=number, t=float(t), direction=value["from"], message=None, gap=gap)
    oversized = value.get("oversized")
    if isinstance(oversized, int) and not isinstance(oversized, bool) and len(value) == 3:
        return Entry(number, float(t), value["from"], None, size=oversized)
    if "msg" in value:
        return Entry(number, float(t), value["from"], value["msg"], size=size)
    if isinstance(value.get("raw"), str):
        raw = value["raw"].encode("utf-8", "surrogateescape")
    elif isinstance(value.get("raw_b64"), str):
        try:
            raw = base64.b64decode(value["raw_b64"], validate=True)
        except ValueError:  # binascii.Error is one; so is a non-ASCII string
            return None
    else:
        return None
    return Entry(number, float(t), value["from"], None, raw=raw, size=len(raw))


def detect_format(first_line: bytes) -> RecordingFormat:
    """A file whose first non-empty line is a recording entry is a recording."""
    try:
        value = orjson.loads(first_line)
    except orjson.JSONDecodeError:
        return "server-stdout"
    return "recording" if _as_entry(1, value) is not None else "server-stdout"


def _entry(number: int, line: bytes, fmt: RecordingFormat) -> Entry:
    """The entry for one stripped, non-empty line of a file of format ``fmt``."""
    if fmt == "server-stdout":
        return Entry(number, None, "server", None, raw=line, size=len(line))
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return Entry(number, None, "server", None, raw=line, size=len(line))
    msg = line.find(b'"msg":')  # the writer puts the message last: its bytes are the rest
    entry = _as_entry(number, value, None if msg < 0 else len(line) - msg - len(b'"msg":}'))
    return entry if entry is not None else Entry(number, None, "server", value, size=len(line))


def read_entries(lines: Iterable[bytes]) -> Iterator[Entry]:
    """Entries of a recording or of plain server stdout, detected from the first line.

    In server-stdout mode every line is a server message with no time, passed on unparsed.
    In recording mode a line that is not a valid entry is passed on as an unparsed server
    line, so that a truncated or hand-edited recording still replays.
    """
    fmt: RecordingFormat | None = None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if fmt is None:
            fmt = detect_format(stripped)
        yield _entry(number, stripped, fmt)


_CANDIDATES: dict[tuple[str, RecordingFormat], re.Pattern[bytes] | None] = {}


def _candidates(client: Client, fmt: RecordingFormat) -> re.Pattern[bytes] | None:
    """A newline that starts a line which may change the state (see read_relevant_entries),
    in a file of ``client``'s; None: every line may."""
    key = (client.name, fmt)
    if key not in _CANDIDATES:
        _CANDIDATES[key] = client.scan(fmt == "recording")
    return _CANDIDATES[key]


def read_relevant_entries(data: bytes) -> Iterator[Entry]:
    """:func:`read_entries` of a whole file, minus the lines that cannot change the state.

    A client whose sessions are long (its registry entry's scan, where it has one: for a
    relayed session, the streaming deltas and the like that are most of it) has one
    regular-expression scan find the lines that may matter, so the skipped ones cost no
    Python at all; the timeline is the same as feeding every entry. The file's last entry
    always comes, for its time. A client without a scan (its recordings are small and every
    line matters, its first entry says whose it is): all of it comes.
    """
    start = 0
    while start < len(data) and data[start] in b" \t\r\n":
        start += 1
    if start == len(data):
        return
    first_end = data.find(b"\n", start)
    first_end = len(data) if first_end < 0 else first_end
    fmt = detect_format(data[start:first_end].strip())
    number = data.count(b"\n", 0, start) + 1
    first = _entry(number, data[start:first_end].strip(), fmt)
    if first.version is not None:  # the version line: the session's first entry is next
        yield first
        start = first_end
        while start < len(data) and data[start] in b" \t\r\n":
            start += 1
        if start == len(data):
            return
        number = data.count(b"\n", 0, start) + 1
        first_end = data.find(b"\n", start)
        first_end = len(data) if first_end < 0 else first_end
        first = _entry(number, data[start:first_end].strip(), fmt)
    client = PLAIN_OUTPUT if fmt == "server-stdout" else client_of(first.direction)
    candidates = None if client is None else _candidates(client, fmt)
    if candidates is None:
        yield from (e for e in read_entries(data.splitlines()) if e.version is None)
        return
    yield first
    last_start = data.rfind(b"\n", 0, len(data.rstrip())) + 1
    counted_to, last_fed = first_end, start
    for match in candidates.finditer(data, first_end):
        begin = match.start() + 1
        number += data.count(b"\n", counted_to, begin)
        counted_to = begin
        end = data.find(b"\n", begin)
        line = data[begin : len(data) if end < 0 else end].strip()
        if line:
            last_fed = begin
            yield _entry(number, line, fmt)
    if last_start > last_fed:
        yield _entry(data.count(b"\n", 0, last_start) + 1, data[last_start:].strip(), fmt)
