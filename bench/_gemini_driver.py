"""Runs the real Gemini CLI against the fake Gemini API and captures its hooks and chat file.

Gemini CLI is started in a private ``HOME`` whose ``.gemini/settings.json`` selects API-key
auth and registers one command hook per event of :data:`HOOK_EVENTS`; each hook pipes the
event's JSON (its stdin) to a :class:`~bench._claude_driver.HookCapture` on 127.0.0.1 with
curl, whose URL path carries a per-session secret, and prints the answer (``{}``). The
capture records each POST and, once a payload names the session's ``transcript_path``
(gemini's chat file, JSON lines), follows that file and records each complete line too.
The recording, the capture and its waits are claude's (``bench/_claude_driver.py``):

- ``{"t": <s>, "from": "hook", "msg": <the event's JSON, as gemini wrote it>}``
- ``{"t": <s>, "from": "transcript", "msg": <one line of the chat file>}``
- ``{"t": <s>, "end": "eof"}`` last, dated when gemini exited (or was ended).

Gemini's own environment: ``GEMINI_API_KEY``, ``GOOGLE_GEMINI_BASE_URL`` (the fake API),
``GEMINI_CLI_TRUST_WORKSPACE=true`` (no trust dialog), ``GEMINI_CLI_NO_RELAUNCH=true`` (one
process, not a relaunched child); nothing else of the host's ``GEMINI_*``/``GOOGLE_*``.

Two ways to run it: :func:`run_print` (``gemini -p``, output captured) and
:func:`interactive` (the TUI in a detached tmux session on a private socket: keys in with
``send-keys``, the screen read with ``capture-pane``). Waits are on hook events, the chat
file or the screen, with timeouts, never fixed sleeps. ``hooks=False`` runs gemini with no
hook at all (the baseline of a measurement), a string runs that command as every hook.

Standard library, orjson and ``bench/_claude_driver.py`` only: ``bench/gemini_hooks.py``
runs it without the test dependencies; the tests reach it through
``tests/support/gemini_driver.py``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from bench._claude_driver import Capture, HookAnswer, HookCapture, Interactive, Tmux

__all__ = [
    "API_KEY",
    "APPROVAL",
    "DEFAULT_GEMINI",
    "GEMINI_VERSION",
    "HOOK_EVENTS",
    "MODEL",
    "READY",
    "GeminiSession",
    "PrintRun",
    "capture_command",
    "gemini_binary",
    "gemini_env",
    "hook_settings",
    "interactive",
    "prepare_home",
    "run_print",
]

GEMINI_VERSION = "0.61.0"
DEFAULT_GEMINI = (
    Path.home() / f".cache/codex-presence/gemini-cli-{GEMINI_VERSION}/node_modules/.bin/gemini"
)
API_KEY = "gemini-test-key"
MODEL = "gemini-2.5-pro"

HOOK_EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeModel",
    "BeforeToolSelection",
    "AfterModel",
    "BeforeTool",
    "AfterTool",
    "Notification",
    "PreCompress",
    "AfterAgent",
    "SessionEnd",
)
"""Every hook event Gemini CLI 0.61.0 knows (its ``HookEventName``)."""

HOOK_NAME = "capture"
"""The name every capture hook has: gemini's spinner shows it while the hook runs."""

Message = dict[str, Any]


def gemini_binary() -> Path:
    """The gemini binary the tests use (``CODEX_PRESENCE_TEST_GEMINI`` or the default)."""
    return Path(os.environ.get("CODEX_PRESENCE_TEST_GEMINI") or DEFAULT_GEMINI)


def capture_command(url: str) -> str:
    """The shell command of a capture hook: the event (stdin) POSTed to ``url``, the
    answer (``{}``) printed as the hook's output."""
    return "curl -sS -m 30 -H 'content-type: application/json' --data-binary @- " + shlex.quote(url)


