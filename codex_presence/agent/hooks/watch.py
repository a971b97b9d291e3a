"""Waking up when a client writes its files: inotify on their directories, polling without
it.

When a client's own files lead (its session status file, where no hook says when the
state changes), the session must read it whenever it changes, at any time, idle or
not: no hook says when. Polling often enough to be prompt costs CPU all day at the prompt;
inotify costs nothing until the kernel says a file changed, and says it at once. One
inotify instance (from :mod:`inotify_simple`, a small ctypes wrapper) watches the
directories of the client's files (``sessions/`` and the transcript's), and
:meth:`DirectoryWatch.wait` returns when something in them was written, created, renamed
in or deleted, or when its timeout passes. The descriptor is waited on by the event loop
(:func:`anyio.wait_readable`): no thread, nothing runs while nothing changes.

A directory that does not exist yet (a client creates ``sessions/`` at its first start,
and a new project's transcript directory with its first entry) is not watched:
:meth:`DirectoryWatch.watching` says so, and the shell watches its parent instead, or
polls until it can.
Where inotify cannot be had (not Linux, or its limits reached), :meth:`DirectoryWatch.open`
gives None and the shell polls.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import anyio

__all__ = ["DirectoryWatch"]

logger = logging.getLogger("codex_presence.hooks")


class DirectoryWatch:
    """One inotify instance watching some directories (see the module doc)."""

    def __init__(self, inotify: Any, mask: int) -> None:
        self._inotify = inotify
        self._mask = mask
        self._watched: dict[Path, int] = {}
        """Each watched directory's watch descriptor."""

    @classmethod
    def open(cls) -> DirectoryWatch | None:
        """A new watch, or None where inotify cannot be had (then: poll)."""
        try:
            from inotify_simple import INotify, flags
        except ImportError:  # not Linux: the package is not installed there
            return None
        try:
            inotify = INotify(nonblocking=True)
        except OSError as exc:
            logger.info("no inotify (%s): the client's files are polled", exc.strerror or exc)
            return None
        mask = flags.CLOSE_WRITE | flags.MODIFY | flags.MOVED_TO | flags.CREATE | flags.DELETE
        return cls(inotify, int(mask))

    def watches(self, directory: Path) -> bool:
        """Whether ``directory`` is watched now (a removed one, or one an overflow may have
        lost, is not: :meth:`watching` watches it anew)."""
        return directory in self._watched

    def watching(self, directory: Path) -> bool:
        """Watch ``directory`` if it exists (and is not watched yet); whether it is now."""
        if directory not in self._watched:
            try:
                self._watched[directory] = self._inotify.add_watch(directory, self._mask)
            except OSError:
                return False  # not there yet (or not a directory): polled meanwhile
        return True

    async def wait(self, at_most: float | None) -> bool:
        """Until something changed in a watched directory, or ``at_most`` seconds passed
        (None: no limit); True if a change ended it. The events are read and dropped (the
        caller reads the files), but for a watched directory's removal: it is watched anew
        once it exists again (every directory is, after the kernel's queue overflowed)."""
        fd: int = self._inotify.fileno()
        with anyio.move_on_after(at_most):
            await anyio.wait_readable(fd)
        from inotify_simple import flags, parse_events

        changed = False
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:  # nothing more (EAGAIN), or a broken descriptor
                return changed
            events = parse_events(data)
            if any(event.mask & flags.Q_OVERFLOW for event in events):
                # Events were dropped, a removal's IN_IGNORED perhaps: each directory is
                # watched anew (the same watch, where it still is one).
                self._watched.clear()
            gone = {event.wd for event in events if event.mask & flags.IGNORED}
            for directory, wd in list(self._watched.items()):
                if wd in gone:
                    del self._watched[directory]
            if not data:
                return changed
            changed = True

    def close(self) -> None:
        self._inotify.close()
