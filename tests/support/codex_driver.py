"""Runs the real ``codex app-server`` against the fake model and records the session.

The driver is codex's JSON-RPC client: it writes requests and answers server requests on
the child's stdin and reads its stdout on a reader thread. Every line that crosses the
wire, both ways, goes to the recording through :func:`codex_presence.core.recording.encode_entry`
in wire order (client lines when written, server lines when read), with ``t`` measured from
the start of the session. Scenarios wait for messages with timeouts, not fixed sleeps.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from bench._codex_tui import DEFAULT_CODEX, Config, codex_binary, codex_cache
from codex_presence.core.recording import encode_entry
from tests.support.waiting import WAIT

__all__ = [
    "DEFAULT_CODEX",
    "FIXTURES_ROOT",
    "CodexSession",
    "Config",
    "binary_version",
    "codex_binary",
    "codex_cache",
    "codex_versions",
    "fixtures_dir",
    "require_codex",
    "session",
]

FIXTURES_ROOT = Path(__file__).resolve().parents[2] / "fixtures"
"""``fixtures/codex-<version>/`` holds the recordings of one codex version."""

_VERSION_DIR = re.compile(r"codex-(\d+\.\d+\.\d+)")


def codex_versions() -> tuple[str, ...]:
    """Every codex version with a fixture directory (``fixtures/codex-<version>/``), oldest
    first. These are the versions the live tests run against, and ``tests/run.sh``
    installs: a version is tested exactly when it has recordings to be checked against."""
    found = [
        match.group(1)
        for path in FIXTURES_ROOT.iterdir()
        if path.is_dir() and (match := _VERSION_DIR.fullmatch(path.name))
    ]
    return tuple(sorted(found, key=lambda v: tuple(int(n) for n in v.split("."))))


def fixtures_dir(version: str) -> Path:
    """Where the recordings of codex ``version`` live."""
    return FIXTURES_ROOT / f"codex-{version}"


Message = dict[str, Any]
Predicate = Callable[[Message], bool]


def binary_version(binary: Path) -> str:
    """What ``codex --version`` says (``codex-cli 0.171.0`` → ``0.171.0``)."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    match = re.search(r"(\d+\.\d+\.\d+\S*)", out)
    if match is None:
        raise ValueError(f"{binary} --version said {out!r}: no version in it")
    return match.group(1)


def require_codex(version: str | None = None) -> Path:
    """The codex binary (of ``version``, checked with ``--version``), or the end of the
    test: a failure under ``CI=true`` (a missing or wrong binary there is a broken setup,
    never a reason to pass), a skip elsewhere."""
    import pytest

    binary = codex_binary(version)
    problem = None
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        where = "CODEX_PRESENCE_TEST_CODEX_CACHE" if version else "CODEX_PRESENCE_TEST_CODEX"
        problem = f"codex binary not found at {binary} (run tests/run.sh, or set {where})"
    elif version is not None and (found := _checked_version(binary)) != version:
        problem = f"{binary} is codex {found}, not {version}"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    return binary


@functools.cache
def _checked_version(binary: Path) -> str:
    try:
        return binary_version(binary)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"unknown ({exc})"


