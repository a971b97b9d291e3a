"""Runs the real Claude Code binary against the fake Messages API and captures its hooks.

Claude Code is started in a private ``HOME`` (which is also its ``CLAUDE_CONFIG_DIR``) with
``--settings FILE``, a settings file holding one HTTP hook per event in :data:`HOOK_EVENTS`,
all pointing at a :class:`HookCapture` on 127.0.0.1 whose URL path carries a per-session
secret. Each hook POST is answered at once (``200``, empty body, unless told otherwise) and
recorded; once a payload names the session's ``transcript_path``, a follower thread reads
that JSONL file as it grows and records each complete entry too. A third thread records each
new content of claude's session status file, ``$CLAUDE_CONFIG_DIR/sessions/<pid>.json``
(``"status": "busy" | "waiting" | "idle" | "shell"``), the one source that sees every
interrupt.

The recording is JSON Lines, in the order the capture saw things:

- ``{"t": <s>, "from": "hook", "msg": <the POSTed JSON, as it came>}``
- ``{"t": <s>, "from": "transcript", "msg": <one transcript entry, as it was written>}``
- ``{"t": <s>, "from": "session", "msg": <the session file's new content>}``
- ``{"t": <s>, "end": "eof"}`` last, dated when claude exited (or was ended).

``t`` is seconds since the session started (just before claude was launched). What the
driver did (keys sent) is kept apart, in :attr:`Capture.actions`, since a live hook
server cannot know it.

Two ways to run claude: :func:`run_print` (``claude -p``, output captured) and
:func:`interactive` (the TUI in a detached tmux session on a private socket; keys go in with
``send-keys`` and the screen is read with ``capture-pane``). Waits are on hook events, the
transcript or the screen, with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO

import orjson

WAIT = 60.0
"""The deadline of a wait for what must happen (a screen, a hook, an exit): generous, so
that a loaded machine fails no run (the tests' ``WAIT``, tests/support/waiting.py, which
bench does not import); a wait costs only as long as the thing takes."""

__all__ = [
    "API_KEY",
    "CLAUDE_VERSION",
    "DEFAULT_CLAUDE",
    "HOOK_EVENTS",
    "Capture",
    "HookAnswer",
    "HookCapture",
    "Interactive",
    "Tmux",
    "claude_binary",
    "claude_env",
    "hook_settings",
    "interactive",
    "prepare_home",
    "require_claude",
    "run_print",
]

CLAUDE_VERSION = "2.1.332"
DEFAULT_CLAUDE = (
    Path.home() / f".cache/codex-presence/claude-code-{CLAUDE_VERSION}/node_modules/.bin/claude"
)
API_KEY = "sk-test"

HOOK_EVENTS = (
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "PermissionRequest",
    "PermissionDenied",
    "Notification",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "Elicitation",
    "ElicitationResult",
    "SessionEnd",
)
"""The events captured. SessionStart and Setup are missing on purpose: Claude Code skips
HTTP hooks for them ("HTTP hooks are not supported for SessionStart")."""

Message = dict[str, Any]


def claude_binary() -> Path:
    """The claude binary the tests use (``CODEX_PRESENCE_TEST_CLAUDE`` or the default)."""
    return Path(os.environ.get("CODEX_PRESENCE_TEST_CLAUDE") or DEFAULT_CLAUDE)


def require_claude() -> Path:
    """The claude binary, or the end of the test: a failure under ``CI=true`` (a missing
    binary there is a broken setup, never a reason to pass), a skip elsewhere. tmux, which
    the interactive tests need, is checked the same way."""
    import pytest

    binary = claude_binary()
    problem = None
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        problem = f"claude binary not found at {binary} (set CODEX_PRESENCE_TEST_CLAUDE)"
    elif shutil.which("tmux") is None:
        problem = "tmux not found (Debian package tmux)"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return binary


# -- the recording ---------------------------------------------------------------------------


class Capture:
    """Everything one session showed: hook payloads and transcript entries, in order."""

    def __init__(self, recording: BinaryIO | None) -> None:
        self._recording = recording
        self._lock = threading.Condition()
        self.start = time.monotonic()
        self.entries: list[tuple[float, str, Message]] = []
        """``(t, "hook" | "transcript", message)`` in capture order."""
        self.actions: list[tuple[float, str]] = []
        """``(t, what)`` for what the driver did (keys sent, prompt given)."""
        self._cursor = 0
        self.ended = False
        self.end_at: float | None = None
        """When the session ended (claude's exit), if known before :meth:`end`."""

    def now(self) -> float:
        return time.monotonic() - self.start

    def add(self, source: str, raw: bytes) -> Message | None:
        """Record one JSON document of ``source`` (its bytes are kept as they came)."""
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(msg, dict):
            return None
        raw = raw.strip()
        if b"\n" in raw:
            raw = orjson.dumps(msg)
        with self._lock:
            t = self.now()
            self.entries.append((t, source, msg))
            if self._recording is not None:
                head = b'{"t":%.6f,"from":"%s","msg":' % (t, source.encode())
                self._recording.write(head + raw + b"}\n")
                self._recording.flush()
            self._lock.notify_all()
        return msg

    def act(self, what: str) -> None:
        with self._lock:
            self.actions.append((self.now(), what))

    def end(self) -> None:
        with self._lock:
            if self.ended:
                return
            self.ended = True
            if self._recording is not None:
                t = self.end_at if self.end_at is not None else self.now()
                t = max([t, *(t for t, _, _ in self.entries)])
                self._recording.write(b'{"t":%.6f,"end":"eof"}\n' % t)
                self._recording.flush()
            self._lock.notify_all()

    # -- reading ---------------------------------------------------------------------------

    def hooks(self, event: str | None = None) -> list[Message]:
        with self._lock:
            return [
                m
                for _, s, m in self.entries
                if s == "hook" and (event is None or m.get("hook_event_name") == event)
            ]

    def transcript(self) -> list[Message]:
        with self._lock:
            return [m for _, s, m in self.entries if s == "transcript"]

    def wait(
        self,
        pred: Callable[[str, Message], bool],
        timeout: float = WAIT,
        *,
        what: str = "",
    ) -> tuple[float, Message]:
        """The next entry after the cursor for which ``pred(source, msg)`` holds.

        The cursor moves past the match, so successive waits find successive entries.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                while self._cursor < len(self.entries):
                    t, source, msg = self.entries[self._cursor]
                    self._cursor += 1
                    if pred(source, msg):
                        return t, msg
                left = deadline - time.monotonic()
                if left <= 0 or self.ended:
                    seen = [
                        m.get("hook_event_name") or m.get("type") for _, _, m in self.entries[-12:]
                    ]
                    raise TimeoutError(f"timed out waiting for {what or pred}; last: {seen}")
                self._lock.wait(left)

    def wait_hook(self, event: str, timeout: float = WAIT, **fields: Any) -> Message:
        """The next hook of this event whose payload has these field values."""

        def pred(source: str, msg: Message) -> bool:
            return (
                source == "hook"
                and msg.get("hook_event_name") == event
                and all(msg.get(k) == v for k, v in fields.items())
            )

        return self.wait(pred, timeout, what=f"hook {event} {fields}")[1]

    def wait_transcript(
        self, pred: Callable[[Message], bool], timeout: float = WAIT, *, what: str = ""
    ) -> Message:
        return self.wait(
            lambda s, m: s == "transcript" and pred(m), timeout, what=what or "transcript"
        )[1]

    def mark(self) -> None:
        """Move the cursor to the end: later waits see only what comes after now."""
        with self._lock:
            self._cursor = len(self.entries)


# -- the hook server ---------------------------------------------------------------------------


@dataclass
class HookAnswer:
    """How the capture answers a hook POST: ``status``, ``body``, after ``delay`` seconds."""

    status: int = 200
    body: bytes = b""
    delay: float = 0.0


class _HookHandler(BaseHTTPRequestHandler):
    server: _HookServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path != owner.path:
            owner.refused += 1
            self._answer(HookAnswer(status=404))
            return
        msg = owner.capture.add("hook", raw)
        answer = owner.answer(msg or {}) if callable(owner.answer) else owner.answer
        if msg is not None:
            path = msg.get("transcript_path")
            if isinstance(path, str) and path:
                owner.follow(Path(path))
        if answer.delay:
            time.sleep(answer.delay)
        self._answer(answer)

    def _answer(self, answer: HookAnswer) -> None:
        with suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(answer.status)
            if answer.body:
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)


class _HookServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: HookCapture


class HookCapture:
    """A loopback hook server that records every POST, and follows the transcript."""

    def __init__(
        self,
        capture: Capture,
        answer: HookAnswer | Callable[[Message], HookAnswer] | None = None,
        *,
        poll: float = 0.01,
    ) -> None:
        self.capture = capture
        self.answer = answer or HookAnswer()
        self.path = f"/{secrets.token_urlsafe(16)}/hook"
        self.refused = 0
        self.poll = poll
        self._server: _HookServer | None = None
        self._thread: threading.Thread | None = None
        self._follower: threading.Thread | None = None
        self._following: Path | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.path}"

    def start(self) -> None:
        self._server = _HookServer(("127.0.0.1", 0), _HookHandler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="hook-capture", daemon=True
        )
        self._thread.start()

    def follow(self, path: Path) -> None:
        """Follow this transcript from its start (the first path named wins)."""
        if self._following is not None:
            return
        self._following = path
        self._follower = threading.Thread(
            target=self._follow, args=(path,), name="transcript", daemon=True
        )
        self._follower.start()

    def watch_sessions(self, directory: Path) -> None:
        """Record each new content of the session status files (``<pid>.json``) there."""
        self._watcher = threading.Thread(
            target=self._watch, args=(directory,), name="sessions", daemon=True
        )
        self._watcher.start()

    def _watch(self, directory: Path) -> None:
        seen: dict[Path, bytes] = {}
        while True:
            stopping = self._stop.is_set()
            for path in sorted(directory.glob("*.json")):
                with suppress(OSError):
                    data = path.read_bytes()
                    if data and data != seen.get(path):
                        seen[path] = data
                        if self.capture.add("session", data) is None:
                            del seen[path]  # caught mid-write: read it again
            if stopping:
                return
            self._stop.wait(self.poll)

    def _follow(self, path: Path) -> None:
        offset = 0
        pending = b""
        while True:
            stopping = self._stop.is_set()
            with suppress(FileNotFoundError), path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
                offset += len(chunk)
                pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self.capture.add("transcript", line)
            if stopping:
                return
            self._stop.wait(self.poll)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._stop.set()
        for thread in (self._follower, self._watcher):
            if thread is not None:
                thread.join(timeout=5)


def hook_settings(url: str, events: tuple[str, ...] = HOOK_EVENTS, **hook: Any) -> Message:
    """A settings document with one HTTP hook per event, all POSTing to ``url``.

    ``hook`` adds keys to each hook (``timeout`` in seconds, say)."""
    return {"hooks": {e: [{"hooks": [{"type": "http", "url": url, **hook}]}] for e in events}}


# -- the private home ------------------------------------------------------------------------


def prepare_home(
    root: Path, *, api_key: str = API_KEY, config: dict[str, Any] | None = None
) -> tuple[Path, Path]:
    """A fresh ``root/home`` (HOME and CLAUDE_CONFIG_DIR) and ``root/work`` (the cwd).

    ``home/.claude.json`` marks onboarding done, the API key approved and the work
    directory trusted, so an interactive session asks nothing of its own; ``config`` adds
    keys to it (``messageIdleNotifThresholdMs``, say)."""
    if root.exists():
        shutil.rmtree(root)
    home = root / "home"
    work = root / "work"
    home.mkdir(parents=True)
    work.mkdir()
    config = {
        "hasCompletedOnboarding": True,
        "lastOnboardingVersion": CLAUDE_VERSION,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [api_key[-20:]], "rejected": []},
        "projects": {str(work): {"hasTrustDialogAccepted": True}},
        **(config or {}),
    }
    (home / ".claude.json").write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2))
    return home, work


def claude_env(home: Path, base_url: str, *, api_key: str = API_KEY) -> dict[str, str]:
    """The environment claude runs in: the private home, the fake API, nothing else online."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANTHROPIC_", "CLAUDE", "TMUX"))
        and key.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    env.update(
        HOME=str(home),
        CLAUDE_CONFIG_DIR=str(home),
        ANTHROPIC_BASE_URL=base_url,
        ANTHROPIC_API_KEY=api_key,
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL="1",
    )
    return env


