"""The wrapped child process and the descriptors around it: what the relay needs from the OS.

Spawning the child in its own process group with ``PR_SET_PDEATHSIG`` = SIGKILL (so it never
outlives wrap, even a SIGKILLed wrap), waiting for it without a thread where the kernel has
pidfds, signalling its whole group, a shell's view of its exit status, bigger pipes, and
making our own stdin/stdout non-blocking *without* touching the child's stderr: where one of
them shares its open file description with stderr (a terminal's 0, 1 and 2 are one
description; so is ``2>&1``) the flag would reach the child's stderr, so a private
description of the same terminal or pipe is opened instead (:func:`nonblocking`).
Linux-first: the pieces that are Linux's degrade to doing nothing elsewhere.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

import anyio

__all__ = [
    "PIPE_SIZE",
    "ProcessTree",
    "descendants",
    "exit_status",
    "grow_pipe",
    "is_fifo",
    "kill_group",
    "nonblocking",
    "spawn",
    "wait_child",
]

logger = logging.getLogger("codex_presence.relay")

PIPE_SIZE = 1024 * 1024
_F_SETPIPE_SZ = 1031
_PR_SET_PDEATHSIG = 1


def grow_pipe(fd: int, size: int = PIPE_SIZE) -> None:
    """Bigger pipes (to the child, and our own stdin/stdout when they are pipes): fewer,
    larger chunks at full speed, fewer wake-ups. Only the pipe's capacity changes. Best
    effort."""
    import fcntl

    with suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)


def is_fifo(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _is_blocking(fd: int) -> bool | None:
    try:
        return os.get_blocking(fd)
    except OSError:
        return None


def _reopen(fd: int, mode: int) -> int | None:
    """A new open file description (non-blocking, close-on-exec) of the terminal or pipe
    behind ``fd``; None for anything else, or if that fails."""
    flags = mode | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        if os.isatty(fd):
            return os.open(os.ttyname(fd), flags | os.O_NOCTTY)
        if is_fifo(fd):
            return os.open(f"/proc/self/fd/{fd}", flags)  # Linux: opens the pipe anew
    except OSError:
        pass
    return None


def nonblocking(fd: int, mode: int) -> int:
    """``fd`` made non-blocking, or a private non-blocking descriptor of the same file
    (a new one, the caller's to close) where ``fd`` shares its open file description with
    stderr; see the module's doc."""
    stderr_blocking = _is_blocking(2)
    try:
        os.set_blocking(fd, False)
    except OSError:
        return fd  # closed: it reads as EOF and fails as a write, as before
    if not stderr_blocking or _is_blocking(2):
        return fd  # stderr unaffected (or not ours to protect)
    os.set_blocking(fd, True)  # undo: this description is the child's stderr too
    private = _reopen(fd, mode)
    if private is None:
        logger.debug("fd %d shares stderr's description and cannot be reopened", fd)
        os.set_blocking(fd, False)
        return fd
    return private


def exit_status(returncode: int) -> int:
    """A shell's view of a child's end: its code, or 128 + N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _pdeathsig_preexec(parent: int, signum: int = signal.SIGKILL) -> Callable[[], None]:
    """Runs in the child between fork and exec: die with the parent, even if the parent
    already died before the prctl took effect."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + signum)

    return preexec


def spawn(
    command: Sequence[str],
    *,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    env: Mapping[str, str] | None = None,
    own_group: bool = True,
    death_signal: int = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """Start ``command`` sent ``death_signal`` when we die, in its own process group unless
    ``own_group`` is False (a terminal program must stay in the terminal's foreground group
    to read it); stdin, stdout and stderr as given (ours if None). A launcher that forwards
    signals to the program it runs (codex's npm script) wants SIGTERM: SIGKILL would leave
    the program behind. (anyio.open_process has no preexec_fn, which PR_SET_PDEATHSIG
    needs.)"""
    return subprocess.Popen(
        list(command),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=env,
        process_group=0 if own_group else None,
        preexec_fn=_pdeathsig_preexec(os.getpid(), death_signal),
    )


async def wait_child(process: subprocess.Popen[bytes]) -> int:
    """The child's return code, once it has exited (a pidfd, or a worker thread)."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # no pidfd (old kernel): a worker thread waits instead
        return await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
    try:
        while process.poll() is None:
            await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    assert process.returncode is not None
    return process.returncode


def kill_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's whole process group (its helpers too)."""
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
    except PermissionError:  # the group is gone and the id reused: the child alone
        with suppress(ProcessLookupError):
            process.send_signal(signum)


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (from /proc; Linux), children before grandchildren."""
    children: dict[int, list[int]] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(0), ()):
            found.append(child)
            todo.append(child)
    return found


class ProcessTree:
    """A child and every process under it, for ending them all: codex runs each command
    in a process group of its own, so signalling the child's group misses them.

    :meth:`hold` takes a pidfd of each process under the child at that moment, so that one
    orphaned later (its parent died, it was reparented) is still signalled, and a pid that
    was reused meanwhile never is. Without pidfds (old kernels), pids are signalled."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
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
        """Signal the child's group and every process held (taking hold of new ones first)."""
        self.hold()
        if self.process.poll() is None:
            kill_group(self.process, signum)
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
