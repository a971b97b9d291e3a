"""Chunks in, the few lines that can matter out: the relay's pre-filter for the mapping.

Sans-I/O. The relay hands :class:`ChunkAnalyzer` each chunk it has just forwarded, in
whatever pieces the pipes produced, and gets back the transitions those bytes caused. The
analyzer owns line framing (the partial last line of each direction, bounded) and the
decision which complete lines reach :meth:`CodexMapping.feed_line` at all.

Why it exists: ``feed_line`` costs about a microsecond even for a line it skips, and a busy
app-server writes thousands of deltas per megabyte. So the analyzer skips in bulk what it
can prove ``feed_line`` would skip anyway, and feeds everything else, so that the result is
the same as feeding every line one by one (the property ``tests/test_lines.py`` checks):

* server lines: ``feed_line`` decides on the first bytes (codex writes ``{"method":"…"`` or
  ``{"id":`` first). One regular-expression scan of the chunk (in C) finds the lines that
  do not start with one of :data:`HOT_SKIPPED_PREFIXES`, the frequent kinds that change
  nothing; only those are sliced out and go to ``feed_line``, which parses only those
  that can change the state. A partial line whose prefix already shows it is irrelevant
  is not buffered at all, however long it gets.
* client lines matter only while the mapping waits for answers to server requests
  (``CodexMapping.has_pending``); otherwise a chunk's complete lines are skipped wholesale,
  with a single ``rfind`` for the line framing.
* a line longer than ``max_line`` that would have to be parsed is dropped from analysis
  (counted in :class:`AnalyzerStats`, logged at debug). It was relayed all the same.
"""

from __future__ import annotations

import logging
import operator
import re
from dataclasses import dataclass, field

from codex_presence.core.activity import Transition
from codex_presence.core.codex import CodexMapping
from codex_presence.core.codex_protocol import (
    ITEM_TYPE_PREFIX,
    METHOD_PREFIX,
    PASSIVE_ITEM_TYPES,
    RESPONSE_PREFIX,
    STATE_METHODS,
    TOOL_ITEM_TYPES,
    Direction,
    skips_unparsed,
)

__all__ = [
    "DEFAULT_MAX_LINE",
    "HOT_SKIPPED_PREFIXES",
    "AnalyzerStats",
    "ChunkAnalyzer",
    "candidate_starts",
]

logger = logging.getLogger("codex_presence.lines")

DEFAULT_MAX_LINE = 16 * 1024 * 1024
"""Longest line (bytes) that is still parsed; longer ones are relayed, never analysed."""

_HOT_SKIPPED_METHODS = (
    "item/agentMessage/delta",
    "item/reasoning/summaryTextDelta",
    "item/commandExecution/outputDelta",
    "item/reasoning/textDelta",
    "item/plan/delta",
    "item/fileChange/patchUpdated",
)
assert not set(_HOT_SKIPPED_METHODS) & STATE_METHODS
assert not PASSIVE_ITEM_TYPES & TOOL_ITEM_TYPES

HOT_SKIPPED_PREFIXES: tuple[bytes, ...] = (
    *(METHOD_PREFIX + m.encode() + b'"' for m in _HOT_SKIPPED_METHODS),
    RESPONSE_PREFIX,
    *(
        METHOD_PREFIX + b"item/completed" + ITEM_TYPE_PREFIX + kind.encode() + b'"'
        for kind in sorted(PASSIVE_ITEM_TYPES)
    ),
    METHOD_PREFIX + b'thread/tokenUsage/updated"',
    METHOD_PREFIX + b'account/rateLimits/updated"',
)
"""Server-line prefixes whose lines cannot change the state, most frequent first. Each
ends at a closing quote (or is ``{"id":``): methods (notifications: codex sends none of them
as a request), and the ``item/completed`` of passive item types (codex writes ``"item"``
first in ``params`` and ``"type"`` first in the item), that ``feed_line`` skips unparsed.
A passive item's ``item/started`` is not among them: it revives a turn that ended, and
``feed_line`` parses it only when it names such a turn."""


def candidate_starts(head: bytes = b"") -> re.Pattern[bytes]:
    """A pattern for the newlines that start a line which does not begin with ``head``
    (a regular expression; the recording format puts ``{"t":…,"from":"server","msg":``
    there) followed by a hot prefix: the only lines worth a look."""
    hot = b"|".join(re.escape(prefix) for prefix in HOT_SKIPPED_PREFIXES)
    return re.compile(b"\\n(?!" + head + b"(?:" + hot + b"))")


_CANDIDATE_START = candidate_starts()
_match_end = operator.methodcaller("end")


@dataclass(slots=True)
class AnalyzerStats:
    """What the analyzer saw; for debug logs, tests and the benchmark."""

    chunks: int = 0
    bytes: int = 0
    fed: int = 0
    """Complete lines handed to ``CodexMapping.feed_line``."""
    oversized: int = 0
    """Lines longer than ``max_line`` dropped from analysis (they were relayed)."""


