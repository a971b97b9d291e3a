"""The start of ``codex-presence claude``: claude spawned before anything slow is loaded
(issue 34), as ``codex-presence codex`` spawns the TUI (:mod:`codex_presence.agent.tui.launch`).

A person sees claude's first paint once claude has started; everything of ours before the
spawn adds to it one for one. claude must find where its hooks go in its settings when
it starts: the spool directory (Linux), which holds them until read, or else the hook
server's socket, which comes first, but not the server: the session (anyio, the spool or
the server with h11, the mapping, the broker link) loads after the spawn, behind claude's
own start (the kernel queues claude's connections in the socket's backlog meanwhile; its
first hook, SessionStart, comes a few hundred milliseconds later).

The order, each step as soon as the one before it:

1. The signals (:data:`~codex_presence.agent.child.FORWARDED_SIGNALS`) are claude's: a
   handler that passes them on by the shells' rule, kept until the session takes them.
2. Where there is something to observe: the session's private 0700 directory
   (:func:`~codex_presence.agent.leftovers.owned_directory`; the leftovers of killed
   sessions are swept after the spawn), and in the directory claude's settings file and
   the hook poster (:func:`~.settings.with_our_hooks`); only where the hooks are not
   spooled into the directory (not Linux, ``CODEX_PRESENCE_HOOK_SPOOL=0``, no bash), a
   loopback socket listening with a fresh secret
   (:mod:`codex_presence.agent.hooks.listener`), for the poster's URL.
3. claude, with our terminal, in our process group, under its watchdog
   (:func:`~codex_presence.agent.child.spawn`). Up to here the standard library's lightest
   modules alone (no logging, pathlib, shutil, typing, dataclasses or orjson: each import
   before the spawn delays claude's first paint, several times over on a loaded machine).
4. What nothing before the spawn needs (``on_spawn``: the token blanked in our
   environment).
5. Where there is a socket, a thread that takes claude's connections as they come, each
   peer's uid noted at once (:class:`~codex_presence.agent.hooks.listener.EarlyAccepts`),
   until the server, loaded, takes them over: a poster gives up on its answer after 2 s, and
   one gone could no longer be told from another user's (the loading took 2-2.4 s at load
   10).
6. Where the hooks are spooled, the session's loading waits for the end of claude's start
   (:func:`until_claude_started`: its first sign, then its main thread quiet): nothing of
   claude's waits for the session then, and its few hundred ms of CPU come after claude's
   first paint and prompt instead of beside them. Where they are posted, no wait.
7. The runner's logging (nothing is said before: ``import logging`` alone is ~4 ms of
   CPU), then what the settings could check or say only at a cost to claude's start
   (:func:`run_checks`): whether bash opens ``/dev/tcp`` for the poster (else the poster
   runs curl; where the hooks are posted, so at once, long before claude's first hook),
   which hooks claude got and why.

A spawn that fails is kept for the session to say
(:func:`~codex_presence.agent.signals.cannot_run`).
"""

from __future__ import annotations

import os
import signal
import time

from codex_presence.agent.child import spawn
from codex_presence.agent.signals import FORWARDED_SIGNALS, SignalForwarding

TYPE_CHECKING = False  # typing is not loaded before claude's spawn
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from codex_presence.agent.child import Child
    from codex_presence.agent.hooks.listener import EarlyAccepts

__all__ = [
    "HISTORY",
    "PRIVATE_PREFIX",
    "ClaudeLaunch",
    "QuietWindow",
    "config_dir",
    "forward_signals_now",
    "launch_claude",
    "release",
    "run_checks",
    "sweep_after_the_spawn",
    "until_claude_started",
]

PRIVATE_PREFIX = "codex-presence-claude-"
"""The session's private directory (its settings file), named after its owner."""
HISTORY = "history.jsonl"
"""claude's prompt history, in its config directory: every session's prompts, one a line."""
STARTED_WITHIN = 2.0
"""Seconds the session's loading waits at most for the end of claude's start
(:func:`until_claude_started`): 0.6-0.8 s on a quiet machine, 1-1.6 s at load 3-5."""
QUIET_WITHIN = 1.0
"""Seconds it waits at most for claude's quiet once claude has said it began (a person
who types at once keeps claude busy: the roster hears of the session this much later at
most): 0.3-0.9 s from its first sign to its quiet at load 0-5."""
QUIET_FOR = 0.05
"""Seconds claude's main thread must have been mostly off the CPU, neither running nor
waiting for one, and seen waiting for something else at every look
(:class:`QuietWindow`), for its start to count as done."""
QUIET_SHARE = 0.5
"""The share of :data:`QUIET_FOR` that claude's main thread may still have spent running
or runnable (a timer's wake-up) and count as quiet: through its start it is runnable all
the time, at its prompt it sleeps."""