class CodexSession:
    """One running ``codex app-server`` and its recording."""

    def __init__(self, proc: subprocess.Popen[bytes], recording: BinaryIO, workdir: Path) -> None:
        self.proc = proc
        self.workdir = workdir
        self._recording = recording
        self._start = time.monotonic()
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._inbox: queue.Queue[Message | None] = queue.Queue()
        self.history: list[Message] = []
        """Every server message read so far, in order."""
        self._cursor = 0
        self._responses: dict[Any, Message] = {}
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="codex-stdout", daemon=True)
        self._reader.start()

    # -- wire ------------------------------------------------------------------------------

    def _record(self, direction: str, line: bytes) -> None:
        # Called with the write lock held, so lines of both directions stay in wire order.
        t = time.monotonic() - self._start
        self._recording.write(encode_entry(t, direction, line))  # type: ignore[arg-type]
        self._recording.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._write_lock:
                self._record("server", line)
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(msg, dict):
                self._inbox.put(msg)
        self._inbox.put(None)

    def write(self, msg: Message) -> None:
        """Send one message to codex (and record it)."""
        line = orjson.dumps(msg) + b"\n"
        assert self.proc.stdin is not None
        with self._write_lock:
            self._record("client", line)
            self.proc.stdin.write(line)
            self.proc.stdin.flush()

    def send(self, method: str, params: Message | None = None) -> int:
        """Send a request; return its id (answered later, see :meth:`response`)."""
        rid = self._next_id
        self._next_id += 1
        msg: Message = {"method": method, "id": rid}
        if params is not None:
            msg["params"] = params
        self.write(msg)
        return rid

    def notify(self, method: str, params: Message | None = None) -> None:
        msg: Message = {"method": method}
        if params is not None:
            msg["params"] = params
        self.write(msg)

    def answer(self, request: Message, result: Message) -> None:
        """Answer a server→client request."""
        self.write({"id": request["id"], "result": result})

    # -- waiting ---------------------------------------------------------------------------

    def _pump(self, deadline: float) -> bool:
        """Move one message from the reader into the history; False at EOF or timeout."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            msg = self._inbox.get(timeout=left)
        except queue.Empty:
            return False
        if msg is None:
            self._closed = True
            return False
        self.history.append(msg)
        if "method" not in msg and "id" in msg:
            self._responses[msg["id"]] = msg
        return True

    def response(self, rid: int, timeout: float = WAIT) -> Message:
        """The response to our request ``rid`` (raises on an error response)."""
        deadline = time.monotonic() + timeout
        while rid not in self._responses:
            if self._closed or not self._pump(deadline):
                raise TimeoutError(
                    f"no response to request {rid} within {timeout} s; the last messages:"
                    f" {self.history[-5:]}"
                )
        msg = self._responses[rid]
        if "error" in msg:
            raise RuntimeError(f"request {rid} failed: {msg['error']}")
        result: Message = msg["result"]
        return result

    def request(self, method: str, params: Message | None = None, timeout: float = WAIT) -> Message:
        return self.response(self.send(method, params), timeout)

    def wait_for(self, pred: Predicate, timeout: float = WAIT, *, what: str = "") -> Message:
        """The next server message after the cursor that satisfies ``pred``.

        The cursor moves past the match, so successive waits find successive messages.
        """
        deadline = time.monotonic() + timeout
        while True:
            while self._cursor < len(self.history):
                msg = self.history[self._cursor]
                self._cursor += 1
                if pred(msg):
                    return msg
            if self._closed or not self._pump(deadline):
                raise TimeoutError(
                    f"timed out waiting for {what or pred} ({timeout} s); the last messages:"
                    f" {self.history[-5:]}"
                )

    def wait_method(self, method: str, timeout: float = WAIT, **params: Any) -> Message:
        """The next message with this method whose params contain the given values."""

        def pred(msg: Message) -> bool:
            if msg.get("method") != method:
                return False
            p = msg.get("params") or {}
            return all(p.get(k) == v for k, v in params.items())

        return self.wait_for(pred, timeout, what=f"{method} {params}")

    def wait_item(
        self, event: str, item_type: str, timeout: float = WAIT, **fields: Any
    ) -> Message:
        """The next ``item/<event>`` of an item of this type (and these item fields)."""

        def pred(msg: Message) -> bool:
            if msg.get("method") != f"item/{event}":
                return False
            item = (msg.get("params") or {}).get("item") or {}
            return item.get("type") == item_type and all(
                item.get(k) == v for k, v in fields.items()
            )

        return self.wait_for(pred, timeout, what=f"item/{event} {item_type}")

    def drain(self, quiet: float = 0.3, limit: float = 5.0) -> None:
        """Read until nothing arrives for ``quiet`` seconds (bounded by ``limit``)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if not self._pump(min(deadline, time.monotonic() + quiet)):
                return

    # -- protocol helpers ------------------------------------------------------------------

    def initialize(self) -> Message:
        result = self.request(
            "initialize",
            {
                "clientInfo": {"name": "presence_fixtures", "title": None, "version": "0.0.1"},
                "capabilities": {"experimentalApi": True},
            },
        )
        self.notify("initialized")
        return result

    def start_thread(self, **params: Any) -> str:
        params.setdefault("cwd", str(self.workdir))
        result = self.request("thread/start", params)
        thread_id: str = result["thread"]["id"]
        return thread_id

    def start_turn(self, thread_id: str, text: str, **params: Any) -> int:
        """Send ``turn/start`` (returns the request id; the turn runs on)."""
        return self.send(
            "turn/start",
            {"threadId": thread_id, "input": [{"type": "text", "text": text}], **params},
        )

    def turn_completed(self, thread_id: str, timeout: float = WAIT) -> Message:
        return self.wait_method("turn/completed", timeout, threadId=thread_id)

    def interrupt(self, thread_id: str, turn_id: str) -> int:
        return self.send("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})

    def kill(self) -> None:
        """SIGKILL the app-server (the recording just ends)."""
        self.proc.send_signal(signal.SIGKILL)

    def close(self, timeout: float = 10.0) -> None:
        """Close stdin, let codex exit, and read what it still writes."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(WAIT)
        self._reader.join(timeout)
        if self.proc.stdout is not None and not self._reader.is_alive():
            self.proc.stdout.close()


@contextmanager
def session(
    root: Path,
    *,
    base_url: str,
    config: Config | None = None,
    recording: Path,
    codex: Path | None = None,
) -> Iterator[CodexSession]:
    """Start ``codex app-server`` with ``CODEX_HOME=root/home`` in ``root/work``.

    ``root`` is wiped first, so a fixed root gives host-independent-ish paths.
    """
    if root.exists():
        shutil.rmtree(root)
    home = root / "home"
    work = root / "work"
    home.mkdir(parents=True)
    work.mkdir()
    (home / "config.toml").write_text((config or Config()).toml(base_url))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CODEX_", "OPENAI_", "RUST_"))
    }
    env.update(
        # HOME too: codex runs commands in a login shell, and the host's profile (pyenv
        # rehash, …) must neither slow a scenario down nor be left half-done by a SIGKILL.
        HOME=str(home),
        CODEX_HOME=str(home),
        CODEX_APP_SERVER_MANAGED_CONFIG_PATH=str(home / "managed_config.toml"),
        HTTPS_PROXY="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        http_proxy="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        RUST_LOG="warn",
    )
    binary = codex or codex_binary()
    recording.parent.mkdir(parents=True, exist_ok=True)
    with (
        recording.open("wb") as rec,
        (root / "codex-stderr.log").open("wb") as stderr,
    ):
        proc = subprocess.Popen(
            [str(binary), "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=work,
            env=env,
            start_new_session=True,
        )
        s = CodexSession(proc, rec, work)
        try:
            yield s
        finally:
            s.close()
            # Commands codex left running (an interrupted sleep) belong to its process group.
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
