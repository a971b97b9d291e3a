"""The I/O shell of ``codex-presence claude``: one Claude Code process, its hooks and its
files, fed to the sans-I/O Claude Code mapping.

It owns the session's plumbing: the loopback hook server (:mod:`.hook_server`), the private
settings file that points claude's HTTP hooks at it, claude itself, the follower of claude's
transcript and session status file (:mod:`.files`), the mapping's timer, the
recording and the exit status; the observers, companions, signals and end are the shells'
skeleton's (:mod:`codex_presence.agent.session`).

* **Nothing is proxied.** claude gets our terminal (stdin, stdout, stderr) and stays in our
  process group, which is the terminal's foreground group, so it reads keys, resizes and
  suspends as if run directly. Signals follow the shells' one rule
  (:class:`~codex_presence.agent.signals.SignalForwarding`): a Ctrl-C typed in the terminal
  reached claude itself and is not sent again (claude takes a second one as "exit"); a
  SIGINT sent to us alone, SIGTERM and SIGHUP are forwarded; the second SIGINT forwarded
  kills claude. claude, and every process it starts, dies with us, however we end (its
  watchdog, see :func:`~codex_presence.agent.child.spawn`), and our exit status is claude's
  (128+N for signal N).
* **claude's settings**: ``--settings FILE`` is put after the command's first word; FILE
  (mode 0600, in a private 0700 directory removed at the end) holds one hook per event the
  mapping reads: an *async command hook* running curl (claude names every hook it waits
  for in its spinner; it waits for none of these, and they show nowhere), whose config
  file, beside FILE, holds the URL; an HTTP hook for SessionEnd (claude exits right
  after it), in print mode (no screen) and where there is no curl. Each delivery
  says its process id, so that one that arrives after a later hook of claude's is dropped
  (:mod:`~codex_presence.core.claude.hook_order`). The user's settings files still apply
  (claude merges them); a ``--settings`` of the user's own in the arguments (claude
  would take only the last) is taken out and carried in FILE, our hooks after theirs.
  claude's parting hint
  (``claude FLAGS --resume ID``) gets its FLAGS from the arguments the person gave, not
  from ours (:func:`child_environment`). The hook URL
  holds the session's secret: it is never logged, and ``127.0.0.1`` is added to claude's
  ``NO_PROXY`` so that no proxy ever sees it.
* **Reading files only while it can matter**: the transcript and the session file are
  polled every ``poll_interval`` while the mapping :attr:`~ClaudeMapping.wants_follow` (the
  member is not idle, or claude's view awaits adoption); when idle, the follower sleeps until
  the next hook. The mapping's timer is honoured at the same polls.
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
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.child import spawn, wait_child
from codex_presence.agent.claude.files import ClaudeFiles
from codex_presence.agent.claude.hook_server import HookServer
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
from codex_presence.core.claude.hook_order import PID_MAX, HookOrder
from codex_presence.core.claude.mapping import ClaudeMapping
from codex_presence.core.claude.protocol import (
    RESUME_HINT_FLAGS_ENV,
    ClaudeSource,
    curl_config,
    poster_command,
    prints,
    resume_hint_flags,
    with_hooks,
)

__all__ = ["ClaudeSession", "SettingsError", "child_environment", "split_settings"]

logger = logging.getLogger("codex_presence.claude")

POLL_INTERVAL = 0.1


class SettingsError(Exception):
    """The ``--settings`` given in claude's arguments cannot be read."""


def split_settings(command: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """``claude ARGS...`` without a ``--settings`` of the user's (claude takes the last one
    given, so ours must carry theirs), and that settings document ({} if none): a JSON
    object, or a file holding one. Raises :class:`SettingsError`."""
    argv: list[str] = [command[0]]
    value: str | None = None
    args = iter(command[1:])
    for arg in args:
        if arg == "--settings":
            value = next(args, None)
            if value is None:
                raise SettingsError("--settings needs a file or a JSON object")
        elif arg.startswith("--settings="):
            value = arg.removeprefix("--settings=")
        else:
            argv.append(arg)
    if value is None:
        return argv, {}
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"--settings {value}: {getattr(exc, 'strerror', exc)}") from exc
    try:
        settings = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SettingsError(f"--settings {value}: not JSON ({exc})") from exc
    if not isinstance(settings, dict):
        raise SettingsError(f"--settings {value}: not a JSON object")
    return argv, settings


def _with_settings(command: Sequence[str], settings: Path) -> list[str]:
    """``claude ARGS...`` → ``claude --settings FILE ARGS...``."""
    return [command[0], "--settings", str(settings), *command[1:]]


