"""``wrap --record``: the session written in the recording format, off the relay's hot path.

The format is :mod:`codex_presence.core.recording`'s; this module is the writer: a queue
that the relay fills from both of its threads in the order of the analysis, and a thread of
its own that frames the chunks into lines and writes them, sleeping while there is nothing
to write. The file starts with the format's version line and ends with the end line only
when the session ended (:meth:`Recorder.finish`) and everything before it reached the file:
a recording that lacks it stops mid-session. Standard library only at import: ``wrap``
starts recording from its first byte, before anything else is loaded.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict, deque
from contextlib import suppress

from codex_presence.agent.descriptors import open_private
from codex_presence.core.feeder import MAX_LINE as DEFAULT_MAX_LINE

TYPE_CHECKING = False  # typing is not loaded before the child's first bytes are copied
if TYPE_CHECKING:
    from typing import BinaryIO

    from codex_presence.core.recording import Source

__all__ = ["Recorder", "start_recorder"]

logger = logging.getLogger("codex_presence.relay")

DEFAULT_MAX_PENDING = 16 * 1024 * 1024
"""Bytes queued for the writer at most; beyond, chunks are dropped (a gap line says so)."""


class _Gap:
    """Bytes of one direction that the recorder dropped. (Plain classes here, not
    dataclasses: ``wrap`` loads this module before its child's first bytes.)"""

    __slots__ = ("ends_a_line", "size")

    def __init__(self, size: int = 0, ends_a_line: bool = True) -> None:
        self.size = size
        self.ends_a_line = ends_a_line


class _Skip:
    """More bytes of a line already too long to record: only their count is queued."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class _Ready:
    """A line already in the recording format (a connection line, say)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class _Closed:
    """The live analysis closed every handle here."""

    __slots__ = ("cause",)

    def __init__(self, cause: str) -> None:
        self.cause = cause


class _Line:
    """The unfinished last line of one direction, kept up to ``max_line`` bytes; past
    that only its size is counted (the recording says how long it was, not what)."""

    __slots__ = ("oversized", "pieces", "resync", "size", "t")

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.size = 0
        self.t = 0.0
        self.oversized = False
        self.resync = False
        """The next bytes up to a newline end a line a gap cut: left out."""

    def extend_size(self, size: int, t: float) -> None:
        """More of a line known to be too long: its size only."""
        self.t = t
        self.size += size
        self.pieces.clear()
        self.oversized = True

    def extend(self, data: bytes, t: float, max_line: int) -> None:
        self.t = t
        self.size += len(data)
        if self.oversized:
            return
        if self.size > max_line:
            self.pieces.clear()
            self.oversized = True
        else:
            self.pieces.append(data)

    def reset(self) -> None:
        self.pieces.clear()
        self.size = 0
        self.oversized = False


class Recorder:
    """``--record``: the session in the recording format, written off the hot path.

    The relay hands over each chunk with :meth:`add` once it was forwarded, under the
    analysis lock, so the queue is in the order of the analysis even across the two
    threads; :meth:`add` never blocks and never raises. A thread of its own
    (:meth:`start`) frames the chunks into lines and writes them. The queue is bounded in
    bytes, not count: if the disk cannot keep up, chunks are dropped with one warning, and
    the file says where, with a gap line for the direction that lost bytes (the lines cut
    by it are left out whole; the other direction keeps every line); :meth:`drop` leaves
    bytes out the same way on purpose. A line longer than ``max_line`` (the longest the
    relay analyses) is not kept: an ``oversized`` line gives its size. So memory stays
    bounded by ``max_pending`` + ``max_line``, whatever the stream. :meth:`finish` ends the
    file with an end line that dates the end of the session. Any write error (ENOSPC,
    EROFS, EIO, …) stops the recording with one warning.

    The writer sleeps on a condition until there is something to write, so an idle session
    costs the recorder no wake-ups at all (:attr:`wakeups` counts them).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_line: int = DEFAULT_MAX_LINE,
    ):
        self.path = os.fspath(path)
        self.max_pending = max_pending
        self.max_line = max_line
        self._file: BinaryIO | None = None
        self._queue: deque[tuple[float, Source, bytes | _Gap | _Skip | _Closed | _Ready]] = deque()
        # Chunks come from both relay threads; the writer takes them.
        self._ready = threading.Condition(threading.Lock())
        self._pending = 0
        self._failed = False
        self._dropped = False
        self._gaps: dict[Source, tuple[float, _Gap]] = {}
        """Bytes dropped per direction and not yet marked in the queue (from when)."""
        self._line_size: dict[Source, int] = defaultdict(int)
        """Bytes queued of each direction's unfinished line, as far as the queue goes: past
        ``max_line`` a chunk without a newline is queued as its size alone."""
        self._closing = False
        self._end_t: float | None = None
        self._lines: dict[Source, _Line] = defaultdict(_Line)
        self._thread: threading.Thread | None = None
        self.wakeups = 0
        """How often the writer woke up (for tests)."""

    def open(self) -> bool:
        """Create the file (0600); False, with one warning, if it cannot be. Once it is
        open, :meth:`start` must follow: the writer closes it."""
        # The encoder (orjson) loads here, on the caller's thread: in the writer it could
        # wait on the import lock of a module wrap's low-priority loader is importing.
        from codex_presence.core.recording import encode_version

        try:
            self._file = open(open_private(self.path), "wb", buffering=1 << 20)  # noqa: SIM115
            self._file.write(encode_version())
        except OSError as exc:
            self._fail(exc)
            return False
        return True

    def start(self) -> None:
        """Start the writer thread."""
        self._thread = threading.Thread(target=self._run, name="codex-presence-recorder")
        self._thread.daemon = True  # joined by the relay; never keeps a dying wrap alive
        self._thread.start()

    def add(self, t: float, direction: Source, chunk: bytes) -> None:
        """Queue a chunk (any thread; never blocks)."""
        if self._failed or self._closing or not chunk:
            return
        with self._ready:
            newline = chunk.rfind(b"\n")
            if newline < 0 and self._line_size[direction] > self.max_line:
                item: bytes | _Skip = _Skip(len(chunk))  # costs no memory: never dropped
            elif self._pending + len(chunk) > self.max_pending:
                if not self._dropped:
                    self._dropped = True
                    logger.warning("recording to %s cannot keep up; it has gaps", self.path)
                self._lose_locked(t, direction, len(chunk), newline == len(chunk) - 1)
                return
            else:
                item = chunk
                self._pending += len(chunk)
            if direction in self._gaps:
                since, gap = self._gaps.pop(direction)
                self._queue.append((since, direction, gap))
            if newline < 0:
                self._line_size[direction] += len(chunk)
            else:
                self._line_size[direction] = len(chunk) - newline - 1
            self._queue.append((t, direction, item))
            self._ready.notify()

    def add_line(self, line: bytes) -> None:
        """Queue a line already in the recording format, in its place among the chunks
        (any thread; never blocks). Such lines are few and small: they are never dropped."""
        if self._failed or self._closing:
            return
        with self._ready:
            self._queue.append((0.0, "server", _Ready(line)))
            self._ready.notify()

    def drop(self, t: float, direction: Source, chunk: bytes) -> None:
        """Leave a chunk out on purpose (the analysis left it out too): a gap line."""
        self.lose(t, direction, len(chunk), ends_a_line=chunk.endswith(b"\n"))

    def lose(self, t: float, direction: Source, size: int, *, ends_a_line: bool) -> None:
        """``size`` bytes of ``direction`` left out from ``t`` on (they end a line, or cut
        one): a gap line, before the next chunk of that direction."""
        if self._failed or self._closing or not size:
            return
        with self._ready:
            self._lose_locked(t, direction, size, ends_a_line)

    def _lose_locked(self, t: float, direction: Source, size: int, ends_a_line: bool) -> None:
        since, gap = self._gaps.get(direction, (t, _Gap()))
        self._gaps[direction] = (since, _Gap(gap.size + size, ends_a_line))
        # The line the gap cuts is left out up to its newline: skipped, not queued.
        self._line_size[direction] = 0 if ends_a_line else self.max_line + 1

    def mark_closed(self, t: float, cause: str) -> None:
        """The live analysis closed every handle now (after the gaps so far)."""
        if self._failed or self._closing:
            return
        with self._ready:
            self._flush_gaps_locked()
            self._queue.append((t, "server", _Closed(cause)))
            self._ready.notify()

    def finish(self, t: float) -> None:
        """The session ended ``t`` seconds in; the writer ends once the rest is on disk
        (:meth:`join`)."""
        self._end_t = t
        with self._ready:
            self._closing = True
            self._ready.notify()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the writer to end; True if it has (or never started)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _flush_gaps_locked(self) -> None:
        for direction, (since, gap) in sorted(self._gaps.items()):
            self._queue.append((since, direction, gap))
        self._gaps.clear()

    # -- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._queue and not self._closing:
                        self._ready.wait()
                        self.wakeups += 1
                    batch = list(self._queue)
                    self._queue.clear()
                    self._pending = 0
                    if not batch:
                        self._flush_gaps_locked()  # bytes dropped at the very end
                        batch = list(self._queue)
                        self._queue.clear()
                        done = True
                    else:
                        done = False
                if not self._failed:
                    self._write(batch)
                if done:
                    break
            self._close()
        except Exception:  # a bug here must never reach the relay
            logger.exception("recording to %s failed", self.path)
            self._failed = True
            self._close()

    def _write(
        self, batch: list[tuple[float, Source, bytes | _Gap | _Skip | _Closed | _Ready]]
    ) -> None:
        from codex_presence.core.recording import encode_closed, encode_gap

        out: list[bytes] = []
        for t, direction, item in batch:
            if isinstance(item, _Gap):
                line = self._lines[direction]
                line.reset()  # the line the gap cut is left out whole: its start…
                line.resync = not item.ends_a_line  # …and its end
                out.append(encode_gap(t, direction, item.size))
            elif isinstance(item, _Closed):
                out.append(encode_closed(t, item.cause))
            elif isinstance(item, _Ready):
                out.append(item.data)
            elif isinstance(item, _Skip):
                line = self._lines[direction]
                if not line.resync:  # else: still the line a gap cut, left out anyway
                    line.extend_size(item.size, t)
            else:
                self._frame(t, direction, item, out)
        self._emit(out)

    def _frame(self, t: float, direction: Source, chunk: bytes, out: list[bytes]) -> None:
        line = self._lines[direction]
        if line.resync:
            newline = chunk.find(b"\n")
            if newline < 0:
                return
            line.resync = False
            chunk = chunk[newline + 1 :]
        if b"\n" not in chunk:
            if chunk:
                line.extend(chunk, t, self.max_line)
            return
        pieces = chunk.split(b"\n")
        if line.size:
            line.extend(pieces[0], t, self.max_line)
            self._encode_line(direction, line, out)
        else:
            self._encode(t, direction, pieces[0], out)
        for piece in pieces[1:-1]:
            self._encode(t, direction, piece, out)
        if pieces[-1]:
            line.extend(pieces[-1], t, self.max_line)

    def _encode_line(self, direction: Source, line: _Line, out: list[bytes]) -> None:
        """The unfinished line, now complete (or the session's end)."""
        if line.oversized:
            from codex_presence.core.recording import encode_oversized

            out.append(encode_oversized(line.t, direction, line.size))
        else:
            whole = line.pieces[0] if len(line.pieces) == 1 else b"".join(line.pieces)
            line.pieces.clear()  # one copy of a long line at a time
            self._encode(line.t, direction, whole, out)
        line.reset()

    def _encode(self, t: float, direction: Source, data: bytes, out: list[bytes]) -> None:
        from codex_presence.core.recording import encode_entry_parts, encode_oversized

        if len(data) > self.max_line:
            out.append(encode_oversized(t, direction, len(data)))
        else:
            out += encode_entry_parts(t, direction, data)

    def _close(self) -> None:
        from codex_presence.core.recording import encode_end

        out: list[bytes] = []
        if not self._failed:
            for direction, line in self._lines.items():
                if line.size:
                    self._encode_line(direction, line, out)
            if self._end_t is not None:
                out.append(encode_end(self._end_t))
            self._emit(out)
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._fail(exc)
            self._file = None

    def _emit(self, out: list[bytes]) -> None:
        if not out or self._failed or self._file is None:
            return
        try:
            self._file.writelines(out)  # long lines go to the file as they are, uncopied
            self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        if not self._failed:
            self._failed = True
            reason = exc.strerror or exc
            logger.warning("recording to %s stopped: %s (the session goes on)", self.path, reason)
        if self._file is not None:
            with suppress(OSError):
                self._file.close()
            self._file = None


def start_recorder(
    path: str | os.PathLike[str] | None, *, max_line: int = DEFAULT_MAX_LINE
) -> Recorder | None:
    """A recorder of ``path``, writing from its thread; None without a path, or (said once)
    if the file cannot be opened. :meth:`Recorder.finish` and :meth:`Recorder.join` end it."""
    if path is None:
        return None
    recorder = Recorder(path, max_line=max_line)
    if not recorder.open():
        return None
    recorder.start()
    return recorder
