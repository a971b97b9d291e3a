"""Runs the real ``codex`` TUI in a pseudo-terminal (tmux), offline, against the fake model.

Pieces, each usable alone:

* :func:`tui_home` makes a private ``CODEX_HOME`` and work directory configured for the
  fake Responses-API model (the config of :class:`tests.support.codex_driver.Config`) plus what the
  TUI itself asks on a first start, so that it starts straight into the composer:
  ``[tui] screen_reader_detection_done`` (else it probes and writes it on first start) and
  ``[projects."<work>"] trust_level = "trusted"`` (else a git work directory gets the
  "Trust this folder?" screen). Login is never asked: the mock provider needs no auth.
  The environment is that of :func:`tests.support.codex_driver.session`: ``HOME`` and
  ``CODEX_HOME`` private, every proxy variable at a dead loopback port (plugin and update
  fetches fail at once), ``NO_PROXY`` for the model on 127.0.0.1.
* :class:`Tui` runs one command (``codex --remote unix://PATH`` or plain ``codex``) in a
  detached tmux session on a private tmux socket: keys in (``send-keys``), screen out
  (``capture-pane``), exit status kept (``remain-on-exit``).
* :func:`presence_command` is ``codex-presence codex`` for a :class:`Tui`; :func:`pane_process`
  finds a process in the pane; :func:`drop_client_connections` breaks the relay's client
  connections from outside (the product never drops one on its own), as a broken
  connection would.

The scenarios of issue 16 are :mod:`tests.support.tui_scenarios`'s.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from codex_presence.agent.watchdog import descendants
from tests.support.codex_driver import Config
from tests.support.waiting import LONGEST_PAUSE

__all__ = [
    "PRESENCE_MARKER",
    "Tui",
    "TuiHome",
    "codex_version",
    "drop_client_connections",
    "pane_process",
    "presence_command",
    "short_tempdir",
    "tui_home",
]

COMPOSER = "Ask Codex to do anything"
"""The composer's placeholder. It shows while the session still loads, too."""
FIRST_PAINT = "OpenAI Codex"
"""The header: the first thing the TUI draws."""
READY = "mock-model default"
"""The footer once the session is loaded (model and effort): ready for a prompt."""
TITLE_PROMPT = "single-line task title"
"""Text of the prompt of the TUI's side thread that names a task."""

ROOT = Path(__file__).resolve().parents[2]


def codex_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


