"""The I/O shell of ``codex-presence claude``: one Claude Code process, its hooks and its
files, fed to the sans-I/O Claude Code mapping.

It owns the session's plumbing: the hook spool (:mod:`.spool`) or the loopback hook server
(:mod:`.hook_server`), the private settings file that points claude's hooks at it, claude
itself, the follower of claude's transcript and session status file (:mod:`.files`), the
mapping's timer, the recording and the exit status; the observers, companions, signals
and end are the shells' skeleton's (:mod:`codex_presence.agent.session`).

* **Nothing is proxied.** claude gets our terminal (stdin, stdout, stderr) and stays in our
  process group, which is the terminal's foreground group, so it reads keys, resizes and
  suspends as if run directly. Signals follow the shells' one rule
  (:class:`~codex_presence.agent.signals.SignalForwarding`): a Ctrl-C typed in the terminal
  reached claude itself and is not sent again (claude takes a second one as "exit"); a
  SIGINT sent to us alone, SIGTERM and SIGHUP are forwarded; the second SIGINT forwarded
  kills claude. claude, and every process it starts, dies with us, however we end (its
  watchdog, see :func:`~codex_presence.agent.child.spawn`), and our exit status is claude's
  (128+N for signal N).
* **claude's settings**: ``--settings FILE`` after the command's first word, FILE holding
  the person's own settings and one hook per event the mapping reads, async command hooks
  (claude shows none in its spinner) where it can (:mod:`.settings`, which also makes
  claude's environment: no proxy for the hook URL, the person's flags in the resume hint).
  On Linux the hooks are spooled into the private directory, which no other user can
  reach (:mod:`~codex_presence.agent.hooks.spool`; what is there when claude exits is
  read then). Each delivery says its process id, so that one that arrives after a later
  hook of claude's is dropped (:mod:`~codex_presence.core.hooks.hook_order`). The hook URL holds
  the session's secret: it is never logged.
* **Which hooks, and who leads** (:func:`~.settings.with_our_hooks`): where claude's
  session status file can lead (an interactive claude of a known version), only SessionStart
  and SessionEnd are hooks, and the files are read **whenever they change**, idle or not:
  inotify on their directories wakes the follower (:mod:`.watch`; it polls every
  ``poll_interval`` where there is no inotify, or until the session file is found). The
  config directory is watched too: claude's prompt history, where a prompt shows before the
  session file says ``busy`` (issue 34); the mapping's timer (a prompt the file has not
  confirmed) bounds each wait.
* **Where the hooks lead**, the files are read only while it can matter: polled every
  ``poll_interval`` while the mapping :attr:`~ClaudeMapping.wants_follow` (the member is not
  idle, or claude's view awaits adoption); when idle, the follower sleeps until the next
  hook. The mapping's timer is honoured at the same polls. A recording holds every
  transcript line all the same: what no poll read (the ``stop_hook_summary`` claude writes
  just before the Stop hook that puts the follower to sleep) is read once claude has
  exited, and recorded, not fed.
* A bug in the analysis (the mapping, or the reading of claude's files) never touches
  claude: it is logged once, the member is reported idle
  (:class:`~codex_presence.agent.analysis.AnalysisGuard`), and the session goes on
  unobserved; the hook server still answers.
* ``observe=False`` (``--no-trace`` without ``--record``) runs claude as given, with no
  hooks, no server and no reading of its files: there is nothing to observe for.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.child import wait_child
from codex_presence.agent.claude.files import ClaudeFiles
from codex_presence.agent.claude.launch import (
    ClaudeLaunch,
    launch_claude,
    release,
    run_checks,
    sweep_after_the_spawn,
)
from codex_presence.agent.hooks.spool import HookSpool
from codex_presence.agent.hooks.watch import DirectoryWatch
from codex_presence.agent.recorder import Recorder, start_recorder
from codex_presence.agent.session import (
    Companion,
    Observer,
    Session,
    finish_recording,
    log_transition,
)
from codex_presence.agent.signals import SignalForwarding, cannot_run, exit_status
from codex_presence.core.activity import Transition
from codex_presence.core.claude.mapping import ClaudeMapping
from codex_presence.core.hooks.hook_order import PID_MAX, HookOrder
from codex_presence.core.hooks.poster import SPOOL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from codex_presence.agent.hooks.hook_server import HookServer
    from codex_presence.core.claude.protocol import ClaudeSource

__all__ = ["ClaudeSession"]

logger = logging.getLogger("codex_presence.claude")

POLL_INTERVAL = 0.1
SESSION_START_WITHIN = 2.0
"""Seconds a recorded file-led session waits for claude's SessionStart hook before it first
reads claude's files (the hook fires at claude's start)."""
FILE_EXPECTED_WITHIN = 10.0
"""Seconds after its start by which claude has written its session file (0.3-0.6 s in
every recording); where the file leads, its absence then is said once."""


def _pid_max() -> int:
    """The system's ``pid_max`` (where pids wrap), or the largest Linux allows."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return PID_MAX


