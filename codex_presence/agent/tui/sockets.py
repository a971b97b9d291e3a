"""The sockets of ``codex-presence codex``'s session, and the private directory they live in.

The TUI connects to OUTER (ours, listening from just after the TUI's spawn: the TUI
connects half a second or more later); the app-server listens on INNER (``--listen
unix://INNER`` makes INNER a symlink to a socket of its own, with a lock file beside it).
Both live in a fresh 0700 directory, each socket 0600, so no other user can reach either
end; all of it is removed at the session's end, and a session that was killed leaves it to
the next one's sweep (:mod:`codex_presence.agent.leftovers`).

The directory is made before the TUI's spawn, so :func:`private_directory` needs ``os``
alone; everything else here (:mod:`socket`, :mod:`pathlib`, :mod:`shutil`) loads when it
is first used, after the spawn (issue 27: 10-15 ms of CPU before the TUI's start).
"""

from __future__ import annotations

import os
from contextlib import suppress

from codex_presence.agent.leftovers import new_owned_directory, temporary_bases

TYPE_CHECKING = False  # typing is not loaded before the TUI's spawn
if TYPE_CHECKING:
    import _socket
    import socket
    from collections.abc import Sequence
    from pathlib import Path

__all__ = [
    "PREFIX",
    "accepts",
    "adopt",
    "link_target",
    "listen",
    "private_directory",
    "remove",
    "said",
    "sweep_beside",
]

PREFIX = "codex-presence-"
_SUN_PATH_MAX = 107
"""The longest unix socket path (``sun_path`` is 108 bytes with its NUL)."""


def private_directory(bases: Sequence[str | None] | None = None) -> str:
    """A new 0700 directory for the session's sockets: in ``$XDG_RUNTIME_DIR`` (the user's
    own, in memory) if there is one, else a temporary directory (:func:`temporary_bases`)
    — the first of ``bases`` where one can be made and the socket paths fit in
    ``sun_path``. Raises OSError saying why each failed."""
    if bases is None:
        bases = [os.environ.get("XDG_RUNTIME_DIR"), *temporary_bases()]
    why: list[str] = []
    for base in dict.fromkeys(b for b in bases if b):
        # The owner's pid (at most 7 digits) and 8 random characters follow the prefix; the
        # longest name in it is "app-server.sock".
        longest = os.path.join(
            os.path.realpath(base), f"{PREFIX}4194304-12345678", "app-server.sock"
        )
        if len(longest) > _SUN_PATH_MAX:
            why.append(f"{base}: too long a path for a unix socket")
            continue
        try:
            return new_owned_directory(PREFIX, base)  # swept once the TUI runs
        except OSError as exc:
            why.append(f"{base}: {exc.strerror or exc}")
    raise OSError(f"no directory for them ({'; '.join(why) or 'none to try'})")


def said(exc: OSError) -> str:
    """An OSError in a few words: ``PATH: reason``, or its message."""
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


def listen(path: str) -> _socket.socket:
    """A unix socket listening at ``path``, 0600: ``_socket``'s own object, the C type that
    :class:`socket.socket` extends, so that OUTER listens before the TUI's spawn without
    ``socket``'s import (and its ``selectors``, a few ms) on the way to the TUI's first
    paint. :func:`adopt` makes it a :class:`socket.socket` for the session."""
    import _socket

    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(16)
    except BaseException:
        listener.close()
        raise
    return listener


def adopt(listener: _socket.socket) -> socket.socket:
    """:func:`listen`'s socket as a :class:`socket.socket` (the same descriptor)."""
    import socket

    return socket.socket(fileno=listener.detach())


def link_target(path: Path) -> Path | None:
    """Where ``--listen unix://PATH`` put the socket: PATH is a symlink to it."""
    try:
        return path.parent / path.readlink()
    except OSError:
        return None


def remove(directory: Path | None, inner_target: Path | None) -> None:
    """The private directory, and the socket and lock file behind INNER's symlink (the
    app-server leaves both when a signal ends it)."""
    import shutil

    if inner_target is not None:
        for leftover in (inner_target, inner_target.with_name(inner_target.name + ".lock")):
            with suppress(OSError):
                leftover.unlink()
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def accepts(path: Path) -> bool:
    """Whether the socket at ``path`` accepts a connection now."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def sweep_beside(directory: Path) -> None:
    """Remove the socket directories that killed sessions left beside ``directory`` (ours;
    see :mod:`codex_presence.agent.leftovers`): the session does it once the TUI runs, not
    before its spawn."""
    from codex_presence.agent.leftovers import sweep_leftovers

    sweep_leftovers(PREFIX, str(directory.parent))
