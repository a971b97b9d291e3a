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


def _pdeathsig_preexec(parent: int) -> Callable[[], None]:
    """Runs in the child between fork and exec: die with the parent, even if the parent
    already died before the prctl took effect."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + signal.SIGKILL)

    return preexec


def spawn(
    command: Sequence[str],
    *,
    stdin: int | None = None,
    stdout: int | None = None,
    env: Mapping[str, str] | None = None,
    own_group: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``command`` dying with us, in its own process group unless ``own_group`` is
    False (a terminal program must stay in the terminal's foreground group to read it);
    stdin and stdout as given (ours if None), stderr ours. (anyio.open_process has no
    preexec_fn, which PR_SET_PDEATHSIG needs.)"""
    return subprocess.Popen(
        list(command),
        stdin=stdin,
        stdout=stdout,
        env=env,
        process_group=0 if own_group else None,
        preexec_fn=_pdeathsig_preexec(os.getpid()),
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