class ClaudeLaunch:
    """What :func:`launch_claude` started, or why it could not: for the session to run."""

    __slots__ = (
        "after_spawn",
        "command",
        "early",
        "error",
        "file_led",
        "history_from",
        "hook_path",
        "listener",
        "private",
        "process",
        "signals",
        "started",
    )

    def __init__(self, command: Sequence[str], signals: SignalForwarding) -> None:
        self.command = list(command)
        self.signals = signals
        self.started = time.monotonic()
        """When claude was spawned (CLOCK_MONOTONIC): the session's t = 0."""
        self.private: str | None = None
        """The session's private directory (settings file, poster), removed at its end."""
        self.listener: socket.socket | None = None
        """The hook server's socket, listening; the session serves it."""
        self.early: EarlyAccepts | None = None
        """What takes claude's connections from :attr:`listener` until the server does."""
        self.hook_path: bytes | None = None
        """The hook URL's path, its secret in it: never logged."""
        self.after_spawn: list[Callable[[], None]] = []
        """Checks of the settings that wait until claude is spawned
        (:func:`~.settings.with_our_hooks`), and what they say: :func:`run_checks`."""
        self.file_led = False
        """Whether claude's session file leads (:func:`~.settings.with_our_hooks`)."""
        self.history_from: int | None = None
        """Where it leads: the size of claude's prompt history just before the spawn, where
        reading it starts (:class:`~.files.ClaudeFiles`)."""
        self.process: Child | None = None
        self.error: OSError | None = None
        """Why claude could not be run."""


def forward_signals_now(signals: SignalForwarding) -> None:
    """The forwarded signals go to ``signals`` (claude's, once attached) from here on, by a
    plain handler: until the session's own receiver takes them over."""
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda n, _: signals.forward(signal.Signals(n)))


def launch_claude(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    settings: Mapping[str, Any],
    observe: bool = True,
    hooks: str = "auto",
    signals: SignalForwarding | None = None,
    on_spawn: Callable[[], None] | None = None,
) -> ClaudeLaunch:
    """Spawn ``command`` (``claude [ARGS...]``) now, with ``env``, and with our hooks in its
    settings (the person's ``settings`` carried) when ``observe``; a spawn that failed is
    kept in :attr:`ClaudeLaunch.error`. Raises OSError when the private directory, the
    socket or the settings cannot be made (nothing is left behind then). ``on_spawn`` runs
    at once after the spawn (or its failure). Nothing is said here: the caller sets up its
    logging, then :func:`run_checks` (at once where the hooks are posted: the poster's
    check comes before claude's first hook)."""
    launch = ClaudeLaunch(command, signals or SignalForwarding(name="claude"))
    argv = list(command)
    if observe:
        from codex_presence.agent.claude.settings import with_our_hooks
        from codex_presence.agent.leftovers import owned_directory

        def listen() -> str:
            """The hook server's socket, opened only where the hooks are not spooled."""
            from codex_presence.agent.hooks.listener import (
                hook_url,
                listen_loopback,
                new_hook_path,
            )

            launch.listener = listen_loopback()
            launch.hook_path = new_hook_path()
            return hook_url(launch.listener, launch.hook_path)

        try:
            launch.private = owned_directory(PRIVATE_PREFIX)
            argv, launch.file_led = with_our_hooks(
                argv,
                settings,
                listen,
                private=launch.private,
                env=env,
                hooks=hooks,
                later=launch.after_spawn,
            )
        except BaseException:
            release(launch)
            raise
        if launch.file_led:
            launch.history_from = _size(os.path.join(_config_dir(env), HISTORY))
    launch.started = time.monotonic()
    try:
        launch.process = spawn(argv, env=env, own_group=False)
    except OSError as exc:
        launch.error = exc
        if on_spawn is not None:
            on_spawn()
        return launch
    if on_spawn is not None:
        on_spawn()
    launch.signals.attach(launch.process)
    if launch.listener is not None:
        from codex_presence.agent.hooks.listener import EarlyAccepts

        launch.early = EarlyAccepts(launch.listener)
    return launch


def run_checks(launch: ClaudeLaunch) -> None:
    """The settings' checks that waited for claude's spawn, and their words (the log set up
    by now), each once (:attr:`ClaudeLaunch.after_spawn`): where the hooks are posted,
    right after the spawn (claude's first hook comes 0.3 s or more later); where they are
    spooled, they check nothing and only say which hooks claude got: once its start is
    done (:func:`until_claude_started`)."""
    checks, launch.after_spawn = launch.after_spawn, []
    for check in checks:
        check()


