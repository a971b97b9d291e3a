"""The hook spool: a client's hooks in as files in the runner's private directory.

Where the runner can watch a directory (Linux's inotify), its command hooks run the spool
poster (:func:`~codex_presence.core.hooks.poster.spool_script`): bash writes the payload
into ``<pid>.hook`` in :attr:`HookSpool.directory` and exits. That directory is inside the
session's private 0700 directory, so **no other local user can reach it**: nothing of
theirs can delay, fill or even see our hooks (a loopback port is open to every local user,
and its accept queue is first come, first served: issue 35's item 11), and no secret is
needed anywhere, so none can be printed (a client may name a failing HTTP hook by its URL).

:meth:`HookSpool.serve` reads a file when the kernel says its writer closed it
(``IN_CLOSE_WRITE``), hands its payload and sequence number to ``on_hook`` as the hook
server does, and removes it. Its watch is set before the directory is first read, so a
hook written before the reader ran (the client's first, while the runner loads) is read
then. :meth:`HookSpool.drain` reads what is whole at once: the runner calls it when its
client has exited, so a hook the client waited for at its exit (SessionEnd) is never lost
to the end of the session. A file that is not whole once closed (its poster was killed
mid-write), too big, not a regular file of our own, or not a JSON object is dropped,
counted, said at debug. Where inotify cannot be had after all (its limits reached), the
directory is read every :data:`POLL_INTERVAL`, and a file still not whole after
:data:`GIVE_UP_AFTER` seconds is dropped.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import orjson
from anyio.abc import TaskStatus

from codex_presence.core.hooks.poster import MAX_BODY, SPOOL_SUFFIX, spooled_hook

__all__ = ["GIVE_UP_AFTER", "POLL_INTERVAL", "HookSpool"]

logger = logging.getLogger("codex_presence.hooks")

POLL_INTERVAL = 0.02
"""Seconds between two reads of the directory where inotify cannot be had."""
GIVE_UP_AFTER = 10.0
"""Seconds after which a file that is still not whole is dropped, when polling (a poster
writes one in milliseconds)."""


class HookSpool:
    """Reads the hooks spooled into ``directory``; see the module doc."""

    def __init__(
        self,
        directory: Path,
        on_hook: Callable[[dict[str, Any], int | None], object],
        *,
        max_body: int = MAX_BODY,
    ) -> None:
        self.directory = directory
        self._on_hook = on_hook
        self._max_body = max_body
        self._uid = os.getuid()
        self._unfinished: dict[str, float] = {}
        """Files found not whole while polling: when first seen so."""
        self.dropped = 0
        """Files dropped: not whole once closed, too big, not ours, not a JSON object."""

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read the spool until cancelled; started (``task_group.start``) once watched."""
        try:
            from inotify_simple import INotify, flags

            inotify = INotify(nonblocking=True)
        except (ImportError, OSError) as exc:
            logger.info("no inotify (%s): the hook spool is polled", exc)
            task_status.started()
            await self._poll()
            return
        with inotify:
            inotify.add_watch(self.directory, flags.CLOSE_WRITE | flags.MOVED_TO)
            logger.debug("hook spool: watching %s", self.directory)
            task_status.started()
            self.drain()
            while True:
                await anyio.wait_readable(inotify.fileno())
                events = inotify.read(timeout=0)
                if any(event.mask & flags.Q_OVERFLOW for event in events):
                    self.drain()  # events were lost: read what is there
                for event in events:
                    if event.name:
                        self._take(event.name, closed=True)

    def drain(self) -> None:
        """Read every whole file in the spool now, oldest first (files still being written
        are left to their close)."""
        try:
            entries = list(os.scandir(self.directory))
        except OSError as exc:
            logger.debug("hook spool: cannot read %s: %s", self.directory, exc)
            return
        names = []
        for entry in entries:
            try:
                names.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
            except OSError:
                continue
        for _, name in sorted(names):
            self._take(name, closed=False)

    async def _poll(self) -> None:
        while True:
            self.drain()
            now = anyio.current_time()
            for name, since in list(self._unfinished.items()):
                if now - since > GIVE_UP_AFTER:
                    del self._unfinished[name]
                    self._drop(self.directory / name, "still not whole")
            await anyio.sleep(POLL_INTERVAL)

    def _take(self, name: str, *, closed: bool) -> None:
        """Hand on the hook in file ``name`` and remove it; ``closed``: its writer closed it
        (not whole then is not whole ever)."""
        if not name.endswith(SPOOL_SUFFIX):
            return
        path = self.directory / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return  # read already (by a drain), or not a file we can open: left alone
        with os.fdopen(fd, "rb") as stream:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != self._uid:
                self._drop(path, "not a regular file of ours")
                return
            if info.st_size > self._max_body + 16:
                self._drop(path, f"over {self._max_body} bytes")
                return
            data = stream.read(self._max_body + 16)
        hook = spooled_hook(name, data)
        if hook is None:
            if closed:
                self._drop(path, "not whole")
            else:
                self._unfinished.setdefault(name, anyio.current_time())
            return
        self._unfinished.pop(name, None)
        try:
            path.unlink()
        except FileNotFoundError:
            return  # taken by another read meanwhile
        payload, seq = hook
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            message = None
        if not isinstance(message, dict):
            self._drop(None, "not a JSON object")
            return
        try:
            self._on_hook(message, seq)
        except Exception:  # a bug behind us must not cost the client its hooks
            logger.exception("handling a hook failed")

    def _drop(self, path: Path | None, why: str) -> None:
        self.dropped += 1
        logger.debug("hook spool: a hook dropped (%s)", why)
        if path is not None:
            with suppress(OSError):
                path.unlink()
