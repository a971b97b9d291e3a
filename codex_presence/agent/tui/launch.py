"""The start of ``codex-presence codex``: the TUI and its app-server spawned before anything
slow is loaded (issue 27).

A person sees the TUI's first paint once the TUI has started; everything of ours before the
TUI's spawn adds to that one for one. So this module, and everything :func:`launch_tui`
needs before the spawn, is ``os`` and little else: the children
(:mod:`codex_presence.agent.child`) and the sockets' directory (:mod:`.sockets`). No
``logging`` (an error is kept, and said once the log is set up), no ``typing``, no
``socket`` or ``pathlib``; the session (anyio, the mapping with jsonrpcserver, the relay)
loads after it, while the TUI starts (:mod:`.session`), behind the TUI
(:func:`load_behind_the_tui`).

The order, each step as soon as the one before it:

1. The signals (:data:`~codex_presence.agent.child.FORWARDED_SIGNALS`) are the TUI's: a
   handler that passes them on, kept until the TUI is there.
2. A private 0700 directory for the two sockets (:mod:`.sockets`), and OUTER listening
   there: 0600, before either child runs. The TUI exits at once when its socket is missing
   or refuses; the real one connects half a second or more after its start, but nothing
   bounds when this process gets the CPU back after a spawn (CI: a stand-in TUI that
   connects at once found no socket beside a loaded test run). From here the socket accepts
   (the kernel queues the connection until the relay serves it). It is ``_socket``'s own
   object (:func:`.sockets.listen`): no ``socket`` import on the way. If it cannot be made,
   nothing is spawned and the session says so.
3. What CODEX names: where it is npm's node launcher and what that would run is certain, the
   native binary, with the environment (and signals) the launcher would give it
   (:mod:`~codex_presence.agent.native`: node's start is 110-120 ms of CPU, on the way to
   the TUI's first paint and again beside it for the app-server; on node >= 22.15 the
   launcher ``execve``s that binary, so the TUI's process is the one plain ``codex``
   runs), else CODEX itself.
4. ``PROGRAM --remote unix://OUTER ARGS...`` with our terminal (saved first, to be put back
   if a signal ends it), in our process group (the terminal's foreground group, which a
   program reading the terminal must be in), sent SIGTERM if we die, and a second later
   killed with its tree. The TUI first: its own start (config, a connection half a second
   later) is the longest way to its first paint; the app-server needs less, and is only
   needed once the TUI connects.
5. ``PROGRAM app-server --listen unix://INNER``: the TUI's own program, in our working
   directory (the TUI starts its threads with ``cwd: null``: the server's directory is the
   session's) and environment, killed with its whole tree if we die, however we die (its
   watchdog: :func:`~codex_presence.agent.child.spawn`). In a session of its own: a server
   has no business with the terminal, and where Linux groups CPU time by session (autogroup,
   on by default) its start takes no CPU from the TUI's, as a plain ``codex`` whose
   app-server is a daemon started earlier. Its session's share (autogroup) gets the lowest
   weight (nice 19) until the TUI connects, when the session gives it back
   (:func:`set_autogroup_nice`): the TUI's own start, which the first paint waits for, comes
   first, and the app-server needs to listen only once the TUI connects. Its output goes to
   a pipe (read into our log by the session), never to the terminal the TUI draws on.
"""

from __future__ import annotations

import os
import signal
import time

from codex_presence.agent.child import spawn
from codex_presence.agent.loading import autogrouped as _autogrouped
from codex_presence.agent.loading import load_behind as load_behind_the_tui
from codex_presence.agent.signals import FORWARDED_SIGNALS, SignalForwarding
from codex_presence.agent.tui.sockets import listen, private_directory

TYPE_CHECKING = False  # typing is not loaded before the children run
if TYPE_CHECKING:
    import _socket
    from collections.abc import Mapping, Sequence

    from codex_presence.agent.child import Child
    from codex_presence.agent.tui.terminal import SavedTerminal

__all__ = ["APP_SERVER_SOCKET", "TUI_SOCKET", "TuiLaunch", "launch_tui", "load_behind_the_tui"]

APP_SERVER_SOCKET = "app-server.sock"
"""INNER's name in the session's directory."""
TUI_SOCKET = "tui.sock"
"""OUTER's name in the session's directory."""


