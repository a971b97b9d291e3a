"""Claude Code's own files, read for what the hooks do not say: the transcript, the
session status file and the prompt history.

* **The transcript** (``transcript_path`` of any hook; JSONL, appended in bursts) is read
  from where it stood when a hook first named it (a resumed session's history is not news),
  one appended chunk per poll. Only complete lines of the types the mapping and recordings
  keep (:data:`~codex_presence.core.claude.protocol.TRANSCRIPT_TYPES`) are parsed; the
  bookkeeping in between, most of the bytes, is skipped on a byte check.
  A path that cannot be a transcript (a NUL in it, not a regular file: a FIFO would block
  the open) is passed over, said once.
* **The session status file**, ``<config dir>/sessions/<pid>.json``: claude's pid is the
  child's when ``claude`` is the native binary; when it is a wrapper script, the file is the
  one of a process under the child (claude's tree, read from ``/proc/PID/task/*/children``,
  at most once a second) that names the hooks' ``session_id``: a few files looked up by
  name, never a scan of ``sessions/`` (4.0 s on the event loop at 100,000 files), and a
  claude that died, or another user's process, is not a candidate. A ``<pid>.json`` whose
  ``procStart`` is not the child's start time is a dead process's of the same pid: ignored
  until claude writes its own, as claude itself tells them apart. A session file must be
  ours (its owner checked on the open descriptor): one another user wrote is never read. It
  is read only when its size or mtime changed, or it was modified within :data:`RACY_NS` of
  its last read (a rewrite in the same clock tick keeps both), and handed on only when its
  content did. Like the transcript, every session file is opened non-blocking and read only
  if it is a regular file (a FIFO among them, planted or not, would block the open, and the
  event loop with it).
* **The prompt history**, ``<config dir>/history.jsonl`` (where the file leads: the
  earliest sign of a prompt, see :mod:`~codex_presence.core.claude.mapping`), shared by every
  session of the user: read from where it stood just before claude's spawn (``history_from``),
  only once this session's id is known (a hook's ``session_id`` or the session file's
  ``sessionId``; ``/clear`` gives claude a new one, said by both), and only its lines
  that carry that id are handed on, with the fields the mapping reads (``display``,
  ``timestamp``, ``sessionId``: not the pasted contents). It must be ours (owner checked on
  the open descriptor) and a regular file, like the others.

Sans timers: the shell calls :meth:`ClaudeFiles.poll` as often as it likes. Every error
(a file not there yet, gone, unreadable, caught mid-write) is a poll with nothing new.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

import orjson

from codex_presence.agent.claude.launch import HISTORY
from codex_presence.agent.watchdog import proc_stat
from codex_presence.core.claude.protocol import TRANSCRIPT_TYPES, transcript_line_may_matter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from codex_presence.core.claude.protocol import ClaudeSource

__all__ = ["HISTORY", "ClaudeFiles"]

logger = logging.getLogger("codex_presence.claude")

HISTORY_FIELDS = ("display", "timestamp", "sessionId")
"""What of a history line is handed on (the mapping reads the first two; the third says
whose it is in a recording)."""
MAX_CHUNK = 8 * 1024 * 1024
"""At most this much of the transcript per poll (the rest comes at the next)."""
MAX_LINE = 16 * 1024 * 1024
"""A longer transcript line (bookkeeping, in practice) is skipped unread."""
MAX_REST = 64 * 1024 * 1024
"""At most this much of the transcript is read at claude's exit
(:meth:`~ClaudeFiles.rest_of_transcript`), whatever another writer keeps appending."""
MAX_STATUS = 1024 * 1024
"""A session status file is a few hundred bytes; more than this is not one."""
_SCAN_EVERY = 1.0
RACY_NS = 1_000_000_000
"""A session file modified less than this before it was read is read again at the next
poll, whatever its stat says (file times are as coarse as a jiffy, or 2 s on some file
systems)."""


class ClaudeFiles:
    """Follows one claude process's transcript, session status file and prompt history."""

    def __init__(self, *, config: Path, pid: int, history_from: int | None = None) -> None:
        self._sessions = config / "sessions"
        self._history = None if history_from is None else _Tail(config / HISTORY, history_from)
        self._pid = pid
        self._session_id: str | None = None
        self._status: Path | None = None
        self._status_stat: tuple[int, int] | None = None
        self._status_seen: bytes | None = None
        self._scanned_at = float("-inf")
        self._transcript: _Tail | None = None
        self._passed_over: set[str] = set()
        """Transcript paths that cannot be followed (each said once)."""
        self._proc_start = _proc_start(pid)
        """The child's start time, as claude writes it (``procStart``), if /proc says it."""

    @property
    def sessions(self) -> Path:
        """The directory of claude's session status files."""
        return self._sessions

    @property
    def config(self) -> Path:
        """claude's config directory (its prompt history's)."""
        return self._sessions.parent

    @property
    def transcript_directory(self) -> Path | None:
        return None if self._transcript is None else self._transcript.path.parent

    @property
    def status_found(self) -> bool:
        """The session status file is known (it can be read at the next change)."""
        return self._status is not None

    def note_hook(self, msg: dict[str, Any]) -> None:
        """A hook names the session and its transcript: follow those."""
        self._note_session(msg.get("session_id"))
        path = msg.get("transcript_path")
        if not isinstance(path, str) or not path or path in self._passed_over:
            return
        if "\x00" in path:
            self._pass_over(path, "a NUL in its path")
        elif self._transcript is None or Path(path) != self._transcript.path:
            try:
                offset = Path(path).stat().st_size
            except OSError:
                offset = 0  # created at the first prompt: all of it is news
            self._transcript = _Tail(Path(path), offset)

    def _note_session(self, session: object) -> None:
        if isinstance(session, str) and session and session != self._session_id:
            self._session_id = session
            if self._status is not None and self._status.name != f"{self._pid}.json":
                self._status = None  # found by the old id: find it again

    def _pass_over(self, path: str, why: str) -> None:
        self._passed_over.add(path)
        if self._transcript is not None and self._transcript.path == Path(path):
            self._transcript = None
        logger.warning(
            "claude's transcript %r cannot be followed (%s); going on without it", path[:200], why
        )

    def poll(self, now: float) -> list[tuple[ClaudeSource, dict[str, Any]]]:
        """What changed since the last poll: this session's new prompts in claude's
        history, the session file's new content, if any, then the transcript's new
        entries."""
        out: list[tuple[ClaudeSource, dict[str, Any]]] = []
        status = self._read_status(now)
        if status is not None:
            self._note_session(status.get("sessionId"))
        # The history first: a prompt's line comes before the file's busy (which it leads).
        out.extend(("history", line) for line in self._read_history())
        if status is not None:
            out.append(("session", status))
        out.extend(("transcript", entry) for entry in self._read_transcript())
        return out

    # -- the session status file ---------------------------------------------------------

    def _status_path(self, now: float) -> Path | None:
        if self._status is not None:
            return self._status
        mine = self._sessions / f"{self._pid}.json"
        if _ours(mine):
            self._status = mine
        elif self._session_id is not None and now - self._scanned_at >= _SCAN_EVERY:
            self._scanned_at = now
            self._status = self._find_by_session_id(self._session_id)
        return self._status

    def _find_by_session_id(self, session: str) -> Path | None:
        """The file of ``session``: that of a process under the child (claude behind a
        wrapper script) which names it, looked up by pid (see the module doc)."""
        for pid in process_tree(self._pid):
            path = self._sessions / f"{pid}.json"
            try:
                read = _read_regular(path, MAX_STATUS)
                content = None if read is None else orjson.loads(read[1])
            except (OSError, orjson.JSONDecodeError):
                continue
            if isinstance(content, dict) and content.get("sessionId") == session:
                logger.debug("claude's session file is %s", path.name)
                return path
        return None

    def _read_status(self, now: float) -> dict[str, Any] | None:
        path = self._status_path(now)
        if path is None:
            return None
        try:
            read = _read_regular(path, MAX_STATUS, unless=self._status_stat)
            if read is None:
                return None
            st, data = read
        except FileNotFoundError:
            self._status = self._status_stat = None  # claude is leaving (or rewriting it)
            return None
        except OSError as exc:
            logger.debug("reading %s: %s", path, exc)
            return None
        try:
            content = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None  # caught mid-write: the next poll reads it again
        # Racy, as git calls it: a file written within a clock tick of its last write can
        # keep its mtime (and, busy or idle, its size), so a stat that recent is no proof
        # that nothing changed; such a file is read again at the next poll.
        recent = time.time_ns() - st.st_mtime_ns < RACY_NS
        self._status_stat = None if recent else (st.st_mtime_ns, st.st_size)
        if data == self._status_seen or not isinstance(content, dict):
            return None
        if path.name == f"{self._pid}.json" and self._left_behind(content):
            return None  # an earlier process's of the same pid, until claude writes its own
        self._status_seen = data
        return content

    def _left_behind(self, content: dict[str, Any]) -> bool:
        """Whether ``content`` is another process's: its ``procStart`` is not our child's."""
        theirs = content.get("procStart")
        if self._proc_start is None or not isinstance(theirs, (str, int)):
            return False  # nothing to tell them apart by: taken
        return str(theirs) != self._proc_start

    # -- the transcript ------------------------------------------------------------------

    def _read_transcript(self, *, to_end: bool = False) -> list[dict[str, Any]]:
        """The transcript's entries since the last read: a chunk (a poll), or ``to_end``
        (:meth:`rest_of_transcript`)."""
        tail = self._transcript
        if tail is None:
            return []
        try:
            lines = tail.read_to_end(MAX_REST) if to_end else tail.read()
        except NotRegular:
            self._pass_over(str(tail.path), "not a regular file")
            return []
        return [entry for line in lines if (entry := self._entry(line)) is not None]

    def rest_of_transcript(self) -> list[dict[str, Any]]:
        """The transcript's entries that no poll read, to its end (claude has exited: what
        the polls left, a line written just before the hook that stopped them, say); at
        most :data:`MAX_REST` more bytes."""
        return self._read_transcript(to_end=True)

    # -- the prompt history --------------------------------------------------------------

    def _read_history(self) -> list[dict[str, Any]]:
        """This session's new lines of claude's prompt history (see the module doc)."""
        tail, session = self._history, self._session_id
        if tail is None or session is None:
            return []  # whose lines are ours is not known yet: they wait
        try:
            lines = tail.read(owned=True)
        except NotRegular:
            logger.warning("claude's %s is not a regular file of ours: not read", HISTORY)
            self._history = None
            return []
        mark = session.encode()
        out: list[dict[str, Any]] = []
        for line in lines:
            if mark not in line:  # another session's (most bytes, on a busy machine)
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("sessionId") == session:
                out.append({key: entry[key] for key in HISTORY_FIELDS if key in entry})
        return out

    @staticmethod
    def _entry(line: bytes) -> dict[str, Any] | None:
        if not transcript_line_may_matter(line):
            return None
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(entry, dict):
            return None
        kind = entry.get("type")
        if not isinstance(kind, str) or kind.encode() not in TRANSCRIPT_TYPES:
            return None
        return entry


