"""Notification receivers on loopback: an HTTP server that records every request, and
answers as the service it stands for would (a JSON webhook's 200, ntfy's JSON, Slack's
``ok``), or fails on purpose::

    with receiver() as hook:
        ... json://127.0.0.1:{hook.port}/hook ...
        eventually(lambda: hook.requests)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

__all__ = ["Received", "Receiver", "receiver"]


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    port: int
    status: int = 200
    answer: bytes = b"{}"
    requests: list[Received] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextmanager
def receiver(*, status: int = 200, answer: bytes = b"{}") -> Iterator[Receiver]:
    """A recording HTTP server on 127.0.0.1; ``status`` and ``answer`` are what it says to
    every request (changeable while it runs)."""
    state = Receiver(port=0, status=status, answer=answer)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            with lock:
                state.requests.append(
                    Received(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
            self.send_response(state.status)
            self.send_header("content-length", str(len(state.answer)))
            self.end_headers()
            self.wfile.write(state.answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
