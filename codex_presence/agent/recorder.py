"""``wrap --record``: the session written in the recording format, off the relay's hot path.

The format is :mod:`codex_presence.core.recording`'s; this module is the writer: a queue
that the relay fills from both of its threads in the order of the analysis, and a task that
frames the chunks into lines and writes them from a worker thread, waking only when there is
something to write.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict, deque
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import anyio
import anyio.abc

from codex_presence.core.recording import Source

__all__ = ["Recorder", "start_recorder"]

logger = logging.getLogger("codex_presence.relay")


@dataclass(frozen=True, slots=True)
class _Gap:
    """Bytes of one direction that the recorder dropped."""

    size: int = 0
    ends_a_line: bool = True


class Recorder:
    """``--record``: the session in the recording format, written off the hot path.

    The relay hands over each chunk with :meth:`add` once it was forwarded, under the
    analysis lock, so the queue is in the order of the analysis even across the two
    threads; :meth:`add` never blocks and never raises. A task frames the chunks into lines
    and writes them from a worker thread. The queue is bounded in bytes, not count: if the
    disk cannot keep up, chunks are dropped with one warning, and the file says where, with
    a gap line for the direction that lost bytes (the lines cut by it are left out whole; the
    other direction keeps every line). :meth:`finish` ends the file with an end line that
    dates the end of the session. Any write error (ENOSPC, EROFS, EIO, …) stops the
    recording with one warning.

    The writing task sleeps until there is something to write: :meth:`add` (from either
    thread) and :meth:`finish` wake it through a pipe, and only when it is waiting, so an
    idle session costs the recorder no wake-ups at all (:attr:`wakeups` counts them).
    """

    def __init__(self, path: str | os.PathLike[str], *, max_pending: int = 64 * 1024 * 1024):
        self.path = Path(path)
        self.max_pending = max_pending
        self._file: BinaryIO | None = None
        self._queue: deque[tuple[float, Source, bytes | _Gap]] = deque()
        # Chunks come from the event loop and from the server's worker thread.
        self._lock = threading.Lock()
        self._pending = 0
        self._failed = False
        self._dropped = False
        self._gaps: dict[Source, tuple[float, _Gap]] = {}
        """Bytes dropped per direction and not yet marked in the queue (from when)."""
        self._closing = False
        self._end_t: float | None = None
        self._partial: dict[Source, list[bytes]] = defaultdict(list)
        self._partial_t: dict[Source, float] = defaultdict(float)
        self._resync: dict[Source, bool] = defaultdict(bool)
        self._waiting = False
        """The writing task waits on the wake pipe: the next chunk must wake it."""
        self._wake_r = self._wake_w = -1
        self.wakeups = 0
        """How often the writing task woke up (for tests)."""

    def open(self) -> bool:
        """Open the file (and the wake pipe); False, with one warning, if it cannot be.
        Once it is open, :meth:`run` must run: it closes both."""
        try:
            self._file = self.path.open("wb")
        except OSError as exc:
            self._fail(exc)
            return False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        return True

    def _wake_locked(self) -> None:
        """Wake the writing task if it waits; under the lock, so that the pipe is never
        written after :meth:`run` closed it."""
        if self._waiting and self._wake_w >= 0:
            self._waiting = False
            with suppress(BlockingIOError):  # full: it is woken already
                os.write(self._wake_w, b"!")

    def add(self, t: float, direction: Source, chunk: bytes) -> None:
        """Queue a chunk (any thread; never blocks)."""
        if self._failed or self._closing:
            return
        with self._lock:
            if self._pending + len(chunk) > self.max_pending:
                if not self._dropped:
                    self._dropped = True
                    logger.warning("recording to %s cannot keep up; it has gaps", self.path)
                since, gap = self._gaps.get(direction, (t, _Gap()))
                self._gaps[direction] = (since, _Gap(gap.size + len(chunk), chunk[-1:] == b"\n"))
                return
            if direction in self._gaps:
                since, gap = self._gaps.pop(direction)
                self._queue.append((since, direction, gap))
            self._pending += len(chunk)
            self._queue.append((t, direction, chunk))
            self._wake_locked()

    async def run(self) -> None:
        """Write what is queued until :meth:`finish`, then the rest, then close the file."""
        try:
            while True:
                with self._lock:
                    batch = list(self._queue)
                    self._queue.clear()
                    self._pending = 0
                    self._waiting = not batch and not self._closing
                if batch:
                    if not self._failed:
                        await anyio.to_thread.run_sync(self._write, batch)
                elif self._closing:
                    break
                else:
                    await self._sleep()
            await anyio.to_thread.run_sync(self._close)
        finally:
            with self._lock:
                for fd in (self._wake_r, self._wake_w):
                    if fd >= 0:
                        os.close(fd)
                self._wake_r = self._wake_w = -1

    async def _sleep(self) -> None:
        """Until :meth:`add` or :meth:`finish` wakes us: no timer."""
        await anyio.wait_readable(self._wake_r)
        self.wakeups += 1
        with suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    def finish(self, t: float) -> None:
        """The session ended ``t`` seconds in; :meth:`run` returns once the rest is on
        disk."""
        self._end_t = t
        with self._lock:
            self._closing = True
            self._wake_locked()

    # -- worker thread -------------------------------------------------------------------

    def _write(self, batch: list[tuple[float, Source, bytes | _Gap]]) -> None:
        from codex_presence.core.recording import encode_entry

        out: list[bytes] = []
        for t, direction, chunk in batch:
            if isinstance(chunk, _Gap):
                out.append(self._mark_gap(t, direction, chunk))
                continue
            if self._resync[direction]:
                newline = chunk.find(b"\n")
                if newline < 0:
                    continue
                self._resync[direction] = False
                chunk = chunk[newline + 1 :]
            partial = self._partial[direction]
            if b"\n" not in chunk:
                if chunk:
                    partial.append(chunk)
                    self._partial_t[direction] = t
                continue
            lines = chunk.split(b"\n")
            if partial:
                partial.append(lines[0])
                lines[0] = b"".join(partial)
                partial.clear()
            if lines[-1]:
                partial.append(lines[-1])
                self._partial_t[direction] = t
            out.extend(encode_entry(t, direction, line) for line in lines[:-1])
        self._emit(out)

    def _mark_gap(self, t: float, direction: Source, gap: _Gap) -> bytes:
        """The gap line; the line the gap cut is left out whole: its start (the partial
        line) and, unless the dropped bytes ended a line, its end (up to the next newline
        of this direction)."""
        from codex_presence.core.recording import encode_gap

        self._partial[direction].clear()
        self._resync[direction] = not gap.ends_a_line
        return encode_gap(t, direction, gap.size)

    def _close(self) -> None:
        from codex_presence.core.recording import encode_end, encode_entry

        with self._lock:  # bytes dropped at the very end: no later chunk marked them
            last_gaps, self._gaps = self._gaps, {}
        out = [self._mark_gap(t, direction, gap) for direction, (t, gap) in last_gaps.items()]
        out += [
            encode_entry(self._partial_t[direction], direction, b"".join(partial))
            for direction, partial in self._partial.items()
            if partial and b"".join(partial)
        ]
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
            self._file.write(b"".join(out))
            self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        if not self._failed:
            self._failed = True
            logger.warning("recording to %s stopped: %s (the relay goes on)", self.path, exc)
        if self._file is not None:
            with suppress(OSError):
                self._file.close()
            self._file = None


def start_recorder(
    path: str | os.PathLike[str] | None, task_group: anyio.abc.TaskGroup
) -> Recorder | None:
    """A recorder of ``path`` writing from a task of ``task_group``; None without a path,
    or (said once) if the file cannot be opened."""
    if path is None:
        return None
    recorder = Recorder(path)
    if not recorder.open():
        return None
    task_group.start_soon(recorder.run)
    return recorder
