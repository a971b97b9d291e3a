"""The wrapped child process and the descriptors around it: what the relay needs from the OS.

Standard library only, and cheap to import: ``wrap`` spawns its child before it loads
anything else (issue 13).

The child runs under a watchdog (:mod:`codex_presence.agent.watchdog`): a small process
forked from us that starts the command in its own process group, is its parent and the
subreaper of its whole tree, and kills that tree, descendants in their own sessions or
groups included, the moment we die or let go of it, whatever killed us (SIGKILL too). We
talk to it over two pipes: a lifeline it watches for our end, and the reports it sends
back (the command's pid, or why it could not run; later its wait status). :class:`Child`
is our side of that.

Also here: signalling the child's whole group, a shell's view of its exit status, and
taking a secret out of our environment (:func:`forget_env`). The descriptors around the
child (bigger pipes, our stdin/stdout made non-blocking without touching the child's
stderr, files opened privately) are :mod:`codex_presence.agent.descriptors`'.
Linux-first: the pieces that are Linux's degrade to doing nothing elsewhere.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import time
import warnings
from collections.abc import Mapping, Sequence
from contextlib import suppress

from codex_presence.agent.descriptors import grow_pipe, is_fifo, nonblocking
from codex_presence.agent.watchdog import descendants

__all__ = [
    "Child",
    "Launched",
    "ProcessTree",
    "forget_env",
    "launch",
    "relay_log",
    "say_held",
    "spawn",
    "wait_child",
]


_HELD: list[tuple[str, str, tuple[object, ...]]] = []
"""What :func:`relay_log` was given before the log was set up: said by :func:`say_held`."""
_HELD_MOST = 64


def relay_log(level: str, message: str, *args: object) -> None:
    """Log as the relay (lazily: ``logging`` is loaded after the child has started up).

    Until the log is set up (a runner sets it up once its child's start is done: claude's
    up to 2 s after its spawn), the message is held for :func:`say_held`: Python's last
    resort would print a warning raw onto the terminal the child draws on, ``-q`` or not,
    and drop everything below it.

    A signal handler runs this between two bytecodes of the main thread, which may be in
    the middle of importing ``logging`` itself (a SIGTERM while wrap loads, on a loaded
    machine): the module is then only partly there, and the message is dropped — nothing
    has been set up to take it yet — rather than the handler failing and the runner with
    it (it exited 1, not 115, with an AttributeError)."""
    import logging

    try:
        logger = logging.getLogger("codex_presence.relay")
        set_up = logger.hasHandlers()
    except AttributeError:  # logging partly imported: see above
        return
    if not set_up:
        if len(_HELD) < _HELD_MOST:
            _HELD.append((level, message, args))
        return
    getattr(logger, level)(message, *args)


def say_held() -> None:
    """Log what :func:`relay_log` held until the log was set up, in order."""
    held = _HELD[:]
    del _HELD[: len(held)]
    for level, message, args in held:
        relay_log(level, message, *args)


def forget_env(name: str) -> str | None:
    """Take ``name`` out of our environment, and its value out of our *original*
    environment block too (what ``/proc/<our pid>/environ`` shows to any process of the same
    user, our child included: removing a variable from ``os.environ`` leaves it there); its
    value, or None. The block is overwritten in place with NULs; where that cannot be done
    (not Linux), the debug log says so."""
    value = os.environ.pop(name, None)
    if value is not None:
        try:
            _blank_original_environ(name.encode())
        except (OSError, ValueError, IndexError) as exc:
            relay_log("debug", "cannot blank $%s in our original environment: %s", name, exc)
    return value


def _blank_original_environ(key: bytes) -> None:
    import ctypes

    from codex_presence.agent.watchdog import proc_stat

    fields = proc_stat("self")
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51
    if not 0 < start < end:
        raise ValueError("no environment block")
    block = ctypes.string_at(start, end - start)
    prefix = key + b"="
    pos = 0
    while pos < len(block):
        nul = block.find(b"\0", pos)
        nul = len(block) if nul < 0 else nul
        if block.startswith(prefix, pos):
            ctypes.memset(start + pos + len(prefix), 0, nul - pos - len(prefix))
        pos = nul + 1


class Child:
    """The wrapped command, as its watchdog reports it (see the module's doc).

    ``pid`` is the command's (and its process group's, if it has its own). :attr:`reports`
    becomes readable when the watchdog has news: :meth:`poll` then sets :attr:`returncode`
    (negative N for signal N, as :mod:`subprocess` has it). :meth:`release` lets go of the
    tree: what is left of it is killed."""

    def __init__(
        self,
        *,
        pid: int,
        watchdog: int,
        lifeline: int,
        reports: int,
        own_group: bool = True,
        pending: bytes = b"",
    ) -> None:
        self.pid = pid
        self.own_group = own_group
        self.watchdog = watchdog
        self.returncode: int | None = None
        self.reports = reports
        self._lifeline = lifeline
        self._pending = pending

    def poll(self) -> int | None:
        """The return code once the command has ended (never blocks)."""
        if self.returncode is not None:
            return self.returncode
        if b"\n" not in self._pending and self.reports >= 0:
            try:
                data = os.read(self.reports, 4096)
            except BlockingIOError:
                return None
            if not data:  # the watchdog is gone and said nothing: the command lost its keeper
                relay_log("warning", "the watchdog of pid %d vanished; killing the child", self.pid)
                with suppress(OSError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.returncode = -signal.SIGKILL
                return self.returncode
            self._pending += data
        if b"\n" in self._pending:
            kind, value = self._pending.split(b"\n", 1)[0].split()
            assert kind == b"X", kind
            self.returncode = os.waitstatus_to_exitcode(int(value))
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal the command while it runs: its whole process group, if it has its own
        (its helpers too); nothing once its end was reported (its pid may be another's)."""
        if self.returncode is not None:
            return
        try:
            if self.own_group:
                os.killpg(self.pid, signum)
            else:
                os.kill(self.pid, signum)
        except ProcessLookupError:
            pass
        except PermissionError:  # the group is gone and the id reused: the command alone
            with suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the command has ended (or ``timeout`` seconds have passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left == 0.0:
                break
            select.select([self.reports], [], [], left)
        return self.returncode

    def release(self, timeout: float = 2.0) -> None:
        """Let go: the watchdog kills what is left of the tree, and exits (waited for up
        to ``timeout`` seconds, so that nothing of ours outlives us for long)."""
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        deadline = time.monotonic() + timeout
        while self.watchdog > 0:
            try:
                pid, _ = os.waitpid(self.watchdog, os.WNOHANG)
            except ChildProcessError:
                pid = self.watchdog
            if pid == self.watchdog:
                self.watchdog = 0
            elif time.monotonic() >= deadline:
                relay_log(
                    "warning", "the watchdog (pid %d) is still busy; not waiting", self.watchdog
                )
                break
            else:
                time.sleep(0.002)
        if self.reports >= 0:
            os.close(self.reports)
            self.reports = -1


def spawn(
    command: Sequence[str],
    *,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    env: Mapping[str, str] | None = None,
    own_group: bool = True,
    own_session: bool = False,
    death_signal: int = signal.SIGKILL,
    as_node: bool = False,
) -> Child:
    """Start ``command`` under a watchdog (see the module's doc), with ``stdin``, ``stdout``
    and ``stderr`` as its own (ours if None). It gets a process group of its own unless
    ``own_group`` is False (a terminal program must stay in the terminal's foreground group
    to read it; its watchdog stays there too); with ``own_session`` the group is a session
    of its own (no controlling terminal; a CPU share of its own where the kernel groups
    by session, as Linux's autogroup does). When we end, the command is sent
    ``death_signal`` first and given a second, if that is not SIGKILL (a launcher that
    forwards signals to the program it runs, as codex's npm script does, and a terminal
    program that must restore the terminal want SIGTERM); then its whole tree is killed.
    Raises :class:`OSError` (e.g. :class:`FileNotFoundError`) if it cannot be run. Every
    other descriptor of ours stays out of both processes. With ``as_node`` (a program run
    in place of npm's codex launcher) its signals are as node would leave them.

    Call it from a process that has no other threads if you can (``wrap`` does): the
    watchdog is a fork of this process that goes on running Python."""
    from codex_presence.agent import watchdog

    lifeline_r, lifeline_w = os.pipe()
    reports_r, reports_w = os.pipe()
    plan = watchdog.Plan(
        command=list(command),
        env=dict(os.environ if env is None else env),
        stdin=0 if stdin is None else stdin,
        stdout=1 if stdout is None else stdout,
        stderr=2 if stderr is None else stderr,
        lifeline=lifeline_r,
        reports=reports_w,
        own_group=own_group,
        own_session=own_session,
        death_signal=death_signal,
        as_node=as_node,
    )
    with warnings.catch_warnings():
        # Python 3.12+ warns of fork() in a process with threads (a test's event loop has
        # worker threads); the watchdog touches no lock another thread may hold.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the watchdog: never returns
        watchdog.run(plan)
    os.close(lifeline_r)
    os.close(reports_w)
    first = b""
    try:
        while b"\n" not in first:
            data = os.read(reports_r, 64)
            if not data:
                raise OSError(errno.ECHILD, "the watchdog exited before starting the command")
            first += data
    except BaseException:
        os.close(lifeline_w)
        os.close(reports_r)
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    line, pending = first.split(b"\n", 1)
    kind, value = line.split()
    if kind == b"E":
        os.close(lifeline_w)
        os.close(reports_r)
        os.waitpid(pid, 0)
        code = int(value)
        raise OSError(code, os.strerror(code), command[0])
    os.set_blocking(reports_r, False)
    return Child(
        pid=int(value),
        watchdog=pid,
        lifeline=lifeline_w,
        reports=reports_r,
        own_group=own_group or own_session,
        pending=pending,
    )


class Launched:
    """A spawned child and the descriptors around it, ready to be copied (:func:`launch`)."""

    __slots__ = ("child", "child_in", "child_out", "originals", "saved_flags", "stdin", "stdout")

    def __init__(
        self,
        *,
        child: Child,
        stdin: int,
        stdout: int,
        child_in: int,
        child_out: int,
        originals: dict[int, int],
        saved_flags: dict[int, bool],
    ) -> None:
        self.child = child
        self.stdin = stdin
        """Our stdin, non-blocking: the inherited descriptor or a private one."""
        self.stdout = stdout
        self.child_in = child_in
        """Our end of the child's stdin (non-blocking)."""
        self.child_out = child_out
        """Our end of the child's stdout (non-blocking)."""
        self.originals = originals
        """Private descriptors opened for our stdin/stdout → the inherited ones."""
        self.saved_flags = saved_flags
        """Our stdin's and stdout's blocking flags as they were, to give them back."""


def launch(
    command: Sequence[str],
    *,
    stdin: int = 0,
    stdout: int = 1,
    env: Mapping[str, str] | None = None,
) -> Launched:
    """Everything before the first byte is copied: our stdin and stdout made non-blocking
    (see :func:`nonblocking`; before the child exists, so that not even a probe reaches its
    stderr), pipes to the child (grown), and the child spawned (:func:`spawn`; npm's codex
    launcher as what it would run, where that is certain). Raises :class:`OSError` if it
    cannot be run, with everything undone."""
    saved_flags: dict[int, bool] = {}
    for fd in (stdin, stdout):
        with suppress(OSError):  # a closed descriptor reads as EOF, fails as a write
            saved_flags[fd] = os.get_blocking(fd)
    child_in_r, child_in = os.pipe()
    child_out, child_out_w = os.pipe()
    for fd in (child_in, child_out_w):
        grow_pipe(fd)
    originals: dict[int, int] = {}
    try:
        ours = []
        for fd, mode in ((stdin, os.O_RDONLY), (stdout, os.O_WRONLY)):
            private = nonblocking(fd, mode)
            if private != fd:
                originals[private] = fd
            if is_fifo(private):
                grow_pipe(private)
            ours.append(private)
        program, program_env, as_node = _as_launched(command, env)
        child = spawn(
            program, stdin=child_in_r, stdout=child_out_w, env=program_env, as_node=as_node
        )
    except BaseException:
        for fd in (child_in, child_out, *originals):
            os.close(fd)
        for fd, blocking in saved_flags.items():
            with suppress(OSError):
                os.set_blocking(fd, blocking)
        raise
    finally:
        os.close(child_in_r)
        os.close(child_out_w)
    for fd in (child_in, child_out):
        os.set_blocking(fd, False)
    return Launched(
        child=child,
        stdin=ours[0],
        stdout=ours[1],
        child_in=child_in,
        child_out=child_out,
        originals=originals,
        saved_flags=saved_flags,
    )


def _as_launched(
    command: Sequence[str], env: Mapping[str, str] | None
) -> tuple[list[str], Mapping[str, str] | None, bool]:
    """``command`` and ``env`` as npm's codex launcher would run them, where ``command[0]``
    is one whose run is certain (:func:`~codex_presence.agent.native.native_codex`: node's
    start off the way to codex's first answer), and True (its signals as node leaves them:
    :attr:`~codex_presence.agent.watchdog.Plan.as_node`); else as they are, and False."""
    from codex_presence.agent.native import native_codex

    found = native_codex(command[0], os.environ if env is None else env) if command else None
    if found is None:
        return list(command), env, False
    return [found[0], *command[1:]], found[1], True


async def wait_child(child: Child) -> int:
    """The child's return code, once its watchdog has reported its end."""
    import anyio

    while child.poll() is None:
        await anyio.wait_readable(child.reports)
    assert child.returncode is not None
    return child.returncode


class ProcessTree:
    """A child and every process under it, for ending them all while we run (the child's
    watchdog ends what is left when we end): codex runs each command in a process group of
    its own, so signalling the child's group misses them.

    :meth:`hold` takes a pidfd of each process under the child at that moment, so that one
    orphaned later (its parent died, it was re-parented) is still signalled, and a pid that
    was reused meanwhile never is. Without pidfds (old kernels), pids are signalled."""

    def __init__(self, process: Child) -> None:
        self.process = process
        self._held: dict[int, int | None] = {}

    def hold(self) -> None:
        """Take hold of every process under the child now (again: new ones are added)."""
        if self.process.poll() is not None:
            return  # its pid may be another process's by now
        for pid in descendants(self.process.pid):
            if pid not in self._held:
                try:
                    self._held[pid] = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue
                except OSError:
                    self._held[pid] = None

    def kill(self, signum: int = signal.SIGKILL) -> None:
        """Signal the child (its group, if it has its own) and every process held (taking
        hold of new ones first)."""
        self.hold()
        self.process.send_signal(signum)
        for pid, pidfd in self._held.items():
            with suppress(OSError):
                if pidfd is None:
                    os.kill(pid, signum)
                else:
                    signal.pidfd_send_signal(pidfd, signum)

    def close(self) -> None:
        for pidfd in self._held.values():
            if pidfd is not None:
                os.close(pidfd)
        self._held.clear()