def hook_settings(
    command: str | None, events: tuple[str, ...] = HOOK_EVENTS, **hook: Any
) -> Message:
    """The ``hooks`` part of a settings document: one command hook per event, all running
    ``command`` (none at all when it is None). ``hook`` adds keys to each hook (``timeout``
    in milliseconds, ``name``)."""
    if command is None:
        return {}
    entry = {"name": HOOK_NAME, "type": "command", "command": command, **hook}
    return {"hooks": {e: [{"matcher": "*", "hooks": [entry]}] for e in events}}


def prepare_home(root: Path, settings: Message | None = None) -> tuple[Path, Path]:
    """A fresh ``root/home`` (HOME) and ``root/work`` (the cwd); ``home/.gemini/settings.json``
    selects API-key auth, with ``settings`` merged in at the top level."""
    if root.exists():
        shutil.rmtree(root)
    home = root / "home"
    work = root / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    document = {"security": {"auth": {"selectedType": "gemini-api-key"}}, **(settings or {})}
    (home / ".gemini" / "settings.json").write_bytes(
        orjson.dumps(document, option=orjson.OPT_INDENT_2)
    )
    return home, work


def gemini_env(home: Path, base_url: str, *, api_key: str = API_KEY) -> dict[str, str]:
    """The environment gemini runs in: the private home, the fake API, nothing else online."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GEMINI_", "GOOGLE_", "TMUX", "CI"))
        and key.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    env.update(
        HOME=str(home),
        GEMINI_API_KEY=api_key,
        GOOGLE_GEMINI_BASE_URL=base_url,
        GEMINI_CLI_TRUST_WORKSPACE="true",
        GEMINI_CLI_NO_RELAUNCH="true",
        TERM="xterm-256color",
    )
    return env


@contextmanager
def _captured(
    root: Path,
    recording: Path | None,
    answer: HookAnswer | Callable[[Message], HookAnswer] | None,
    hooks: bool | str,
    hook: dict[str, Any],
    events: tuple[str, ...],
    settings: Message | None,
) -> Iterator[tuple[Capture, HookCapture, Path, Path]]:
    rec: BinaryIO | None = None
    if recording is not None:
        recording.parent.mkdir(parents=True, exist_ok=True)
        rec = recording.open("wb")
    try:
        capture = Capture(rec)
        server = HookCapture(capture, answer or HookAnswer(body=b"{}"))
        server.start()
        command = (
            hooks if isinstance(hooks, str) else capture_command(server.url) if hooks else None
        )
        document = {**hook_settings(command, events, **hook), **(settings or {})}
        home, work = prepare_home(root, document)
        try:
            yield capture, server, home, work
        finally:
            server.stop()
            capture.end()
    finally:
        if rec is not None:
            rec.close()


# -- print mode ------------------------------------------------------------------------------


@dataclass
class PrintRun:
    capture: Capture
    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    home: Path
    work: Path


def run_print(
    root: Path,
    prompt: str,
    *,
    base_url: str,
    args: tuple[str, ...] = ("-o", "text"),
    recording: Path | None = None,
    answer: HookAnswer | Callable[[Message], HookAnswer] | None = None,
    hooks: bool | str = True,
    hook: dict[str, Any] | None = None,
    events: tuple[str, ...] = HOOK_EVENTS,
    settings: Message | None = None,
    timeout: float = 120.0,
    gemini: Path | None = None,
    env: dict[str, str] | None = None,
) -> PrintRun:
    """``gemini -m MODEL -p PROMPT ARGS...`` in ``root/work``, to its exit."""
    captured = _captured(root, recording, answer, hooks, hook or {}, events, settings)
    with captured as (cap, server, home, work):
        argv = [str(gemini or gemini_binary()), "-m", MODEL, "-p", prompt, *args]
        cap.act(f"run -p {prompt!r}")
        started = time.monotonic()
        proc = subprocess.run(
            argv,
            cwd=work,
            env={**gemini_env(home, base_url), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        elapsed = time.monotonic() - started
        cap.end_at = cap.now()
        time.sleep(3 * server.poll)  # the follower reads what was written last
        return PrintRun(cap, proc.returncode, proc.stdout, proc.stderr, elapsed, home, work)


# -- interactive mode (tmux) -------------------------------------------------------------------

READY = r"Type your message"
"""On gemini's screen once its input box takes a prompt."""

