"""Chunks in, the few lines that can matter out: the relay's pre-filter for the mapping.

Sans-I/O, and standard library only at import (``wrap`` frames its first bytes before the
mapping is loaded). The relay hands :class:`ChunkAnalyzer` each chunk it has just
forwarded, in whatever pieces the pipes produced, and gets back the transitions those
bytes caused. The analyzer owns line framing (the partial last line of each direction,
bounded) and the decision which complete lines reach :meth:`CodexMapping.feed_line` at all.

Why it exists: ``feed_line`` costs about a microsecond even for a line it skips, and a busy
app-server writes thousands of deltas per megabyte. So the analyzer skips in bulk, at C
speed (one regular-expression scan per chunk, no Python per skipped line), what it can
prove ``feed_line`` would skip anyway, and feeds everything else, so that the result is the
same as feeding every line one by one (the property ``tests/unit/test_lines.py`` checks):

* a line that does not start with ``{`` cannot matter, in either direction (the leading-byte
  rule, :func:`~codex_presence.core.codex.protocol.skips_unparsed`): garbage, bare
  newlines, 2-byte lines and the like cost the scan and nothing else.
* server lines: ``feed_line`` decides on the first bytes (codex writes ``{"method":"…"`` or
  ``{"id":`` first). The scan finds the lines that start with ``{`` but not with one of
  :data:`HOT_SKIPPED_PREFIXES` (the frequent kinds that change nothing) nor with any other
  method that cannot change the state; only those are sliced out and fed. A partial line
  whose prefix already shows it is irrelevant is not buffered at all, however long it gets.
* client lines matter only while the mapping waits for answers to server requests
  (``CodexMapping.has_pending``), and only those starting with ``{``.
* a line longer than ``max_line`` that would have to be parsed is dropped from analysis
  (counted in :class:`AnalyzerStats`, logged at debug). It was relayed all the same.

Start-up (``deferred=True``): until :meth:`ChunkAnalyzer.attach` gives it the mapping, the
analyzer frames and filters as usual but keeps the lines it would feed, in order, up to
``max_deferred`` bytes; ``attach`` feeds them. If they do not fit, the bytes from there to
``attach`` are a *gap*, as in a recording: they are not analysed, the line the gap cut is
left out whole, and ``attach`` closes every handle (cause ``gap``: what would have closed
them may be in the gap). :attr:`ChunkAnalyzer.in_gap` tells the recorder to leave out the
same bytes, so that the replay is the live timeline.
"""

from __future__ import annotations

import logging
import operator
import re

from codex_presence.core.codex.protocol import (
    ITEM_TYPE_PREFIX,
    METHOD_PREFIX,
    PASSIVE_ITEM_TYPES,
    REQUEST_ID_INFIX,
    RESPONSE_PREFIX,
    STATE_METHODS,
    TOOL_ITEM_TYPES,
    Direction,
    skips_unparsed,
)
from codex_presence.core.feeder import MAX_LINE

TYPE_CHECKING = False  # typing is not loaded before the child's first bytes are copied
if TYPE_CHECKING:
    from codex_presence.core.activity import Transition
    from codex_presence.core.codex.mapping import CodexMapping

__all__ = [
    "DEFAULT_MAX_DEFERRED",
    "DEFAULT_MAX_LINE",
    "HOT_SKIPPED_PREFIXES",
    "AnalyzerStats",
    "ChunkAnalyzer",
    "candidate_starts",
    "recording_candidates",
]

logger = logging.getLogger("codex_presence.lines")

DEFAULT_MAX_LINE = MAX_LINE
"""Longest line (bytes) that is still parsed; longer ones are relayed, never analysed."""
DEFAULT_MAX_DEFERRED = DEFAULT_MAX_LINE
"""Bytes of lines kept for the mapping before it is attached (``wrap``'s start-up): the
longest line that is analysed fits."""

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


def _skipped_after_brace() -> bytes:
    """A regular expression for what follows the ``{`` of a server line that cannot change
    the state: a hot prefix, or any other notification the mapping skips unparsed (a method
    with no escape in it that is not a state method, not followed by a request's id; see
    ``skips_unparsed``)."""
    hot = b"|".join(re.escape(prefix[1:]) for prefix in HOT_SKIPPED_PREFIXES)
    states = b"|".join(re.escape(m.encode()) for m in sorted(STATE_METHODS, key=len, reverse=True))
    method = re.escape(METHOD_PREFIX[1:]) + b"(?!(?:" + states + b')")[^"\\\\\\n]*"'
    return hot + b"|" + method + b"(?!" + re.escape(REQUEST_ID_INFIX[1:]) + b")"


def candidate_starts(head: bytes = b"") -> re.Pattern[bytes]:
    """A pattern for the newline and ``{`` that start a line worth a look: one that does
    not begin with ``{`` + ``head`` (a regular expression; the recording format puts
    ``"t":…,"from":"server","msg":`` there) followed by a line that cannot change the state.
    The line starts one byte after the match's start."""
    return re.compile(b"\\n\\{(?!" + head + (b"\\{" if head else b"") + b"(?:" + _SKIP + b"))")


