"""Running ``codex-presence wrap`` as a subprocess and talking to its child like a client.

Used by the reporting and fault tests: ``WrapProcess`` writes client messages to wrap's
stdin and reads what the child wrote from wrap's stdout (in a thread, so a test never
blocks on it), with wrap's stderr captured for its log lines.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from tests.support.waiting import WAIT, eventually

HERE = Path(__file__).resolve().parent
FAKE_APP_SERVER = [sys.executable, str(HERE.parents[1] / "bench" / "_fake_app_server.py")]


def wrap_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a wrap under test: no CODEX_PRESENCE_* from the host."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    env.update(extra or {})
    return env


class WrapProcess:
    """``codex-presence wrap [options] -- child`` with a client on its stdio."""

    def __init__(
        self,
        options: Sequence[str] = (),
        child: Sequence[str] = tuple(FAKE_APP_SERVER),
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "codex_presence", "wrap", *options, "--", *child],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=wrap_env(env),
        )
        self.messages: queue.Queue[Any] = queue.Queue()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout += line
            try:
                self.messages.put(orjson.loads(line))
            except orjson.JSONDecodeError:
                self.messages.put(line)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr += line

    def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float = WAIT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching message; stderr: {self.stderr.decode()!r}")
            try:
                message = self.messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if predicate(message):
                return message

    def wait_online(self, timeout: float = WAIT) -> None:
        """Until wrap's broker link has subscribed. The link attaches once wrap has loaded,
        after the child started: a turn sent before then is reported only by its outcome
        (idle), and a loaded machine can put that after a turn of a second. (The
        subscription and the reporter start together.)"""
        eventually(
            lambda: b"online: subscribed" in self.stderr,
            timeout,
            "wrap's broker link",
            seen=self.stderr.decode,
        )

    def start_turn(self, request_id: int, **script: Any) -> None:
        self.send(
            {
                "method": "turn/start",
                "id": request_id,
                "params": {"threadId": "th", "input": [], "script": script},
            }
        )

    def close(self, timeout: float = WAIT) -> int:
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code

    def kill(self) -> None:
        self.proc.kill()
        self.close()

    def __enter__(self) -> WrapProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()


def is_request(method: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, dict) and m.get("method") == method and "id" in m


def is_note(method: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, dict) and m.get("method") == method
