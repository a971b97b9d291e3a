"""``codex-presence codex``'s session: the app-server, the relay and the TUI, and their ends.

The TUI (``codex`` in a terminal) talks to an app-server over a websocket on a unix socket
(``codex --remote unix://PATH``); :class:`TuiSession` puts :class:`~.ws_relay.WsRelay`
between the two, so the codex mapping of ``wrap`` sees the traffic.

The start is :mod:`.launch`'s: the TUI and the app-server are spawned before this module
(anyio, the mapping and its jsonrpcserver) is even loaded, so the TUI's own start overlaps
with all of it. Then (:meth:`TuiSession.run`) the companions (the broker link) and the
relay: a client connection that comes before INNER accepts waits for it, and INNER is
probed every 2 ms in the session's first seconds, so the wait ends as soon as it listens.

SIGINT, SIGTERM and SIGHUP are forwarded to the TUI by the shells' one rule
(:class:`~codex_presence.agent.signals.SignalForwarding`; those that come while it starts,
once it is there); the observers, companions and end are the shells' skeleton's
(:mod:`codex_presence.agent.session`). The end comes with the first of:

* **The TUI exits.** The mapping closes (the member is idle, cause ``eof``, whatever the
  app-server is still running), then the app-server gets SIGTERM, and after ``grace``
  seconds it and every process under it SIGKILL (it ignores SIGTERM while a turn runs, and
  runs each command in a process group of its own). The status is the TUI's (128 + N for
  signal N).
* **The app-server exits, or does not listen within** ``ready_timeout``. The TUI would only
  say "Reconnecting…" forever, so this is said on our log with the app-server's last
  output, the mapping closes, the TUI gets SIGTERM (SIGKILL after ``grace``), and the
  status is 1.

A TUI ended by a signal leaves the terminal raw; it is put back
(:class:`~.terminal.SavedTerminal`). The sockets, the private directory, and the socket and
lock file that ``--listen`` makes behind INNER's symlink are removed at the end.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.child import Child, ProcessTree, wait_child
from codex_presence.agent.recorder import Recorder, start_recorder
from codex_presence.agent.session import (
    Companion,
    Observer,
    Session,
    finish_recording,
    log_transition,
    log_unknown,
)
from codex_presence.agent.signals import cannot_run, exit_status
from codex_presence.agent.tui.launch import APP_SERVER_SOCKET, TuiLaunch, set_autogroup_nice
from codex_presence.agent.tui.sockets import (
    accepts,
    adopt,
    link_target,
    remove,
    said,
    sweep_beside,
)
from codex_presence.core.codex.mapping import CodexMapping

if TYPE_CHECKING:
    from codex_presence.agent.tui.ws_relay import WsRelay

__all__ = ["TuiSession"]

logger = logging.getLogger("codex_presence.tui")

_LAST_OUTPUT_LINES = 20
_FAST_POLL, _FAST_POLL_FOR, _SLOW_POLL = 0.002, 5.0, 0.01
"""Seconds between the probes of INNER: fast for the first seconds of the session, then slow."""
_SHARE_RETRIES = 50
"""Tenths of a second the app-server's CPU share is asked back for (:mod:`.launch`)."""
_ANSI_SGR = re.compile(r"\x1b\[[0-9;]*m")
"""The colours of the app-server's log lines: not for a log file."""


