"""The real ``codex`` TUI in tmux for the tests: :mod:`bench._codex_tui`'s driver (shared with
``bench/tui.py``, which runs without the test dependencies) and what only the tests need.

* From :mod:`bench._codex_tui`: :func:`tui_home` (a private ``CODEX_HOME`` and work
  directory for the fake model), :class:`Tui` (one command in a detached tmux session),
  :func:`presence_command`, :func:`short_tempdir` and the screen marks.
* Here: :func:`pane_process` finds a process in the pane; :func:`drop_client_connections`
  breaks the relay's client connections from outside (the product never drops one on its
  own), as a broken connection would.

The scenarios of issue 16 are :mod:`tests.support.tui_scenarios`'s.
"""

from __future__ import annotations

import ctypes
import os
import re
import socket
from pathlib import Path

from bench._codex_tui import (
    COMPOSER,
    FIRST_PAINT,
    READY,
    TITLE_PROMPT,
    Tui,
    TuiHome,
    codex_version,
    presence_command,
    short_tempdir,
    tui_home,
)
from codex_presence.agent.watchdog import descendants

__all__ = [
    "COMPOSER",
    "FIRST_PAINT",
    "PRESENCE_MARKER",
    "READY",
    "TITLE_PROMPT",
    "Tui",
    "TuiHome",
    "codex_version",
    "drop_client_connections",
    "pane_process",
    "presence_command",
    "short_tempdir",
    "tui_home",
]


# -- codex-presence codex in the pane ---------------------------------------------------------


PRESENCE_MARKER = b"\0-m\0codex_presence\0codex\0"
"""In the command line of :func:`presence_command` (and of the shells that run it)."""


def pane_process(tui: Tui, marker: bytes, *, deepest: bool = False) -> int:
    """The pid of the first process in the pane whose command line holds ``marker`` (the
    last one with ``deepest``: the npm launcher runs the native binary as its child).
    Shells are passed over: their command lines hold the commands they run."""
    found = [
        pid
        for pid in descendants(tui.pane_pid())
        if marker in (cmdline := _cmdline(pid)) and not cmdline.startswith(b"/bin/sh\0")
    ]
    if not found:
        raise LookupError(f"no process with {marker!r} in the pane")
    return found[-1] if deepest else found[0]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


_SYS_PIDFD_GETFD = 438  # x86_64 and aarch64 alike


def drop_client_connections(pid: int, socket_name: str = "tui.sock") -> int:
    """Break every client connection that process ``pid`` accepted on its socket named
    ``socket_name``, as a dropped connection breaks: no close frame, an end of stream on
    both sides. From outside: a duplicate of each accepted socket is taken with
    ``pidfd_getfd`` (Linux 5.6; same user, ptrace permission) and shut down. Returns how many
    were broken."""
    accepted = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode Path; St 03: connected (01: listening)
        if len(fields) == 8 and fields[5] == "03" and fields[7].endswith("/" + socket_name):
            accepted.add(int(fields[6]))
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    dropped = 0
    try:
        for entry in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = str(entry.readlink())
            except OSError:
                continue  # closed meanwhile
            match = re.fullmatch(r"socket:\[(\d+)\]", target)
            if match is None or int(match.group(1)) not in accepted:
                continue
            fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(entry.name), 0)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "pidfd_getfd failed")
            with socket.socket(fileno=fd) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            dropped += 1
    finally:
        os.close(pidfd)
    return dropped