class ClaudeSession:
    """One Claude Code session: see the module doc."""

    def __init__(
        self,
        *,
        config: Path,
        observers: Sequence[Observer] = (log_transition,),
        companions: Sequence[Companion] = (),
        record: str | os.PathLike[str] | None = None,
        mapping: ClaudeMapping | None = None,
        observe: bool = True,
        hooks: str = "auto",
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self.mapping = mapping if mapping is not None else ClaudeMapping()
        self.server: HookServer | None = None
        """The loopback hook server, where the hooks are not spooled (loaded only then: h11
        and the server are ~10 ms of CPU beside claude's start)."""
        self._config = config
        self._observe = observe
        self._hooks = hooks
        self._record_path = record
        self._recorder: Recorder | None = None
        self._poll_interval = poll_interval
        self._start = time.monotonic()
        """claude's spawn (CLOCK_MONOTONIC, :attr:`ClaudeLaunch.started`): t = 0."""
        self._files: ClaudeFiles | None = None
        self._wake: anyio.Event | None = None
        self._session_started = anyio.Event()
        """claude's SessionStart hook is in (see :meth:`_watch`)."""
        self.analysis = AnalysisGuard(self.mapping.close)
        self.session = Session(
            observers=observers,
            companions=companions,
            close=lambda cause: self.analysis.run(self.mapping.close, cause),
        )
        self.signals = SignalForwarding(name="claude")
        self.order = HookOrder(modulus=_pid_max())

    async def run(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        settings: Mapping[str, Any] | None = None,
        launch: ClaudeLaunch | None = None,
    ) -> int:
        """Run claude to its end; its exit status. ``settings``: the user's own settings
        document, which ours extends (see :func:`split_settings`). ``launch``: claude
        already spawned (:func:`~.launch.launch_claude`, before this module loaded), else
        it is spawned here."""
        if launch is None:
            launch = launch_claude(
                command,
                env=env,
                settings=settings or {},
                observe=self._observe,
                hooks=self._hooks,
                signals=self.signals,
            )
            run_checks(launch)
        try:
            async with self.session.lifetime():
                return await self._run(launch)
        finally:
            release(launch)

    # -- the session ---------------------------------------------------------------------

    async def _run(self, launch: ClaudeLaunch) -> int:
        self._start = launch.started
        self._recorder = recorder = start_recorder(self._record_path)
        try:
            return await self._supervise(launch)
        finally:
            self._deliver(self.analysis.run(self._record_the_rest, self._now()))
            await finish_recording(recorder, self._now())

    async def _supervise(self, launch: ClaudeLaunch) -> int:
        command = launch.command
        self.signals = launch.signals
        process = launch.process
        if self._observe and process is not None:
            # Before the server: the hooks claude sent while we loaded come in at its start.
            self.mapping.file_led = launch.file_led
            self._files = ClaudeFiles(
                config=self._config, pid=process.pid, history_from=launch.history_from
            )
        async with anyio.create_task_group() as tg:
            spool = None
            if launch.private is not None and (Path(launch.private) / SPOOL).is_dir():
                spool = HookSpool(Path(launch.private) / SPOOL, self._on_hook)
                await tg.start(spool.serve)
                # Nothing of ours comes to the loopback port then: only another user could
                # still reach it. Closed, with what was taken from it meanwhile.
                for sock, _, _ in launch.early.stop() if launch.early is not None else ():
                    sock.close()
                if launch.listener is not None:
                    launch.listener.close()
                launch.early = launch.listener = None
            elif launch.listener is not None:
                from codex_presence.agent.hooks.hook_server import HookServer

                self.server = HookServer(self._on_hook, path=launch.hook_path)
                listener, launch.listener = launch.listener, None  # the server closes it
                early, launch.early = launch.early, None  # and takes what it accepted
                await tg.start(partial(self.server.serve, listener=listener, early=early))
            await tg.start(Session.forward_signals, self.signals)
            if process is None:
                tg.cancel_scope.cancel()
                assert launch.error is not None
                return cannot_run(command, launch.error)
            if launch.private is not None:
                await anyio.to_thread.run_sync(sweep_after_the_spawn)
            if self._observe:
                tg.start_soon(self._watch if self.mapping.file_led else self._follow)
            try:
                returncode = await wait_child(process)
            finally:
                if process.poll() is None:  # we are being cancelled: claude goes too
                    process.kill()
                    process.wait(5)
                process.release()  # its watchdog ends what is left of claude's tree
            if spool is not None:
                spool.drain()  # what claude waited for at its exit (SessionEnd), read now
            tg.cancel_scope.cancel()
        status = exit_status(returncode)
        if 0 < status < 128 and self._observe and "claude" not in Path(command[0]).name:
            logger.warning(
                "%s exited with status %d; `--settings FILE` was put right after it, so it "
                "must take claude's arguments: run claude itself, or a script that passes "
                '"$@" on to claude',
                command[0],
                status,
            )
        return status

    # -- what claude says ------------------------------------------------------------------

    def _now(self) -> float:
        return time.monotonic() - self._start

    def _on_hook(self, message: dict[str, Any], seq: int | None = None) -> None:
        """A hook, already answered: unless it came too late (:class:`HookOrder`), record
        it, note its files, feed it, wake the follower."""
        t = self._now()
        if not self.order.admit(seq, t):
            logger.debug("a late %s hook, after a later one: dropped", _event(message))
            return
        self._record("hook", message, t)
        self._deliver(self.analysis.run(self._analyse_hook, message, t))
        if message.get("hook_event_name") == "SessionStart":
            self._session_started.set()
        if self._wake is not None:
            self._wake.set()

    def _analyse_hook(self, message: dict[str, Any], t: float) -> list[Transition]:
        if self._files is not None:
            self._files.note_hook(message)
        return self.mapping.feed("hook", message, t)

    async def _follow(self) -> None:
        """Poll claude's files (and the mapping's timer) while they can matter."""
        while True:
            if self.analysis.failed or not self.mapping.wants_follow:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            self._deliver(self.analysis.run(self._poll, self._now()))
            await anyio.sleep(self._poll_interval)

    async def _watch(self) -> None:
        """The file leads: read claude's files whenever they change, from the start."""
        files = self._files
        assert files is not None
        if self._recorder is not None:
            # A replay learns that the file led from SessionStart's hook; claude has been
            # running while the session loaded (issue 34), and a view read before the hook
            # would replay as if hooks led. Its first read waits for the hook, a while.
            with anyio.move_on_after(SESSION_START_WITHIN):
                await self._session_started.wait()
        watch = DirectoryWatch.open()
        missing = True  # claude's session file, not found yet: said once after a while
        try:
            while not self.analysis.failed:
                self._deliver(self.analysis.run(self._poll, self._now()))
                if missing and (files.status_found or self._now() > FILE_EXPECTED_WITHIN):
                    missing = self._say_if_missing(files)
                if watch is None:
                    await anyio.sleep(self._poll_interval)
                    continue
                # Both directories watched, or polled until they can be: the transcript's
                # is named by SessionStart, and a new project's is made by claude with its
                # first entry (its parent, watched meanwhile, wakes us when it is).
                # A directory watched only now may have been written since the poll above:
                # read once more before sleeping.
                transcript = files.transcript_directory
                if (
                    transcript is not None
                    and not watch.watches(transcript)
                    and watch.watching(transcript)
                ):
                    continue
                transcript_watched = transcript is not None and (
                    watch.watches(transcript) or watch.watching(transcript.parent)
                )
                ready = (
                    watch.watching(files.sessions)
                    and watch.watching(files.config)  # the prompt history's
                    and files.status_found
                    and transcript_watched
                )
                await watch.wait(self._until_due(None if ready else self._poll_interval))
            await anyio.sleep_forever()
        finally:
            if watch is not None:
                watch.close()

    def _until_due(self, at_most: float | None) -> float | None:
        """``at_most``, or less if the mapping's timer is due sooner (a history prompt's
        turn that the file has not confirmed)."""
        deadline = self.mapping.deadline
        if deadline is None:
            return at_most
        due = max(0.0, deadline - self._now())
        return due if at_most is None else min(at_most, due)

    @staticmethod
    def _say_if_missing(files: ClaudeFiles) -> bool:
        if not files.status_found:
            logger.warning(
                "claude's session file is not in %s after %g s: the roster cannot follow "
                "this session (--claude-hooks all gives it every hook instead)",
                files.sessions,
                FILE_EXPECTED_WITHIN,
            )
        return False

    def _poll(self, now: float) -> list[Transition]:
        """What claude's files say now, recorded and fed, then the mapping's timer."""
        out: list[Transition] = []
        if self._files is not None:
            for source, message in self._files.poll(now):
                self._record(source, message, now)
                out += self.mapping.feed(source, message, now)
        if (due := self.mapping.tick(now)) is not None:
            out.append(due)
        return out

    def _record_the_rest(self, now: float) -> None:
        """At the end, the transcript's lines no poll read, recorded (a recording holds every
        line claude wrote) but not fed: the live analysis never saw them. Where hooks lead,
        the Stop hook ends the following, so a line claude wrote just before it (its
        ``stop_hook_summary``) was read by no poll."""
        if self._recorder is None or self._files is None:
            return
        for entry in self._files.rest_of_transcript():
            self._record("transcript", entry, now)

    def _record(self, source: ClaudeSource, message: dict[str, Any], t: float) -> None:
        if self._recorder is not None:
            line = orjson.dumps(message) + b"\n"
            if self.server is not None:  # the secret is in the hook URL claude may write
                line = self.server.redact(line)
            self._recorder.add(t, source, line)

    def _deliver(self, transitions: list[Transition]) -> None:
        self.session.deliver(transitions)


def _event(message: Mapping[str, Any]) -> str:
    event = message.get("hook_event_name")
    return event if isinstance(event, str) and event.isidentifier() else "?"