class NotRegular(OSError):
    """A followed path is not a regular file (of ours, where that was asked)."""


class _Tail:
    """The complete lines appended to a file since an offset, a chunk of at most
    :data:`MAX_CHUNK` per read; a line over :data:`MAX_LINE` is skipped."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self._offset = offset
        self._pending = bytearray()
        self._skipping = False
        """The line in progress is over MAX_LINE: drop up to its end."""

    def read(self, *, owned: bool = False) -> list[bytes]:
        """The lines completed since the last read ([] if the file is not there, or on any
        error reading it); raises :class:`NotRegular` if it is not a regular file (another
        user's too, if ``owned``). Opened non-blocking: a FIFO would block the open."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []  # not there yet, or gone
        with os.fdopen(fd, "rb") as stream:
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or (owned and st.st_uid != os.geteuid()):
                    raise NotRegular(str(self.path))
                if st.st_size < self._offset:  # replaced by a shorter file: start it over
                    self._offset = 0
                    self._pending.clear()
                if st.st_size == self._offset:
                    return []
                stream.seek(self._offset)
                chunk = stream.read(MAX_CHUNK)
            except NotRegular:
                raise
            except OSError:
                return []
        self._offset += len(chunk)
        return self._lines(chunk)

    def read_to_end(self, limit: int) -> list[bytes]:
        """The lines completed since the last read, chunk after chunk until the file's end
        or ``limit`` bytes read (:meth:`read`'s errors)."""
        out: list[bytes] = []
        read = 0
        while read < limit:
            before = self._offset
            out += self.read()
            if self._offset == before:
                break
            read += max(0, self._offset - before)
        return out

    def _lines(self, chunk: bytes) -> list[bytes]:
        lines = chunk.split(b"\n")
        last = lines.pop()  # the line in progress (b"" after a newline)
        out: list[bytes] = []
        for piece in lines:
            if self._skipping:
                self._skipping = False
                continue
            out.append(bytes(self._pending) + piece if self._pending else piece)
            self._pending.clear()
        if not self._skipping:
            self._pending += last
            if len(self._pending) > MAX_LINE:
                self._pending.clear()
                self._skipping = True
        return out


def _proc_start(pid: int) -> str | None:
    """``pid``'s start time in clock ticks since boot (``/proc/PID/stat``'s 22nd field, after
    a name that may hold spaces and parentheses); None where /proc does not say."""
    try:
        start = proc_stat(pid)[19]
    except (OSError, IndexError):
        return None
    return start.decode() if start.isdigit() else None


def _ours(path: Path) -> bool:
    """A regular file of ours (another user's never counts as claude's)."""
    try:
        info = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


MAX_TREE = 1000
"""Processes under the child looked at, at most (a fork bomb costs no more)."""


def process_tree(pid: int) -> list[int]:
    """The processes under ``pid``, children before grandchildren, from
    ``/proc/PID/task/TID/children`` (Linux): ``pid``'s tree alone is read, not every
    process's; [] where /proc does not say."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < MAX_TREE:
        parent = todo.pop(0)
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                with (task / "children").open("rb") as listing:
                    children = [int(child) for child in listing.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found[:MAX_TREE]


def _read_regular(
    path: Path, limit: int, *, unless: tuple[int, int] | None = None
) -> tuple[os.stat_result, bytes] | None:
    """``path``'s status and first ``limit`` bytes, opened non-blocking; None if it is not
    a regular file of ours (another user's is never read), or if its ``(mtime_ns, size)``
    is ``unless`` (unchanged). Raises OSError (FileNotFoundError when it is gone)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        if (st.st_mtime_ns, st.st_size) == unless:
            return None
        return st, stream.read(limit)