class TuiLaunch:
    """What :func:`launch_tui` started, or why it could not: for the session to run and end."""

    __slots__ = (
        "app_server",
        "app_server_yields",
        "command",
        "directory",
        "error",
        "listener",
        "output_fd",
        "signals",
        "sockets_failed",
        "started",
        "terminal",
        "tui",
    )

    def __init__(self, command: Sequence[str], signals: SignalForwarding) -> None:
        self.command = list(command)
        self.started = time.monotonic()
        """When the launch began (CLOCK_MONOTONIC): the session's t = 0."""
        self.signals = signals
        """The TUI's signals, forwarded from the start (:func:`launch_tui`)."""
        self.directory: str | None = None
        """The private directory of the two sockets."""
        self.listener: _socket.socket | None = None
        """OUTER, listening (:func:`.sockets.adopt` makes it a :class:`socket.socket`)."""
        self.tui: Child | None = None
        self.app_server: Child | None = None
        self.output_fd = -1
        """Our end of the app-server's stdout and stderr (a pipe); the session's to close."""
        self.terminal: SavedTerminal | None = None
        self.error: OSError | None = None
        """Why the sockets could not be made, or a child could not be run."""
        self.sockets_failed = False
        """Whether :attr:`error` is the sockets' (else a child's)."""
        self.app_server_yields = False
        """Whether the app-server's session (autogroup) was given the lowest CPU weight
        until the TUI connects (see :func:`launch_tui`; the session gives it back)."""

    @property
    def inner(self) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, APP_SERVER_SOCKET)

    @property
    def outer(self) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, TUI_SOCKET)


def launch_tui(command: Sequence[str], env: Mapping[str, str] | None = None) -> TuiLaunch:
    """Spawn the TUI ``command`` (``codex [ARGS...]``) and its app-server now, with ``env``
    (ours if None); what failed is kept in :attr:`TuiLaunch.error`, with whatever did start,
    for the session to say and end. The forwarded signals are the TUI's from here on."""
    signals = SignalForwarding(name="the TUI")
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda n, _: signals.forward(signal.Signals(n)))
    launch = TuiLaunch(command, signals)
    try:
        launch.directory = private_directory()
        launch.listener = listen(launch.outer)
    except OSError as exc:
        launch.error, launch.sockets_failed = exc, True
        return launch
    from codex_presence.agent.tui.terminal import SavedTerminal

    read_output, output = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        launch.terminal = SavedTerminal.save()
        program, program_env = _program(command[0], dict(os.environ if env is None else env))
        as_node = program != command[0]  # node's signals, as the launcher would leave them
        launch.tui = spawn(
            [program, "--remote", f"unix://{launch.outer}", *command[1:]],
            env=program_env,
            own_group=False,
            death_signal=signal.SIGTERM,
            as_node=as_node,
        )
        signals.attach(launch.tui)
        launch.app_server = spawn(
            [program, "app-server", "--listen", f"unix://{launch.inner}"],
            stdin=null,
            stdout=output,
            stderr=output,
            env=program_env,
            own_session=True,
            as_node=as_node,
        )
        launch.output_fd, read_output = read_output, -1
        launch.app_server_yields = _autogrouped() and _yield(launch.app_server.pid)
    except OSError as exc:
        launch.error = exc
    finally:
        os.close(null)
        os.close(output)
        if read_output >= 0:
            os.close(read_output)
    return launch


def _program(program: str, env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """What runs the TUI and the app-server: npm's launcher ``program``'s native codex
    directly, with the environment the launcher would give it, when that is certain
    (:func:`~codex_presence.agent.native.native_codex`); else ``program`` itself."""
    from codex_presence.agent.native import native_codex

    return native_codex(program, env) or (program, env)


_YIELDING_NICE = 19


def _yield(pid: int) -> bool:
    """The lowest CPU weight for ``pid``'s session; whether it was given (the kernel's rate
    limit is not waited out: the TUI's start would wait with it)."""
    try:
        return set_autogroup_nice(pid, _YIELDING_NICE)
    except BlockingIOError:
        return False


def set_autogroup_nice(pid: int, nice: int) -> bool:
    """Give the autogroup of ``pid`` (its session's share of the CPU, where the kernel
    groups CPU time by session) the weight of ``nice`` (0 to 19: no privilege needed);
    whether it was done. The kernel refuses an unprivileged user more than one such
    change a tenth of a second, system-wide (EAGAIN): raised, for a caller that must
    retry."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as group:
            group.write(str(nice))
    except BlockingIOError:
        raise
    except OSError:
        return False
    return True