@contextmanager
def short_tempdir(prefix: str = "cp-") -> Iterator[Path]:
    """A private directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class TuiHome:
    root: Path
    home: Path
    work: Path
    env: dict[str, str]


def tui_home(
    root: Path,
    base_url: str,
    config: Config | None = None,
    *,
    trust: bool = True,
    skip_screen_reader_probe: bool = True,
    git: bool = True,
) -> TuiHome:
    """A fresh private ``CODEX_HOME`` (``root/home``) and work directory (``root/work``)."""
    home, work = root / "home", root / "work"
    for path in (home, work):
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    if git:  # the user's directory usually is a repository; the TUI treats it apart
        subprocess.run(["git", "init", "-q", str(work)], check=True)
    text = (config or Config()).toml(base_url)
    if skip_screen_reader_probe:
        text += "\n[tui]\nscreen_reader_detection_done = true\n"
    if trust:
        text += f'\n[projects."{work}"]\ntrust_level = "trusted"\n'
    (home / "config.toml").write_text(text)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CODEX_", "OPENAI_", "RUST_", "TMUX"))
    }
    dead = "http://127.0.0.1:9"
    env.update(
        HOME=str(home),
        CODEX_HOME=str(home),
        CODEX_APP_SERVER_MANAGED_CONFIG_PATH=str(home / "managed_config.toml"),
        HTTPS_PROXY=dead,
        HTTP_PROXY=dead,
        https_proxy=dead,
        http_proxy=dead,
        ALL_PROXY=dead,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        RUST_LOG="warn",
        TERM="xterm-256color",
        LANG="C.UTF-8",
    )
    return TuiHome(root, home, work, env)


class Tui:
    """One command in a detached tmux session of its own tmux server."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        sock_dir: Path,
        width: int = 120,
        height: int = 40,
    ) -> None:
        self.argv = argv
        self._socket = sock_dir / "tmux.sock"
        conf = sock_dir / "tmux.conf"
        conf.write_text("set -g remain-on-exit on\nset -g history-limit 5000\n")
        self._env = env
        self._status = sock_dir / "tui.status"
        self._status.unlink(missing_ok=True)
        self.started = time.monotonic()
        # The tmux server starts with this environment; the pane inherits it.
        self._tmux(
            "-f",
            str(conf),
            "new-session",
            "-d",
            "-s",
            "tui",
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(cwd),
            "--",
            # The status through a file: tmux sometimes leaves the dead command unreaped
            # (pane_dead=1 with no pane_dead_status).
            "/bin/sh",
            "-c",
            '"$@"; echo $? > "$0"',
            str(self._status),
            *argv,
        )
        self.screens: list[tuple[float, str, str]] = []
        """(seconds since start, label, screen text) of every :meth:`snap`."""

    def _tmux(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(
            ["tmux", "-S", str(self._socket), *args],
            capture_output=True,
            text=True,
            env=self._env,
            check=False,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {out.stderr.strip()}")
        return out.stdout

    # -- screen ----------------------------------------------------------------------------

    def screen(self) -> str:
        """The visible screen as text, trailing blanks removed."""
        text = self._tmux("capture-pane", "-p", "-t", "tui")
        return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")

    def snap(self, label: str) -> str:
        text = self.screen()
        self.screens.append((time.monotonic() - self.started, label, text))
        return text

    def wait_for(
        self, pattern: str, timeout: float = 20.0, *, regex: bool = False, gone: bool = False
    ) -> float:
        """Poll the screen until ``pattern`` is on it (or, with ``gone``, no longer is);
        returns the seconds since the TUI started."""
        deadline = time.monotonic() + timeout
        found = re.compile(pattern).search if regex else (lambda s: pattern in s)
        pause = 0.01  # growing to LONGEST_PAUSE: each look is a tmux process
        while True:
            text = self.screen()
            if bool(found(text)) != gone:
                return time.monotonic() - self.started
            if time.monotonic() > deadline:
                self.screens.append((time.monotonic() - self.started, f"TIMEOUT {pattern}", text))
                raise TimeoutError(f"screen never {'lost' if gone else 'showed'} {pattern!r}")
            time.sleep(pause)
            pause = min(pause * 1.5, LONGEST_PAUSE)

    # -- keys ------------------------------------------------------------------------------

    def keys(self, *keys: str) -> None:
        """tmux key names: ``Enter``, ``Escape``, ``y``, ``C-c``…"""
        self._tmux("send-keys", "-t", "tui", *keys)

    def type(self, text: str) -> None:
        """Literal text, as typed (not a paste)."""
        for char in text:
            self._tmux("send-keys", "-t", "tui", "-l", char)
            time.sleep(0.01)

    def prompt(self, text: str, before_enter: Callable[[], object] | None = None) -> None:
        self.type(text)
        time.sleep(0.2)  # past the TUI's paste-burst window, so Enter submits
        if before_enter is not None:
            before_enter()
        self.keys("Enter")

    # -- process ---------------------------------------------------------------------------

    def exit_status(self) -> int | None:
        """The command's exit status once it ended, else None."""
        try:
            text = self._status.read_text()
        except FileNotFoundError:
            return None
        return int(text) if text.endswith("\n") else None

    def wait_exit(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while (status := self.exit_status()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the TUI did not exit")
            time.sleep(0.05)
        return status

    def close(self) -> None:
        self._tmux("kill-server", check=False)

    def pane_pid(self) -> int:
        """The pane's shell (see ``__init__``): the command is its child."""
        return int(self._tmux("display", "-p", "-t", "tui", "#{pane_pid}").strip())


# -- codex-presence codex in the pane ---------------------------------------------------------


def presence_command(binary: Path, *options: str) -> list[str]:
    """``codex-presence codex OPTIONS -- BINARY``, as this test environment runs it."""
    return [sys.executable, "-m", "codex_presence", "codex", *options, "--", str(binary)]


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