APPROVAL = r"Allow execution"
"""On gemini's screen while it asks to run a shell command (1. Allow once, 2. Allow for
this session, 3. No, suggest changes (esc))."""


@dataclass
class GeminiSession(Interactive):
    """A running interactive gemini: its capture, screen and keyboard, its home."""

    home: Path | None = None

    def ready(self, timeout: float = 60.0) -> None:
        """Wait for the input box (gemini shows ``Type your message`` once it takes one)."""
        self.tmux.wait_screen(READY, timeout)

    def prompt(self, text: str) -> None:
        """Type a prompt and submit it.

        An Enter that follows the text within a few hundred milliseconds is taken as part
        of a paste and lost (measured: 0.2 s lost it, 0.5 s did not), so the Enter goes in
        once the text is on screen and half a second has passed, and again while the input
        box still holds the text."""
        self.capture.act(f"type {text!r}")
        self.tmux.type(text)
        self.tmux.wait_screen(re.escape(text))
        for _ in range(5):
            time.sleep(0.5)
            self.capture.act("key Enter")
            self.tmux.keys("Enter")
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                screen = self.tmux.screen()
                if GOODBYE in screen:  # /quit taken: its echo stays on the last screen
                    return
                if not re.search(r">\s+" + re.escape(text) + r"\s*$", _input_line(screen)):
                    return
                time.sleep(0.05)
        raise TimeoutError(f"gemini did not take the prompt {text!r}:\n{self.tmux.screen()}")

    def answer_dialog(self, key: str, pattern: str = APPROVAL) -> None:
        """Press ``key`` at the approval the screen shows, until it is gone."""
        super().answer_dialog(key, pattern)


GOODBYE = "Agent powering down. Goodbye!"
"""What gemini's last screen says after ``/quit``."""


def _input_line(screen: str) -> str:
    """The input box's line of ``screen`` (the last one starting with ``>``)."""
    lines = [ln for ln in screen.splitlines() if ln.strip().startswith(">")]
    return lines[-1].strip() if lines else ""


@contextmanager
def interactive(
    root: Path,
    *,
    base_url: str,
    args: tuple[str, ...] = (),
    recording: Path | None = None,
    answer: HookAnswer | Callable[[Message], HookAnswer] | None = None,
    hooks: bool | str = True,
    hook: dict[str, Any] | None = None,
    events: tuple[str, ...] = HOOK_EVENTS,
    settings: Message | None = None,
    gemini: Path | None = None,
    env: dict[str, str] | None = None,
    width: int = 160,
    height: int = 50,
) -> Iterator[GeminiSession]:
    """Interactive ``gemini -m MODEL ARGS...`` in tmux, in ``root/work``.

    On leaving the block gemini is ended (if it still runs) with the tmux server, the chat
    file follower reads what is left, and the recording gets its end line."""
    captured = _captured(root, recording, answer, hooks, hook or {}, events, settings)
    with captured as (cap, server, home, work):
        tmux = Tmux(root / "tmux.sock", width=width, height=height)
        argv = [str(gemini or gemini_binary()), "-m", MODEL, *args]
        cap.act("start gemini")
        tmux.start(argv, cwd=work, env={**gemini_env(home, base_url), **(env or {})})
        session = GeminiSession(cap, tmux, work, server, home=home)
        try:
            yield session
        finally:
            pid = tmux.pane_pid()
            if cap.end_at is None:
                cap.end_at = cap.now()
            tmux.kill()
            if pid is not None:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, 9)
            time.sleep(3 * server.poll)