@dataclass(slots=True)
class _Partial:
    """The unfinished last line of one direction."""

    pieces: list[bytes] = field(default_factory=list)
    size: int = 0
    skipping: bool = False
    """The line is known not to matter (or is too long): its bytes are not kept."""
    oversized: bool = False

    def reset(self) -> None:
        self.pieces.clear()
        self.size = 0
        self.skipping = False
        self.oversized = False

    @property
    def empty(self) -> bool:
        return self.size == 0 and not self.skipping


class ChunkAnalyzer:
    """Frames both directions into lines and feeds the mapping only what can matter."""

    def __init__(self, mapping: CodexMapping | None = None, *, max_line: int = DEFAULT_MAX_LINE):
        self.mapping = mapping if mapping is not None else CodexMapping()
        self.max_line = max_line
        self.stats = AnalyzerStats()
        self._partial: dict[Direction, _Partial] = {"client": _Partial(), "server": _Partial()}
        self._closed = False

    def feed(self, direction: Direction, chunk: bytes) -> list[Transition]:
        """Account for ``chunk`` (bytes as they crossed the wire); returns the transitions."""
        if self._closed or not chunk:
            return []
        self.stats.chunks += 1
        self.stats.bytes += len(chunk)
        out: list[Transition] = []
        partial = self._partial[direction]
        pos = 0
        if not partial.empty:
            nl = chunk.find(b"\n")
            if nl < 0:
                self._extend(direction, partial, chunk)
                return out
            self._extend(direction, partial, chunk[: nl + 1])
            self._finish_partial(direction, partial, out)
            pos = nl + 1
        last = chunk.rfind(b"\n")
        if last >= pos:
            if direction == "server":
                self._server_lines(chunk, pos, last, out)
            elif self.mapping.has_pending:
                self._client_lines(chunk, pos, last, out)
            pos = last + 1
        if pos < len(chunk):
            self._extend(direction, partial, chunk[pos:] if pos else chunk)
        return out

    def close(self, cause: str = "eof") -> list[Transition]:
        """End of both streams: an unterminated last line still counts, then all closes."""
        if self._closed:
            return []
        out: list[Transition] = []
        for direction in ("client", "server"):
            partial = self._partial[direction]
            if not partial.empty:
                self._finish_partial(direction, partial, out)
        self._closed = True
        transition = self.mapping.close(cause)
        if transition is not None:
            out.append(transition)
        return out

    # -- internals -----------------------------------------------------------------------

    def _feed(self, direction: Direction, line: bytes, out: list[Transition]) -> None:
        if len(line) > self.max_line:
            self._oversized(direction, len(line))
            return
        self.stats.fed += 1
        transition = self.mapping.feed_line(direction, line)
        if transition is not None:
            out.append(transition)

    def _oversized(self, direction: Direction, size: int) -> None:
        self.stats.oversized += 1
        logger.debug("a %s line of %d+ bytes is too long to analyse; relayed only", direction, size)

    def _server_lines(self, chunk: bytes, start: int, last: int, out: list[Transition]) -> None:
        # The complete lines are chunk[start:last + 1]. One regular-expression scan finds
        # the newlines *not* followed by a hot prefix: the starts of the few lines to feed.
        if start == 0:  # the first line is not preceded by a newline in this chunk
            if not chunk.startswith(HOT_SKIPPED_PREFIXES):
                self._feed("server", chunk[: chunk.find(b"\n")], out)
        else:
            start -= 1
        # Slice all the candidates first, then feed them together: the mapping's code
        # stays hot in the CPU's caches instead of being evicted by the scan in between
        # (measured: the mapping's cost per MB falls by a third).
        find = chunk.find
        lines = [
            chunk[begin : find(b"\n", begin)]
            for begin in map(_match_end, _CANDIDATE_START.finditer(chunk, start, last))
        ]
        for line in lines:
            self._feed("server", line, out)

    def _client_lines(self, chunk: bytes, start: int, last: int, out: list[Transition]) -> None:
        for line in chunk[start:last].split(b"\n"):
            if not self.mapping.has_pending:
                return  # nothing left to answer: the rest cannot matter
            self._feed("client", line, out)

    def _extend(self, direction: Direction, partial: _Partial, data: bytes) -> None:
        if partial.skipping:
            partial.size += len(data)
            return
        partial.pieces.append(data)
        partial.size += len(data)
        if direction == "server" and partial.size <= 4096:
            head = b"".join(partial.pieces) if len(partial.pieces) > 1 else partial.pieces[0]
            if skips_unparsed(head):
                partial.pieces.clear()
                partial.skipping = True
                return
        if partial.size > self.max_line + 1:  # + 1: the newline is not part of the line
            self._oversized(direction, partial.size)
            partial.pieces.clear()
            partial.skipping = True
            partial.oversized = True

    def _finish_partial(
        self, direction: Direction, partial: _Partial, out: list[Transition]
    ) -> None:
        if not partial.skipping:
            line = b"".join(partial.pieces)
            if line.endswith(b"\n"):
                line = line[:-1]
            if direction == "server" or self.mapping.has_pending:
                self._feed(direction, line, out)
        partial.reset()
