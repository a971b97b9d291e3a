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

from tests.support.waiting import WAIT

__all__ = ["Received", "Receiver", "receiver", "trickler"]


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
        thread.join(WAIT)


@contextmanager
def trickler(every: float) -> Iterator[Receiver]:
    """A target that reads each request, then answers one byte at a time, a byte every
    ``every`` seconds, for as long as it runs: each read is quick, the answer never ends."""
    import socket

    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    taken = Receiver(port=listener.getsockname()[1])

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            taken.requests.append(Received("POST", "", {}, b""))
            for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 999999\r\n\r\n" + b"x" * 999999:
                if stop.wait(every):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield taken
    finally:
        stop.set()
        server.join(WAIT)
        listener.close()