@contextmanager
def _captured(
    root: Path,
    recording: Path | None,
    answer: HookAnswer | Callable[[Message], HookAnswer] | None,
    hook: dict[str, Any],
    events: tuple[str, ...],
    config: dict[str, Any] | None,
) -> Iterator[tuple[Capture, HookCapture, Path, Path, Path]]:
    home, work = prepare_home(root, config=config)
    rec: BinaryIO | None = None
    if recording is not None:
        recording.parent.mkdir(parents=True, exist_ok=True)
        rec = recording.open("wb")
    try:
        capture = Capture(rec)
        server = HookCapture(capture, answer)
        server.start()
        server.watch_sessions(home / "sessions")
        settings = root / "settings.json"
        settings.write_bytes(orjson.dumps(hook_settings(server.url, events, **hook)))
        try:
            yield capture, server, home, work, settings
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
    work: Path
    hook_refused: int = 0


def run_print(
    root: Path,
    prompt: str,
    *,
    base_url: str,
    args: tuple[str, ...] = (),
    recording: Path | None = None,
    answer: HookAnswer | Callable[[Message], HookAnswer] | None = None,
    hook: dict[str, Any] | None = None,
    events: tuple[str, ...] = HOOK_EVENTS,
    timeout: float = 60.0,
    claude: Path | None = None,
    config: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> PrintRun:
    """``claude --settings FILE -p PROMPT ARGS...`` in ``root/work``, to its exit."""
    captured = _captured(root, recording, answer, hook or {}, events, config)
    with captured as (cap, server, home, work, st):
        argv = [str(claude or claude_binary()), "--settings", str(st), "-p", prompt, *args]
        cap.act(f"run -p {prompt!r}")
        started = time.monotonic()
        proc = subprocess.run(
            argv,
            cwd=work,
            env={**claude_env(home, base_url), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        elapsed = time.monotonic() - started
        cap.end_at = cap.now()
        # Let the follower read what was written last before the capture ends.
        time.sleep(3 * server.poll)
        return PrintRun(
            cap, proc.returncode, proc.stdout, proc.stderr, elapsed, work, server.refused
        )


# -- interactive mode (tmux) -------------------------------------------------------------------


class Tmux:
    """One detached tmux session on a private socket, running one command."""

    def __init__(self, socket: Path, *, width: int = 160, height: int = 50) -> None:
        self.socket = socket
        self.status_file = socket.with_name("exit-status")
        self.width = width
        self.height = height
        self.target = "probe"

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=10,
        )

    def start(self, argv: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        # The server started here inherits env; the pane's command gets it from there.
        subprocess.run(
            [
                "tmux",
                "-S",
                str(self.socket),
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                self.target,
                "-x",
                str(self.width),
                "-y",
                str(self.height),
                "-c",
                str(cwd),
                # A shell that keeps the command's exit status (tmux's own pane_dead_status
                # is not always there to read once the pane is gone).
                "sh",
                "-c",
                '"$@"; echo $? > "$0"',
                str(self.status_file),
                *argv,
            ],
            env=env,
            check=True,
            timeout=10,
        )
        # Keep the pane after claude exits, so its last screen and status can be read.
        self._tmux("set-option", "-t", self.target, "remain-on-exit", "on")
        self._tmux("set-option", "-s", "escape-time", "0")

    def screen(self) -> str:
        result = self._tmux("capture-pane", "-p", "-t", self.target, check=False)
        return result.stdout

    def wait_screen(self, pattern: str, timeout: float = WAIT) -> str:
        """The screen, once it matches the regular expression ``pattern``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if regex.search(text):
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"screen never showed {pattern!r}:\n{text}")
            time.sleep(0.05)

    def type(self, text: str) -> None:
        """Type literal text."""
        self._tmux("send-keys", "-t", self.target, "-l", text)

    def keys(self, *keys: str) -> None:
        """Send tmux key names (``Enter``, ``Escape``, ``Down``, ``C-c``…)."""
        self._tmux("send-keys", "-t", self.target, *keys)

    def dead(self) -> bool:
        result = self._tmux("display-message", "-p", "-t", self.target, "#{pane_dead}", check=False)
        return result.stdout.strip() == "1" or result.returncode != 0

    def exit_status(self) -> int | None:
        """The command's exit status, once it has exited (``None`` before)."""
        with suppress(OSError, ValueError):
            return int(self.status_file.read_text().strip())
        return None

    def pane_pid(self) -> int | None:
        result = self._tmux("display-message", "-p", "-t", self.target, "#{pane_pid}", check=False)
        value = result.stdout.strip()
        return int(value) if value.isdigit() else None

    def kill(self) -> None:
        self._tmux("kill-server", check=False)


@dataclass
class Interactive:
    """A running interactive claude: its capture, its screen and keyboard, its work dir."""

    capture: Capture
    tmux: Tmux
    work: Path
    server: HookCapture
    screens: list[tuple[float, str]] = field(default_factory=list)

    def ready(self, timeout: float = WAIT) -> None:
        """Wait for the prompt box (claude shows ``? for shortcuts`` once it takes input)."""
        self.tmux.wait_screen(r"\? for shortcuts|shortcuts", timeout)

    def prompt(self, text: str) -> None:
        """Type a prompt and submit it."""
        self.capture.act(f"type {text!r}")
        self.tmux.type(text)
        # Enter in the same instant as the text can be taken as part of a paste.
        time.sleep(0.2)
        self.capture.act("key Enter")
        self.tmux.keys("Enter")

    def key(self, *keys: str) -> None:
        self.capture.act("key " + " ".join(keys))
        self.tmux.keys(*keys)

    def answer_dialog(self, key: str, pattern: str = r"Do you want to proceed\?") -> None:
        """Press ``key`` at the dialog the screen shows (``pattern``), until it is gone.

        A dialog ignores keys for a moment after it appears (an Enter sent at once is
        lost), so the key goes in after a pause, and again if the dialog stays."""
        self.tmux.wait_screen(pattern)
        for _ in range(5):
            time.sleep(0.8)
            self.key(key)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                if not re.search(pattern, self.tmux.screen()):
                    return
                time.sleep(0.05)
        raise TimeoutError(f"the dialog ({pattern!r}) did not take {key!r}")

    def snap(self) -> str:
        """The screen now (kept in :attr:`screens` for the report)."""
        text = self.tmux.screen()
        self.screens.append((self.capture.now(), text))
        return text

    def wait_exit(self, timeout: float = WAIT) -> int | None:
        deadline = time.monotonic() + timeout
        while not self.tmux.dead():
            if time.monotonic() > deadline:
                raise TimeoutError(f"claude did not exit within {timeout} s:\n{self.tmux.screen()}")
            time.sleep(0.02)
        if self.capture.end_at is None:
            self.capture.end_at = self.capture.now()
        status = self.tmux.exit_status()
        self.capture.act(f"exited {status}")
        return status


@contextmanager
def interactive(
    root: Path,
    *,
    base_url: str,
    args: tuple[str, ...] = ("--permission-mode", "default"),
    recording: Path | None = None,
    answer: HookAnswer | Callable[[Message], HookAnswer] | None = None,
    hook: dict[str, Any] | None = None,
    events: tuple[str, ...] = HOOK_EVENTS,
    claude: Path | None = None,
    width: int = 160,
    height: int = 50,
    config: dict[str, Any] | None = None,
) -> Iterator[Interactive]:
    """Interactive ``claude --settings FILE ARGS...`` in tmux, in ``root/work``.

    On leaving the block claude is ended (if it still runs) with the tmux server, the
    transcript follower reads what is left, and the recording gets its end line."""
    captured = _captured(root, recording, answer, hook or {}, events, config)
    with captured as (cap, server, home, work, st):
        tmux = Tmux(root / "tmux.sock", width=width, height=height)
        argv = [str(claude or claude_binary()), "--settings", str(st), *args]
        cap.act("start claude")
        tmux.start(argv, cwd=work, env=claude_env(home, base_url))
        session = Interactive(cap, tmux, work, server)
        try:
            yield session
        finally:
            pid = tmux.pane_pid()
            if cap.end_at is None:
                cap.end_at = cap.now()
            tmux.kill()
            if pid is not None:
                # claude's own children (a Bash tool still running) die with their group.
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, 9)
            time.sleep(3 * server.poll)
