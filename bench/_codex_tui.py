"""The codex TUI in a pseudo-terminal (tmux), offline, against the fake model
(:mod:`bench._fake_model`): for ``bench/tui.py`` and, through ``tests/support/tui_driver.py``
and ``tests/support/codex_driver.py``, the tests. Standard library and orjson only: the
benchmarks run without the test dependencies (issue 22).

Pieces, each usable alone:

* :func:`codex_binary`: the codex that ``tests/run.sh`` installs (one npm prefix per
  version under :func:`codex_cache`).
* :class:`Config`: what goes into ``$CODEX_HOME/config.toml`` (the fake model as the
  provider).
* :func:`tui_home` makes a private ``CODEX_HOME`` and work directory configured for the
  fake Responses-API model (a :class:`Config`) plus what the TUI itself asks on a first
  start, so that it starts straight into the composer: ``[tui]
  screen_reader_detection_done`` (else it probes and writes it on first start) and
  ``[projects."<work>"] trust_level = "trusted"`` (else a git work directory gets the
  "Trust this folder?" screen). Login is never asked: the mock provider needs no auth.
  ``HOME`` and ``CODEX_HOME`` are private, every proxy variable at a dead loopback port
  (plugin and update fetches fail at once), ``NO_PROXY`` for the model on 127.0.0.1.
* :class:`Tui` runs one command (``codex --remote unix://PATH`` or plain ``codex``) in a
  detached tmux session on a private tmux socket: keys in (``send-keys``), screen out
  (``capture-pane``), exit status kept (``remain-on-exit``).
* :func:`presence_command` is ``codex-presence codex`` for a :class:`Tui`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

WAIT = 60.0
"""The deadline of a wait for what must happen (a screen, a hook, an exit): generous, so
that a loaded machine fails no run (the tests' ``WAIT``, tests/support/waiting.py, which
bench does not import); a wait costs only as long as the thing takes."""

__all__ = [
    "COMPOSER",
    "DEFAULT_CODEX",
    "FIRST_PAINT",
    "READY",
    "TITLE_PROMPT",
    "Config",
    "Tui",
    "TuiHome",
    "codex_binary",
    "codex_cache",
    "codex_version",
    "presence_command",
    "short_tempdir",
    "tui_home",
]


def codex_cache() -> Path:
    """Where ``tests/run.sh`` installs the codex binaries, one npm prefix per version:
    ``$CODEX_PRESENCE_TEST_CODEX_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/codex-presence``."""
    explicit = os.environ.get("CODEX_PRESENCE_TEST_CODEX_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "codex-presence"


DEFAULT_CODEX = codex_cache() / "codex-0.169.0/node_modules/.bin/codex"
"""The binary of version-less callers (``CODEX_PRESENCE_TEST_CODEX`` overrides it)."""


def codex_binary(version: str | None = None) -> Path:
    """The codex binary of ``version`` as ``tests/run.sh`` installs it, under
    :func:`codex_cache`; without a version, ``CODEX_PRESENCE_TEST_CODEX`` or
    :data:`DEFAULT_CODEX`."""
    if version is not None:
        return codex_cache() / f"codex-{version}" / "node_modules" / ".bin" / "codex"
    return Path(os.environ.get("CODEX_PRESENCE_TEST_CODEX") or DEFAULT_CODEX)


@dataclass
class Config:
    """What goes into ``$CODEX_HOME/config.toml`` for one scenario."""

    approval_policy: str = "never"
    sandbox_mode: str = "danger-full-access"
    stream_max_retries: int = 0
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: str = ""

    def toml(self, base_url: str) -> str:
        lines = [
            'model = "mock-model"',
            f'approval_policy = "{self.approval_policy}"',
            f'sandbox_mode = "{self.sandbox_mode}"',
            'model_provider = "mock_provider"',
            "check_for_update_on_startup = false",
            "",
            "[model_providers.mock_provider]",
            'name = "Mock provider for test"',
            f'base_url = "{base_url}"',
            'wire_api = "responses"',
            "request_max_retries = 0",
            f"stream_max_retries = {self.stream_max_retries}",
            "supports_websockets = false",
            "",
            "[features]",
            # The snapshot runs the host's login shell; nothing in a scenario needs it.
            "shell_snapshot = false",
            "",
        ]
        for name, server in self.mcp_servers.items():
            lines.append(f"[mcp_servers.{name}]")
            for key, value in server.items():
                lines.append(f"{key} = {_toml_value(value)}")
            lines.append("")
        if self.extra:
            lines.append(self.extra)
        return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode()  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


COMPOSER = "Ask Codex to do anything"
"""The composer's placeholder. It shows while the session still loads, too."""
FIRST_PAINT = "OpenAI Codex"
"""The header: the first thing the TUI draws."""
READY = "mock-model default"
"""The footer once the session is loaded (model and effort): ready for a prompt."""
TITLE_PROMPT = "single-line task title"
"""Text of the prompt of the TUI's side thread that names a task."""


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

    def scrollback(self) -> str:
        """The screen with everything scrolled off above it, trailing blanks removed."""
        text = self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "tui")
        return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")

    def on_alternate_screen(self) -> bool:
        """Whether the pane shows its alternate screen (a full-screen TUI's)."""
        return self._tmux("display", "-p", "-t", "tui", "#{alternate_on}").strip() == "1"

    def snap(self, label: str) -> str:
        text = self.screen()
        self.screens.append((time.monotonic() - self.started, label, text))
        return text

    def wait_for(
        self, pattern: str, timeout: float = WAIT, *, regex: bool = False, gone: bool = False
    ) -> float:
        """Poll the screen until ``pattern`` is on it (or, with ``gone``, no longer is);
        returns the seconds since the TUI started."""
        deadline = time.monotonic() + timeout
        found = re.compile(pattern).search if regex else (lambda s: pattern in s)
        while True:
            text = self.screen()
            if bool(found(text)) != gone:
                return time.monotonic() - self.started
            if time.monotonic() > deadline:
                self.screens.append((time.monotonic() - self.started, f"TIMEOUT {pattern}", text))
                raise TimeoutError(f"screen never {'lost' if gone else 'showed'} {pattern!r}")
            time.sleep(0.01)

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

    def wait_exit(self, timeout: float = WAIT) -> int:
        deadline = time.monotonic() + timeout
        while (status := self.exit_status()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the TUI did not exit within {timeout} s:\n{self.screen()}")
            time.sleep(0.05)
        return status

    def close(self) -> None:
        self._tmux("kill-server", check=False)

    def pane_pid(self) -> int:
        """The pane's shell (see ``__init__``): the command is its child."""
        return int(self._tmux("display", "-p", "-t", "tui", "#{pane_pid}").strip())


def presence_command(binary: Path, *options: str) -> list[str]:
    """``codex-presence codex OPTIONS -- BINARY``, as this test environment runs it."""
    return [sys.executable, "-m", "codex_presence", "codex", *options, "--", str(binary)]