class TuiSession:
    """One TUI session through the relay, from its :func:`~.launch.launch_tui`: relay,
    forward signals, end, exit status.

    ``observers`` and ``companions`` are wrap's
    (:class:`~codex_presence.agent.wrap.session.WrapSession`); they may be set before
    :meth:`run`."""

    def __init__(
        self,
        launch: TuiLaunch,
        *,
        observers: Sequence[Observer] = (log_transition,),
        companions: Sequence[Companion] = (),
        record: str | os.PathLike[str] | None = None,
        mapping: CodexMapping | None = None,
        grace: float = 1.0,
        ready_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.launch = launch
        self.mapping = mapping if mapping is not None else CodexMapping(on_unknown=log_unknown)
        self.analysis = AnalysisGuard(self.mapping.close)
        """Guards the mapping, for the relay and for the session's end alike."""
        self.session = Session(
            observers=observers,
            companions=companions,
            close=lambda cause: self.analysis.run(self.mapping.close, cause),
        )
        self.signals = launch.signals
        self.grace = grace
        self.ready_timeout = ready_timeout
        self._record_path = record
        self._recorder: Recorder | None = None
        self._clock = clock
        self._start = launch.started if clock is time.monotonic else clock()
        """The launch's moment: the recording's t = 0 is the spawn of the children."""
        self._output: deque[str] = deque(maxlen=_LAST_OUTPUT_LINES)
        self.directory = None if launch.directory is None else Path(launch.directory)
        """The private directory of the two sockets (for tests and debugging)."""
        self.relay: WsRelay | None = None
        self._listener = None if launch.listener is None else adopt(launch.listener)
        self._output_fd = launch.output_fd
        self._app_server = launch.app_server
        self._tui = launch.tui
        self._terminal = launch.terminal

    @property
    def observers(self) -> list[Observer]:
        return self.session.observers

    @property
    def companions(self) -> list[Companion]:
        return self.session.companions

    def _now(self) -> float:
        return self._clock() - self._start

    # -- the session ---------------------------------------------------------------------------

    async def run(self) -> int:
        """The session; the exit status (the TUI's)."""
        app_server, tui, directory = self._app_server, self._tui, self.directory
        inner_target: Path | None = None
        tree = ProcessTree(app_server) if app_server is not None else None
        try:
            if self.launch.error is not None or app_server is None or tui is None:
                return await self._not_launched()
            assert directory is not None and tree is not None  # launched
            sweep_beside(directory)  # what killed sessions left
            logger.debug(
                "the session's clock (the recording's t = 0) is CLOCK_MONOTONIC %.6f; "
                "sockets in %s",
                self._start,
                directory,
            )
            inner = directory / APP_SERVER_SOCKET
            async with anyio.create_task_group() as tasks:
                reading = anyio.CancelScope()
                tasks.start_soon(self._log_output, self._output_fd, reading)
                await tasks.start(Session.forward_signals, self.signals)
                self._recorder = start_recorder(self._record_path)
                try:
                    async with self.session.lifetime():
                        try:
                            status = await self._relay_until_the_end(tui, app_server)
                        finally:
                            self.session.close("eof")  # idle now, not after the app-server's end
                            await finish_recording(self._recorder, self._now())
                            inner_target = link_target(inner)
                            with anyio.CancelScope(shield=True):
                                await self._end_app_server(app_server, tree)
                finally:
                    reading.cancel()
                    tasks.cancel_scope.cancel()  # the signals: ours again
        finally:
            self._cleanup(tree, inner_target)
        return status

    async def _not_launched(self) -> int:
        """Say why the launch failed (once the log is set up: the launch logs nothing); a TUI
        that did start (its app-server could not) is ended; the exit status."""
        error, tui = self.launch.error, self._tui
        if error is not None and self.launch.sockets_failed:  # nothing was spawned
            logger.error("cannot make the session's sockets: %s", said(error))
            status = 1
        else:
            status = cannot_run(self.launch.command, error) if error is not None else 1
        if tui is not None and tui.poll() is None:
            await self._end_tui(tui)
            if self._terminal is not None:
                self._terminal.restore()
        return status

    def _cleanup(self, tree: ProcessTree | None, inner_target: Path | None) -> None:
        """Whatever is left, however the session ended: children, descriptors, files."""
        for process in (self._tui, self._app_server):
            if process is not None and process.poll() is None:
                ProcessTree(process).kill(signal.SIGKILL)
                process.wait()
            if process is not None:
                process.release()  # its watchdog ends whatever is left of its tree
        if tree is not None:
            tree.kill(signal.SIGKILL)  # nothing left to kill after a clean end
            tree.close()
        if self._listener is not None:
            self._listener.close()
        if self._output_fd >= 0:
            os.close(self._output_fd)
            self._output_fd = -1
        remove(self.directory, inner_target)

    async def _relay_until_the_end(self, tui: Child, app_server: Child) -> int:
        """WrapSession until the TUI exits (its status), or the app-server exits or never listens
        (1, the TUI ended). The TUI and the terminal are left as they should be."""
        from codex_presence.agent.tui.ws_relay import WsRelay  # h11 and wsproto: after the spawn

        assert self.directory is not None and self._listener is not None
        inner = self.directory / APP_SERVER_SOCKET
        ready = anyio.Event()
        self.relay = WsRelay(
            inner=str(inner),
            inner_ready=ready,
            mapping=self.mapping,
            on_transition=lambda t: self.session.deliver([t]),
            clock=self._now,
            recorder=self._recorder,
            analysis=self.analysis,
        )
        first: list[str] = []
        try:
            async with anyio.create_task_group() as race:

                async def watch(name: str, process: Child) -> None:
                    await wait_child(process)
                    first.append(name)
                    race.cancel_scope.cancel()

                async def until_ready() -> None:
                    if await self._wait_ready(inner):
                        ready.set()
                        await anyio.sleep_forever()
                    first.append("timeout")
                    race.cancel_scope.cancel()

                if self.launch.app_server_yields:
                    race.start_soon(self._give_the_app_server_its_share, app_server)
                race.start_soon(self.relay.serve, self._listener)
                race.start_soon(watch, "tui", tui)
                race.start_soon(watch, "app-server", app_server)
                race.start_soon(until_ready)
            status = self._said_why(first[0], tui, app_server, ready.is_set())
            if first[0] != "tui":
                self.session.close("eof")
        finally:
            if tui.poll() is None:  # the app-server's end, or we were cancelled
                with anyio.CancelScope(shield=True):
                    await self._end_tui(tui)
        if tui.returncode is not None and tui.returncode < 0 and self._terminal is not None:
            self._terminal.restore()
        return status

    def _said_why(
        self,
        what: str,
        tui: Child,
        app_server: Child,
        ready: bool,
    ) -> int:
        """The session's status, and why it ended when that is not the TUI's doing."""
        if what == "tui":
            assert tui.returncode is not None
            logger.debug("the TUI exited with status %d", exit_status(tui.returncode))
            return exit_status(tui.returncode)
        if what == "timeout":
            logger.error(
                "codex app-server did not listen within %.0f s; ending the session%s",
                self.ready_timeout,
                self._last_output(),
            )
        else:
            assert app_server.returncode is not None
            logger.error(
                "codex app-server exited (status %d) %s; ending the session%s",
                exit_status(app_server.returncode),
                "while the TUI was running" if ready else "before it listened",
                self._last_output(),
            )
        return 1

    async def _give_the_app_server_its_share(self, app_server: Child) -> None:
        """Once the TUI connects (it has painted by then), the app-server's session gets
        the CPU weight of any other again (the launch lowered it: :mod:`.launch`), retried
        while the kernel's rate limit refuses it, for up to ``_SHARE_RETRIES`` tenths of
        a second."""
        assert self.relay is not None
        await self.relay.client_came.wait()
        for _ in range(_SHARE_RETRIES):
            try:
                if not set_autogroup_nice(app_server.pid, 0):
                    logger.debug("cannot give the app-server its CPU share back")
                return
            except BlockingIOError:
                await anyio.sleep(0.1)
        logger.warning("the app-server keeps the lowest CPU priority: the kernel refused")

    async def _wait_ready(self, inner: Path) -> bool:
        """Poll INNER until it accepts a connection; False after ``ready_timeout``. Every
        2 ms while the TUI may be waiting for it (a probe is a failed ``connect``: tens of
        microseconds), every 10 ms after the first seconds."""
        deadline = self._clock() + self.ready_timeout
        while self._clock() < deadline:
            if accepts(inner):
                logger.debug("the app-server listens (%.3f s)", self._now())
                return True
            await anyio.sleep(_FAST_POLL if self._now() < _FAST_POLL_FOR else _SLOW_POLL)
        return False

    # -- the ends ------------------------------------------------------------------------------

    async def _end_tui(self, tui: Child) -> None:
        """SIGTERM, then SIGKILL for the TUI and every process under it after ``grace``."""
        tree = ProcessTree(tui)
        try:
            tree.hold()
            with suppress(ProcessLookupError):
                tui.send_signal(signal.SIGTERM)
            with anyio.move_on_after(self.grace):
                await wait_child(tui)
            tree.kill(signal.SIGKILL)
            await wait_child(tui)
        finally:
            tree.close()

    async def _end_app_server(self, app_server: Child, tree: ProcessTree) -> None:
        """SIGTERM to its group; after ``grace``, SIGKILL to it and everything under it."""
        tree.hold()
        if app_server.poll() is None:
            app_server.send_signal(signal.SIGTERM)  # its group
            with anyio.move_on_after(self.grace):
                await wait_child(app_server)
        tree.kill(signal.SIGKILL)
        returncode = await wait_child(app_server)
        logger.debug("the app-server ended (status %d)", exit_status(returncode))

    # -- the app-server's output -----------------------------------------------------------

    async def _log_output(self, fd: int, scope: anyio.CancelScope) -> None:
        """The app-server's stdout and stderr, line by line, to our log (debug), the last
        lines kept for an error message; until its end, or ``scope`` is cancelled (a
        process that escaped the app-server's end may hold the pipe). The descriptor is
        :meth:`_cleanup`'s to close."""
        os.set_blocking(fd, False)
        with scope:
            await self._read_output(fd)

    async def _read_output(self, fd: int) -> None:
        partial = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not data:
                break
            *lines, partial = (partial + data).split(b"\n")
            for line in lines:
                self._output_line(line)
        if partial:
            self._output_line(partial)

    def _output_line(self, line: bytes) -> None:
        text = _ANSI_SGR.sub("", line.decode("utf-8", "replace")).rstrip()
        if text:
            self._output.append(text)
            logger.debug("app-server: %s", text)

    def _last_output(self) -> str:
        if not self._output:
            return ""
        return "; it said:\n  " + "\n  ".join(self._output)