def until_claude_started(
    launch: ClaudeLaunch,
    env: Mapping[str, str],
    *,
    at_most: float = STARTED_WITHIN,
    quiet_within: float = QUIET_WITHIN,
) -> None:
    """Where nothing of claude's waits for the session (its hooks spooled, or no hooks at
    all: ``--no-trace``), wait until claude's start is done, its exit, or ``at_most``
    seconds: then the session loads (a few hundred ms of CPU: anyio, the mapping, the
    broker link) after claude's first paint and prompt, not beside them (issue 34: on a
    2-core machine every ms of CPU of ours in claude's start is claude's, or more). Its
    start is done once it has said it began (its first hook in the spool, its session file
    written: both 0.2-0.3 s *before* its first paint) and its main thread has then been
    quiet for :data:`QUIET_FOR` (:class:`QuietWindow`; 0.1-0.3 s after its prompt shows).
    Its hooks wait in the spool meanwhile and its files are read from where they stand;
    once it began, its quiet is waited for ``quiet_within`` at most, and not at all in
    print mode (``-p``: no screen, its turn runs at once). Where the hooks are posted, the
    poster waits for the server: no wait."""
    process = launch.process
    if process is None or launch.listener is not None:
        return
    spool = None
    if launch.private is not None:
        from codex_presence.core.hooks.poster import SPOOL

        spool = os.path.join(launch.private, SPOOL)
        if not os.path.isdir(spool):
            return  # (cannot be: where there is no socket, the hooks are spooled)
    import select

    from codex_presence.core.claude.protocol import prints

    printing = prints(launch.command[1:])  # no screen to paint: its turn runs at once
    status = os.path.join(_config_dir(env), "sessions", f"{process.pid}.json")
    deadline = time.monotonic() + at_most
    began = False
    quiet = QuietWindow()
    proc = f"/proc/{process.pid}"
    while time.monotonic() < deadline and process.poll() is None:
        if not began:
            began = bool(spool and os.listdir(spool)) or os.path.exists(status)
            if began and printing:
                return
            if began:
                deadline = min(deadline, time.monotonic() + quiet_within)
        if began:
            seen = _scheduled(proc)
            if seen is None or quiet.add(time.monotonic(), *seen):
                return  # (no scheduler statistics: as soon as it began)
        select.select([process.reports], [], [], 0.01)  # or at once, claude's exit


class QuietWindow:
    """Whether a thread has been quiet: over the last :data:`QUIET_FOR` seconds at least,
    never seen runnable (running or waiting for a CPU) and, by its scheduler statistics,
    running or waiting for a CPU less than :data:`QUIET_SHARE` of the time. Both: the
    kernel adds a thread's wait for a CPU to its statistics only once it gets one (a
    thread that waited 30 ms behind another process looked quiet meanwhile), and a look
    now and then misses short runs. Fed samples as they come."""

    __slots__ = ("_samples", "for_seconds", "share")

    def __init__(self, for_seconds: float = QUIET_FOR, share: float = QUIET_SHARE) -> None:
        self.for_seconds = for_seconds
        self.share = share
        self._samples: list[tuple[float, int]] = []

    def add(self, when: float, runnable: bool, busy_ns: int) -> bool:
        """Note a sample (when, whether the thread was runnable then, its time running and
        waiting for a CPU so far in ns); whether it has been quiet over the window ending
        here."""
        samples = self._samples
        if runnable:  # the window starts again here
            samples.clear()
        samples.append((when, busy_ns))
        # The oldest kept is the newest at least the window's length ago.
        while len(samples) > 1 and when - samples[1][0] >= self.for_seconds:
            del samples[0]
        since, before = samples[0]
        span = when - since
        return (
            not runnable and span >= self.for_seconds and busy_ns - before < span * self.share * 1e9
        )


def _scheduled(proc: str) -> tuple[bool, int] | None:
    """Whether a process's main thread is runnable now (``/proc/<pid>/stat``: state R),
    and its time on a CPU and waiting for one so far, in ns (``/proc/<pid>/schedstat``);
    None where they cannot be read (not Linux, no schedstats, the process gone)."""
    try:
        with open(f"{proc}/stat", "rb") as stat:
            state = stat.read().rpartition(b") ")[2][:1]
        with open(f"{proc}/schedstat", "rb") as stats:
            running, waiting = stats.read().split()[:2]
        return state == b"R", int(running) + int(waiting)
    except (OSError, ValueError):
        return None


def config_dir(env: Mapping[str, str]) -> Path:
    """Claude's config directory: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    from pathlib import Path

    return Path(_config_dir(env))


def _config_dir(env: Mapping[str, str]) -> str:
    """:func:`config_dir` without :mod:`pathlib` (before claude's spawn)."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return configured
    home = env.get("HOME")
    return os.path.join(home or os.path.expanduser("~"), ".claude")


def _size(path: str) -> int:
    """``path``'s size now (0 if it is not there)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def release(launch: ClaudeLaunch) -> None:
    """Close the socket and remove the private directory, if they are still there."""
    if launch.early is not None:
        for sock, _, _ in launch.early.stop():
            sock.close()  # (the server, if it ran, took them: closed already)
        launch.early = None
    if launch.listener is not None:
        launch.listener.close()
    if launch.private is not None:
        import shutil

        shutil.rmtree(launch.private, ignore_errors=True)
        launch.private = None


def sweep_after_the_spawn() -> None:
    """The private directories of killed sessions, swept once claude runs."""
    from codex_presence.agent.leftovers import sweep_leftovers

    sweep_leftovers(PRIVATE_PREFIX)
