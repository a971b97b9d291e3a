"""The descriptors around the wrapped child: bigger pipes, our own stdin/stdout made
non-blocking without touching the child's stderr, and files opened for us alone.

Our stdin/stdout are made non-blocking *without* touching the child's stderr: where one of
them shares its open file description with stderr (a terminal's 0, 1 and 2 are one
description; so is ``2>&1``) the flag would reach the child's stderr, so a private
description of the same terminal or pipe is opened instead (:func:`nonblocking`). A file we
write (a recording, a log) is created 0600 and never through a symlink
(:func:`open_private`).

Standard library only, and cheap to import, as :mod:`codex_presence.agent.child` (which
uses it before the child is spawned, issue 13). Linux-first: the pieces that are Linux's
degrade to doing nothing elsewhere.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress

__all__ = ["PIPE_SIZE", "grow_pipe", "is_fifo", "nonblocking", "open_private", "owner_name"]


PIPE_SIZE = 1024 * 1024
_F_SETPIPE_SZ = 1031


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
        import logging  # lazily, as child.relay_log: loaded after the child started up

        logging.getLogger("codex_presence.relay").debug(
            "fd %d shares stderr's description and cannot be reopened", fd
        )
        os.set_blocking(fd, False)
        return fd
    return private


def open_private(path: str | os.PathLike[str], *, append: bool = False) -> int:
    """A descriptor of ``path`` for writing, created 0600 (a recording holds the whole
    session; a log says what it did); an existing regular file loses its group and other
    bits. A symlink at ``path`` is never followed (one planted there would have us
    overwrite, and chmod, whatever it points to): OSError ELOOP, "is a symbolic link". An
    existing regular file must be ours, checked on the descriptor once open (one another
    user created first in a shared sticky directory would get the session, and could read
    it): OSError EPERM naming its owner, and the file is left as it was (it is truncated
    only once it is known to be ours). The open does not wait for a FIFO's reader
    (ENXIO)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    if append:
        flags |= os.O_APPEND
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP and _is_symlink(path):
            raise OSError(errno.ELOOP, "is a symbolic link (not followed)", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            if info.st_uid != os.geteuid():
                whose = f"belongs to {owner_name(info.st_uid)}, not us"
                raise OSError(errno.EPERM, whose, str(path))
            if not append:
                os.ftruncate(fd, 0)
            if info.st_mode & 0o077:
                with suppress(OSError):
                    os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~0o077)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def owner_name(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a uid without a name: how an error names the
    user a file or directory belongs to."""
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _is_symlink(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