def child_environment(
    environ: Mapping[str, str],
    *,
    drop: Sequence[str] = (),
    hinted_args: Sequence[str] | None = None,
) -> dict[str, str]:
    """claude's environment: ours, without ``drop``, with loopback in ``NO_PROXY`` (hook
    POSTs honour HTTP(S)_PROXY: a proxy would get the hook URL, secret included), and, when
    ``hinted_args`` are given (the arguments the person gave claude, to which we add
    ``--settings FILE``), the flags of claude's parting ``--resume`` hint taken from them
    instead of from the arguments claude gets (:func:`resume_hint_flags`) — unless our own
    environment already chose them."""
    env = {key: value for key, value in environ.items() if key not in drop}
    for key in ("NO_PROXY", "no_proxy"):
        hosts = [h.strip() for h in env.get(key, "").split(",") if h.strip()]
        if "127.0.0.1" not in hosts:
            hosts.append("127.0.0.1")
        env[key] = ",".join(hosts)
    if hinted_args is not None:
        env.setdefault(RESUME_HINT_FLAGS_ENV, resume_hint_flags(hinted_args))
    return env


def _write_private(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return path


def _hook_command(private: Path, url: str, env: Mapping[str, str]) -> str | None:
    """The async command hook that delivers to ``url`` (its config file written in
    ``private``), or None where there is no curl on claude's PATH: then HTTP hooks."""
    curl = shutil.which("curl", path=env.get("PATH", os.defpath))
    if curl is None:
        logger.info("no curl on the PATH: claude's hooks are HTTP hooks, named in its spinner")
        return None
    config = _write_private(private, "curl.cfg", curl_config(url).encode())
    return poster_command(curl, str(config))


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
        poll_interval: float = POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.mapping = mapping if mapping is not None else ClaudeMapping()
        self.server = HookServer(self._on_hook)
        self._config = config
        self._observe = observe
        self._record_path = record
        self._recorder: Recorder | None = None
        self._poll_interval = poll_interval
        self._clock = clock
        self._start = clock()
        self._files: ClaudeFiles | None = None
        self._wake: anyio.Event | None = None
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
    ) -> int:
        """Run claude to its end; its exit status. ``settings``: the user's own settings
        document, which ours extends (see :func:`split_settings`)."""
        async with self.session.lifetime():
            return await self._run(command, env, settings or {})

    # -- the session ---------------------------------------------------------------------

    async def _run(
        self, command: Sequence[str], env: Mapping[str, str], settings: Mapping[str, Any]
    ) -> int:
        status = 1
        with tempfile.TemporaryDirectory(prefix="codex-presence-claude-") as private:
            self._recorder = recorder = start_recorder(self._record_path)
            try:
                status = await self._supervise(command, env, settings, Path(private))
            finally:
                await finish_recording(recorder, self._now())
        return status

    async def _supervise(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        settings: Mapping[str, Any],
        private: Path,
    ) -> int:
        async with anyio.create_task_group() as tg:
            argv = list(command)
            if self._observe:
                url = await tg.start(self.server.serve)
                # Print mode has no screen to keep clean, and ends with the turn: HTTP hooks.
                command_hook = None if prints(argv[1:]) else _hook_command(private, url, env)
                document = orjson.dumps(with_hooks(settings, url, command=command_hook))
                argv = _with_settings(argv, _write_private(private, "settings.json", document))
            await tg.start(Session.forward_signals, self.signals)
            self._start = self._clock()
            try:
                process = spawn(argv, env=env, own_group=False)
            except OSError as exc:
                tg.cancel_scope.cancel()
                return cannot_run(command, exc)
            self.signals.attach(process)
            if self._observe:
                self._files = ClaudeFiles(config=self._config, pid=process.pid)
                tg.start_soon(self._follow)
            try:
                returncode = await wait_child(process)
            finally:
                if process.poll() is None:  # we are being cancelled: claude goes too
                    process.kill()
                    process.wait(5)
                process.release()  # its watchdog ends what is left of claude's tree
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
        return self._clock() - self._start

    def _on_hook(self, message: dict[str, Any], seq: int | None = None) -> None:
        """A hook, already answered: unless it came too late (:class:`HookOrder`), record
        it, note its files, feed it, wake the follower."""
        t = self._now()
        if not self.order.admit(seq, t):
            logger.debug("a late %s hook, after a later one: dropped", _event(message))
            return
        self._record("hook", message, t)
        self._deliver(self.analysis.run(self._analyse_hook, message, t))
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

    def _record(self, source: ClaudeSource, message: dict[str, Any], t: float) -> None:
        if self._recorder is not None:
            line = orjson.dumps(message) + b"\n"
            self._recorder.add(t, source, self.server.redact(line))

    def _deliver(self, transitions: list[Transition]) -> None:
        self.session.deliver(transitions)


def _event(message: Mapping[str, Any]) -> str:
    event = message.get("hook_event_name")
    return event if isinstance(event, str) and event.isidentifier() else "?"
