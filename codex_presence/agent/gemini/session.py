"""The I/O shell of ``codex-presence gemini``: one Gemini CLI process, its hooks and its chat
file, fed to the sans-I/O Gemini CLI mapping.

It owns the session's plumbing: the loopback hook server
(:mod:`codex_presence.agent.hooks.hook_server`), the shadow gemini home in the session's
private 0700 directory that adds our hook for each event the mapping reads to the person's
settings, and gives back what gemini left in it at the end (:mod:`.settings`), gemini
itself, the follower of its chat file (:mod:`.chat`), the recording and the exit status;
the observers, companions, signals and end are the shells' skeleton's
(:mod:`codex_presence.agent.session`).

* **Nothing is proxied.** gemini gets our terminal and stays in our process group, so it
  reads keys, resizes and suspends as if run directly. Signals follow the shells' one rule
  (:class:`~codex_presence.agent.signals.SignalForwarding`). gemini, and every process it
  starts, dies with us however we end (its watchdog:
  :func:`~codex_presence.agent.child.spawn`), and our exit status is gemini's (128+N for
  signal N).
* **The hooks are synchronous**: gemini waits for each and names it in its spinner. On
  Linux the poster writes it into the private spool, which no other user can reach
  (:mod:`codex_presence.agent.hooks.spool`), and exits; elsewhere the server answers
  ``200 {}`` before anything else. The poster prints nothing; each event is recorded, fed
  to the mapping, and wakes the follower.
* **The chat file** is read every ``poll_interval`` while the member is not idle (its
  ``Request cancelled.`` line is the only word of an Esc, or of a "No" at an approval);
  when idle the follower sleeps until the next hook. Each new prompt (BeforeAgent) starts
  the reading at the file's end.
* A bug in the analysis never touches gemini: it is logged once, the member is reported
  idle (:class:`~codex_presence.agent.analysis.AnalysisGuard`), and the hook server still
  answers.
* ``observe=False`` (``--no-trace`` without ``--record``), or settings of the person's that
  cannot be read (said once), runs gemini as given, with no hooks of ours.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.child import spawn, wait_child
from codex_presence.agent.gemini.chat import ChatFile
from codex_presence.agent.gemini.settings import SettingsError, ShadowHome
from codex_presence.agent.hooks.hook_server import HookServer
from codex_presence.agent.hooks.spool import HookSpool
from codex_presence.agent.leftovers import make_owned_directory
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
from codex_presence.core.gemini.mapping import GeminiMapping
from codex_presence.core.gemini.protocol import GeminiSource
from codex_presence.core.hooks.poster import SPOOL, spools

__all__ = ["GeminiSession"]

logger = logging.getLogger("codex_presence.gemini")

PRIVATE_PREFIX = "codex-presence-gemini-"
"""The session's private directory (the shadow home and the poster), named after its owner."""
POLL_INTERVAL = 0.1


class GeminiSession:
    """One Gemini CLI session: see the module doc."""

    def __init__(
        self,
        *,
        observers: Sequence[Observer] = (log_transition,),
        companions: Sequence[Companion] = (),
        record: str | os.PathLike[str] | None = None,
        mapping: GeminiMapping | None = None,
        observe: bool = True,
        poll_interval: float = POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mapping = mapping if mapping is not None else GeminiMapping()
        self.server = HookServer(self._on_hook)
        self.chat = ChatFile()
        self._observe = observe
        self._record_path = record
        self._recorder: Recorder | None = None
        self._poll_interval = poll_interval
        self._clock = clock
        self._start = clock()
        self._wake: anyio.Event | None = None
        self._shadow: ShadowHome | None = None
        self.analysis = AnalysisGuard(self.mapping.close)
        self.session = Session(
            observers=observers,
            companions=companions,
            close=lambda cause: self.analysis.run(self.mapping.close, cause),
        )
        self.signals = SignalForwarding(name="gemini")

    async def run(self, command: Sequence[str], *, env: Mapping[str, str]) -> int:
        """Run gemini to its end; its exit status."""
        async with self.session.lifetime():
            return await self._run(command, env)

    # -- the session ---------------------------------------------------------------------

    async def _run(self, command: Sequence[str], env: Mapping[str, str]) -> int:
        status = 1
        private = make_owned_directory(PRIVATE_PREFIX) if self._observe else None
        try:
            self._recorder = recorder = start_recorder(self._record_path)
            try:
                status = await self._supervise(command, env, private)
            finally:
                await finish_recording(recorder, self._now())
        finally:
            if self._shadow is not None:
                self._shadow.give_back()
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
        return status

    async def _supervise(
        self, command: Sequence[str], env: Mapping[str, str], private: Path | None
    ) -> int:
        async with anyio.create_task_group() as tg:
            child_env = dict(env)
            spool: HookSpool | None = None
            if private is not None:
                url = None
                if spools(env):
                    (private / SPOOL).mkdir(mode=0o700)
                    spool = HookSpool(private / SPOOL, self._on_hook)
                    await tg.start(spool.serve)
                else:
                    url = await tg.start(self.server.serve)
                shadow = ShadowHome(private, env)
                self._shadow = shadow
                try:
                    child_env.update(
                        shadow.make(url, env, spool=None if spool is None else spool.directory)
                    )
                except (SettingsError, OSError) as exc:  # said once; gemini runs as given
                    logger.warning("%s: this session runs without our hooks", exc)
                else:
                    logger.info("gemini's home is shadowed in %s", private)
                    tg.start_soon(self._follow)
            await tg.start(Session.forward_signals, self.signals)
            self._start = self._clock()
            try:
                process = spawn(list(command), env=child_env, own_group=False)
            except OSError as exc:
                tg.cancel_scope.cancel()
                return cannot_run(command, exc)
            self.signals.attach(process)
            try:
                returncode = await wait_child(process)
            finally:
                if process.poll() is None:  # we are being cancelled: gemini goes too
                    process.kill()
                    process.wait(5)
                process.release()  # its watchdog ends what is left of gemini's tree
            if spool is not None:
                spool.drain()  # a hook of gemini's last moments, read now
            tg.cancel_scope.cancel()
        return exit_status(returncode)

    # -- what gemini says ------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock() - self._start

    def _on_hook(self, message: dict[str, Any], seq: int | None = None) -> None:
        """A hook event, already answered: record it, note its chat file, feed it, wake
        the follower."""
        t = self._now()
        self._record("event", message, t)
        self._deliver(self.analysis.run(self._analyse_hook, message, t))
        if self._wake is not None:
            self._wake.set()

    def _analyse_hook(self, message: dict[str, Any], t: float) -> list[Transition]:
        self.chat.note_hook(message)
        if message.get("hook_event_name") == "BeforeAgent":
            self.chat.skip_to_end()
        return self.mapping.feed("event", message, t)

    async def _follow(self) -> None:
        """Read the chat file while it can matter (the member is not idle)."""
        while True:
            if self.analysis.failed or not self.mapping.wants_follow:
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            self._deliver(self.analysis.run(self._poll, self._now()))
            await anyio.sleep(self._poll_interval)

    def _poll(self, now: float) -> list[Transition]:
        out: list[Transition] = []
        for entry in self.chat.poll():
            self._record("chat", entry, now)
            out += self.mapping.feed("chat", entry, now)
        return out

    def _record(self, source: GeminiSource, message: dict[str, Any], t: float) -> None:
        if self._recorder is not None:
            line = orjson.dumps(message) + b"\n"
            self._recorder.add(t, source, self.server.redact(line))

    def _deliver(self, transitions: list[Transition]) -> None:
        self.session.deliver(transitions)
