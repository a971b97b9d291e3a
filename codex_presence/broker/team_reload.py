"""Reading the team file again while the broker runs: ``team add``, ``remove`` and
``rotate`` take effect without a restart.

:class:`TeamReloader` looks at the file's identity (inode, size, modification time) once a
second — a ``stat``, no read — and reads it again when that changed, or at once on
``SIGHUP`` (what ``systemctl reload`` sends). A file that no longer parses, or a change
the broker cannot follow (another team's name), is logged and not applied: the broker
keeps the team it has, so a half-edited file never signs everyone out. What applying a
team does is :meth:`Broker.replace_team <codex_presence.broker.state.Broker.replace_team>`'s
(its store's too: brokers sharing Redis follow members added and removed) and the page's
(:class:`~codex_presence.broker.web.WebRoster`), passed in as ``apply``.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
from anyio.abc import TaskStatus

from codex_presence.broker.team import Team, TeamError
from codex_presence.broker.team_file import load_team

__all__ = ["POLL_INTERVAL", "TeamReloader"]

logger = logging.getLogger("codex_presence.team")

POLL_INTERVAL = 1.0
"""Seconds between two looks at the team file's identity."""

_Identity = tuple[int, int, int] | None


def _identity(path: Path) -> _Identity:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


class TeamReloader:
    """Reads ``path`` again when it changes (or on SIGHUP) and hands the new team to
    ``apply``, which raises :class:`ValueError` for a change it cannot follow."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        apply: Callable[[Team], None],
        *,
        interval: float = POLL_INTERVAL,
    ) -> None:
        self.path = Path(path)
        self._apply = apply
        self._interval = interval
        self._seen = _identity(self.path)

    def reload(self) -> bool:
        """Read the file now and apply it; whether it was applied."""
        self._seen = _identity(self.path)
        try:
            team = load_team(self.path)
        except TeamError as exc:
            logger.warning("team file not applied, the broker keeps its team: %s", exc)
            return False
        try:
            self._apply(team)
        except ValueError as exc:
            logger.warning("team file %s not applied: %s", self.path, exc)
            return False
        logger.warning(
            "team file %s read again: %d member(s): %s",
            self.path,
            len(team.members),
            ", ".join(m.name for m in team.members),
        )
        return True

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Look every :data:`POLL_INTERVAL` seconds, and at each SIGHUP, until cancelled;
        ``task_status`` is told once SIGHUP is ours (before: it would end the process)."""
        async with anyio.create_task_group() as tg:
            await tg.start(self._on_hangup)
            task_status.started()
            while True:
                await anyio.sleep(self._interval)
                if _identity(self.path) != self._seen:
                    self.reload()

    async def _on_hangup(self, *, task_status: TaskStatus[None]) -> None:
        try:
            receiver = anyio.open_signal_receiver(signal.SIGHUP)
            signals = receiver.__enter__()
        except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
            task_status.started()
            return
        try:
            task_status.started()
            async for _ in signals:
                logger.info("SIGHUP: reading the team file %s again", self.path)
                self.reload()
        finally:
            receiver.__exit__(None, None, None)