_RECORDING_SERVER_HEAD = rb'"t":[-+0-9.eE]+,"from":"server","msg":'


def recording_candidates(recording: bool) -> re.Pattern[bytes]:
    """:func:`candidate_starts` for a file ``replay`` reads: a recording (the server's
    message lines, as the recorder writes them) or, not ``recording``, plain app-server
    stdout."""
    return candidate_starts(_RECORDING_SERVER_HEAD if recording else b"")


_SKIP = _skipped_after_brace()
_CANDIDATE_START = candidate_starts()
_CLIENT_START = re.compile(b"\\n\\{")
_line_start = operator.methodcaller("start")


class AnalyzerStats:
    """What the analyzer saw; for debug logs, tests and the benchmark. (Plain classes here,
    not dataclasses: ``wrap`` loads this module before its child's first bytes, and
    :mod:`dataclasses` costs more to import than the rest of the byte path.)"""

    __slots__ = ("bytes", "chunks", "deferred", "fed", "gap", "oversized")

    def __init__(self) -> None:
        self.chunks = 0
        self.bytes = 0
        self.fed = 0
        """Complete lines handed to ``CodexMapping.feed_line``."""
        self.oversized = 0
        """Lines longer than ``max_line`` dropped from analysis (they were relayed)."""
        self.deferred = 0
        """Lines kept for the mapping before it was attached."""
        self.gap = 0
        """Bytes left out of the analysis because the deferred lines overflowed."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"AnalyzerStats({fields})"


class _Partial:
    """The unfinished last line of one direction."""

    __slots__ = ("pieces", "size", "skipping")

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.size = 0
        self.skipping = False
        """The line is known not to matter (or is too long): its bytes are not kept."""

    def reset(self) -> None:
        self.pieces.clear()
        self.size = 0
        self.skipping = False

    @property
    def empty(self) -> bool:
        return self.size == 0 and not self.skipping


class _Gap:
    """Bytes of one direction left out of the analysis (see the module's doc)."""

    __slots__ = ("ends_a_line", "size")

    def __init__(self) -> None:
        self.size = 0
        self.ends_a_line = True


class ChunkAnalyzer:
    """Frames both directions into lines and feeds the mapping only what can matter."""

    def __init__(
        self,
        mapping: CodexMapping | None = None,
        *,
        max_line: int = DEFAULT_MAX_LINE,
        deferred: bool = False,
        max_deferred: int = DEFAULT_MAX_DEFERRED,
    ):
        if mapping is None and not deferred:
            from codex_presence.core.codex.mapping import CodexMapping

            mapping = CodexMapping()
        self._mapping = mapping
        self.max_line = max_line
        self.max_deferred = max_deferred
        self.stats = AnalyzerStats()
        self._partial: dict[Direction, _Partial] = {"client": _Partial(), "server": _Partial()}
        self._closed = False
        self._deferred: list[tuple[Direction, bytes]] = []
        self._deferred_size = 0
        self._gaps: dict[Direction, _Gap] | None = None
        """Set once the deferred lines overflowed: what each direction lost since."""
        self._resync: dict[Direction, bool] = {"client": False, "server": False}
        """The direction's next bytes up to a newline end a line a gap cut: left out."""

    @property
    def mapping(self) -> CodexMapping:
        assert self._mapping is not None, "the mapping is not attached yet"
        return self._mapping

    @property
    def attached(self) -> bool:
        return self._mapping is not None

    @property
    def in_gap(self) -> bool:
        """Bytes fed now are left out of the analysis (see the module's doc)."""
        return self._gaps is not None

    def lose(self, direction: Direction, size: int, *, ends_a_line: bool) -> None:
        """``size`` bytes of ``direction`` crossed that never reach the analyzer (the relay
        could not keep them for it while it loaded): a gap, as when the kept lines
        overflow, until :meth:`attach`."""
        if self._gaps is None:
            self._gaps = {"client": _Gap(), "server": _Gap()}
        gap = self._gaps[direction]
        gap.size += size
        gap.ends_a_line = ends_a_line

    @property
    def nothing_to_analyse(self) -> bool:
        """No line that could change the state has crossed yet (none kept, none begun, no
        gap): only server lines can, and client lines matter only once one has."""
        server = self._partial["server"]
        return not self._deferred and self._gaps is None and (server.empty or server.skipping)

    def attach(self, mapping: CodexMapping) -> list[Transition]:
        """Give the analyzer its mapping: the lines kept until now are fed, in order, and a
        gap (if the kept lines overflowed) closes every handle; returns the transitions."""
        self._mapping = mapping
        out: list[Transition] = []
        deferred, self._deferred, self._deferred_size = self._deferred, [], 0
        for direction, line in deferred:
            self._feed(direction, line, out)
        if self._gaps is not None:
            gaps, self._gaps = self._gaps, None
            for direction, gap in gaps.items():
                if gap.size:
                    self.stats.gap += gap.size
                    self._partial[direction].reset()  # the line the gap cut: left out whole
                    self._resync[direction] = not gap.ends_a_line
            logger.warning(
                "%d bytes crossed before the analysis was ready and did not fit in its "
                "start-up buffer; they were relayed, not analysed: the state starts afresh",
                self.stats.gap,
            )
            transition = mapping.close("gap")
            if transition is not None:
                out.append(transition)
        return out

    def feed(self, direction: Direction, chunk: bytes) -> list[Transition]:
        """Account for ``chunk`` (bytes as they crossed the wire); returns the transitions."""
        if self._closed or not chunk:
            return []
        self.stats.chunks += 1
        self.stats.bytes += len(chunk)
        if self._gaps is not None:
            gap = self._gaps[direction]
            gap.size += len(chunk)
            gap.ends_a_line = chunk.endswith(b"\n")
            return []
        out: list[Transition] = []
        partial = self._partial[direction]
        pos = 0
        if self._resync[direction]:
            nl = chunk.find(b"\n")
            if nl < 0:
                return out
            self._resync[direction] = False
            pos = nl + 1
        elif not partial.empty:
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
            elif self._mapping is None or self._mapping.has_pending:
                self._client_lines(chunk, pos, last, out)
            pos = last + 1
        if pos < len(chunk):
            self._extend(direction, partial, chunk[pos:] if pos else chunk)
        if self._deferred_size > self.max_deferred:
            self._gaps = {"client": _Gap(), "server": _Gap()}
        return out

    def close(self, cause: str = "eof") -> list[Transition]:
        """End of both streams: an unterminated last line still counts, then all closes."""
        if self._closed:
            return []
        out = [] if self._mapping is not None else self.attach(_default_mapping())
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
        if self._mapping is None:
            self.stats.deferred += 1
            self._deferred.append((direction, line))
            self._deferred_size += len(line)
            return
        self.stats.fed += 1
        transition = self._mapping.feed_line(direction, line)
        if transition is not None:
            out.append(transition)

    def _oversized(self, direction: Direction, size: int) -> None:
        self.stats.oversized += 1
        logger.debug("a %s line of %d+ bytes is too long to analyse; relayed only", direction, size)

    def _server_lines(self, chunk: bytes, start: int, last: int, out: list[Transition]) -> None:
        # The complete lines are chunk[start:last + 1]. One regular-expression scan finds
        # the newlines followed by a line that may matter: the starts of the few to feed.
        if start == 0:  # the first line is not preceded by a newline in this chunk
            if chunk.startswith(b"{") and not skips_unparsed(chunk[: chunk.find(b"\n")]):
                self._feed("server", chunk[: chunk.find(b"\n")], out)
        else:
            start -= 1
        # Slice all the candidates first, then feed them together: the mapping's code
        # stays hot in the CPU's caches instead of being evicted by the scan in between
        # (measured: the mapping's cost per MB falls by a third).
        find = chunk.find
        lines = [
            chunk[begin + 1 : find(b"\n", begin + 1)]
            for begin in map(_line_start, _CANDIDATE_START.finditer(chunk, start, last))
        ]
        for line in lines:
            self._feed("server", line, out)

    def _client_lines(self, chunk: bytes, start: int, last: int, out: list[Transition]) -> None:
        find = chunk.find
        if start == 0:
            begins = [-1] if chunk.startswith(b"{") else []
        else:
            start -= 1
            begins = []
        begins += map(_line_start, _CLIENT_START.finditer(chunk, start, last))
        for begin in begins:
            if self._mapping is not None and not self._mapping.has_pending:
                return  # nothing left to answer: the rest cannot matter
            self._feed("client", chunk[begin + 1 : find(b"\n", begin + 1)], out)

    def _extend(self, direction: Direction, partial: _Partial, data: bytes) -> None:
        if partial.skipping:
            partial.size += len(data)
            return
        partial.pieces.append(data)
        partial.size += len(data)
        if partial.size <= 4096:
            head = b"".join(partial.pieces) if len(partial.pieces) > 1 else partial.pieces[0]
            if skips_unparsed(head) if direction == "server" else head[:1] not in b"{":
                partial.pieces.clear()
                partial.skipping = True
                return
        if partial.size > self.max_line + 1:  # + 1: the newline is not part of the line
            self._oversized(direction, partial.size)
            partial.pieces.clear()
            partial.skipping = True

    def _finish_partial(
        self, direction: Direction, partial: _Partial, out: list[Transition]
    ) -> None:
        if not partial.skipping and (
            direction == "server" or self._mapping is None or self._mapping.has_pending
        ):
            pieces = partial.pieces
            if pieces[-1].endswith(b"\n"):  # the newline off the last piece: one copy in all
                pieces[-1] = pieces[-1][:-1]
            self._feed(direction, b"".join(pieces), out)
        partial.reset()


def _default_mapping() -> CodexMapping:
    from codex_presence.core.codex.mapping import CodexMapping

    return CodexMapping()
