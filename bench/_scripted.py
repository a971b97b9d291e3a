"""What the fake model servers share: a script of answers, each request taken by the first
answer that matches it, every request recorded; and a stdlib ``ThreadingHTTPServer`` on a
free loopback port, in a daemon thread, that streams an answer as server-sent events.

Two servers build on it: :class:`~bench._fake_model.FakeModel` (OpenAI's Responses API, for
codex) and ``bench/_fake_anthropic.py``'s ``FakeAnthropic`` (Anthropic's Messages
API, for claude). Each keeps only its wire format: the routes, the events of an answer, the
error bodies. A thread per connection lets a slow answer hold one stream while another
request is answered; the agents open a few connections at most.

Standard library and orjson only: the benchmarks run it without the test dependencies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

import orjson

__all__ = ["Body", "ScriptedHandler", "ScriptedServer"]

Body = dict[str, Any]
"""A request's JSON body (``{"unparsed": text}`` when it was not a JSON object)."""


class _Answer(Protocol):
    @property
    def match(self) -> str | Callable[[Body], bool] | None: ...

    @property
    def note(self) -> str: ...


AnswerT = TypeVar("AnswerT", bound=_Answer)


class ScriptedServer(Generic[AnswerT]):
    """The script and its server. A subclass names its :attr:`handler`, its
    :attr:`thread_name` and what a request no answer matches gets
    (:meth:`unscripted_answer`)."""

    handler: ClassVar[type[ScriptedHandler]]
    thread_name: ClassVar[str] = "fake-server"

    def __init__(self, script: list[AnswerT] | None = None) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._script: list[AnswerT] = list(script or [])
        self.requests: list[Body] = []
        """Every scripted route's request body, in arrival order."""
        self.taken: list[tuple[int, str]] = []
        """``(request index, answer note)`` for each scripted answer given."""
        self.unscripted = 0
        """Requests that found no answer (answered with :meth:`unscripted_answer`)."""
        self.port = 0
        self.closing = threading.Event()
        """Set when the server stops: a held answer gives up."""

    def unscripted_answer(self) -> AnswerT:
        raise NotImplementedError

    def add(self, *answers: AnswerT) -> None:
        """Append answers to the script (a scenario may script as it goes)."""
        with self._lock:
            self._script.extend(answers)

    @property
    def pending(self) -> int:
        """Answers not yet given."""
        with self._lock:
            return len(self._script)

    def take(self, body: Body) -> AnswerT:
        """The first answer that matches ``body`` (its text contains the answer's ``match``,
        or the predicate holds, or it has none), removed from the script."""
        flat = orjson.dumps(body).decode()
        with self._lock:
            self.requests.append(body)
            self._arrived.notify_all()
            for n, answer in enumerate(self._script):
                match = answer.match
                if match is None or (match(body) if callable(match) else match in flat):
                    self.taken.append((len(self.requests) - 1, answer.note))
                    return self._script.pop(n)
            self.unscripted += 1
        return self.unscripted_answer()

    def wait_requests(self, count: int, timeout: float) -> list[Body]:
        """Block until at least ``count`` requests arrived (or raise TimeoutError)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{self.thread_name} got {len(self.requests)} requests, not {count}"
                    )
                self._arrived.wait(left)
            return list(self.requests)

    @contextmanager
    def serve(self) -> Iterator[Self]:
        """Listen on a free loopback port (:attr:`port`) for the duration of the block;
        on the way out, held answers give up (:attr:`closing`)."""
        self.closing.clear()
        server = _Server(("127.0.0.1", 0), self.handler)
        server.script = self
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, name=self.thread_name, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.closing.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    script: ScriptedServer[Any]


class ScriptedHandler(BaseHTTPRequestHandler):
    """A request of a scripted server: reading its JSON body, answering JSON or a stream."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is not the place for access logs."""

    @property
    def script(self) -> Any:
        """The :class:`ScriptedServer` this request is for (a subclass's, so ``Any``)."""
        return self.server.script

    def hold_then_wait(self, hold: threading.Event | None, wait: float) -> bool:
        """Before a reply's first byte: wait for ``hold`` (if any: the test's word), then
        ``wait`` seconds. False if the server closes meanwhile (no answer: the client sees
        the connection end)."""
        if hold is not None:
            while not hold.wait(0.05):
                if self.script.closing.is_set():
                    self.close_connection = True
                    return False
        if wait:
            time.sleep(wait)
        return True

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    @staticmethod
    def parse(raw: bytes) -> Body:
        """The body as JSON; what is no JSON object is kept as ``{"unparsed": ...}``."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"unparsed": raw.decode("utf-8", "replace")}
        return body if isinstance(body, dict) else {"unparsed": body}

    def send_json(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(
        self, events: Iterable[Body], *, delay: float = 0.0, headers: Body | None = None
    ) -> None:
        """Answer 200 with ``events`` as server-sent events (each ``event: TYPE``),
        ``delay`` seconds apart. No content-length: the body ends when the connection
        closes, so a broken stream is simply a close before the last event. A client that
        gave up meanwhile (an Esc) ends it quietly."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            for name, value in (headers or {}).items():
                self.send_header(name, str(value))
            self.send_header("connection", "close")
            self.end_headers()
            for n, event in enumerate(events):
                if n and delay:
                    time.sleep(delay)
                chunk = b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event))
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
