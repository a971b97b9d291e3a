"""The follower of gemini's chat file: the lines it appends, the few that can matter.

gemini names the session's chat file (JSON lines) in every hook event
(``transcript_path``). Only one of its lines moves the state: the ``info`` line
``Request cancelled.`` that gemini writes at once at an Esc, or a "No" at an approval, for
which no hook fires (``docs/gemini-cli.md``). The follower reads what was appended since
its last read, line by line, and hands over only the ``info`` lines (one bytes search
each; the rest, whole answers and ``$set`` updates, is never parsed); it starts at the
file's end when it is named, so that what an older session wrote there ends nothing now.

The file is the person's: it is opened never through a symlink, and read only when it is
a regular file of ours (the hook that named it came with the session's secret, but a
path is only a path). Reads are bounded (:data:`MAX_CHUNK` a poll, :data:`MAX_LINE` a
line: a longer one is skipped whole).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

import orjson

from codex_presence.core.feeder import MAX_LINE

__all__ = ["MAX_CHUNK", "ChatFile"]

logger = logging.getLogger("codex_presence.gemini")

MAX_CHUNK = 8 * 1024 * 1024
"""Bytes read from the chat file in one poll, at most."""

_INFO = re.compile(rb'"type"\s*:\s*"info"')


class ChatFile:
    """The session's chat file, as gemini's hooks name it; see the module doc."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._offset = 0
        self._partial = b""
        self._skipping = False
        """The line being read is over :data:`MAX_LINE`: dropped up to its end."""

    def note_hook(self, message: Mapping[str, Any]) -> None:
        """A hook event: the chat file it names becomes the one followed (from its end)."""
        path = message.get("transcript_path")
        if isinstance(path, str) and path and path != self.path and "\0" not in path:
            self.path = path
            self.skip_to_end()

    def skip_to_end(self) -> None:
        """Nothing written so far matters (a new turn starts): read from here on."""
        size = self._size()
        self._offset = size if size is not None else 0
        self._partial, self._skipping = b"", False

    def _open(self) -> int | None:
        if self.path is None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            os.close(fd)
            return None
        return fd

    def _size(self) -> int | None:
        fd = self._open()
        if fd is None:
            return None
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def poll(self) -> list[dict[str, Any]]:
        """The ``info`` lines appended since the last poll, parsed."""
        fd = self._open()
        if fd is None:
            return []
        try:
            size = os.fstat(fd).st_size
            if size < self._offset:  # rewritten: what it holds now is not news
                self._offset, self._partial, self._skipping = size, b"", False
                return []
            data = os.pread(fd, min(size - self._offset, MAX_CHUNK), self._offset)
        finally:
            os.close(fd)
        self._offset += len(data)
        out: list[dict[str, Any]] = []
        *lines, rest = (self._partial + data).split(b"\n")
        for line in lines:
            if self._skipping:
                self._skipping = False
                continue
            if _INFO.search(line):
                try:
                    entry = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(entry, dict):
                    out.append(entry)
        if len(rest) > MAX_LINE:
            self._partial, self._skipping = b"", True
        else:
            self._partial = rest
        return out
