"""A fake OpenAI Responses-API model server on 127.0.0.1, scripted per scenario.

Codex talks to it as its model provider (protocol doc §9): every ``POST …/responses`` is
answered by the next matching :class:`Step` of the script, in order; ``GET …/models``
answers ``{"models":[]}``. Every request body is recorded so that a scenario can read what
codex sent (the MCP tool name in ``tools``, a subagent id in a ``function_call_output``).

The stdlib ``ThreadingHTTPServer`` in a daemon thread is enough: codex opens a few
connections at most, and a thread per connection lets a slow step hold one stream while
another thread's request is answered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

__all__ = [
    "FakeModel",
    "Step",
    "broken",
    "fail_500",
    "function_call",
    "message",
    "reply",
    "running",
]

Event = dict[str, Any]


@dataclass
class Step:
    """One scripted answer to ``POST /responses``.

    ``events`` are sent as SSE ``data:`` lines (``delay`` seconds apart, after ``wait``
    seconds); ``status`` other than 200 sends an error body instead; ``complete=False``
    drops the connection before ``response.completed`` would have been sent (the events
    given are sent, then the stream just ends). ``match`` picks the step only for a request
    whose body contains that text (or for which that predicate holds), so concurrent threads
    can each get their own answer.
    ``build`` computes the events from the request body at answer time.
    """

    events: list[Event] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    wait: float = 0.0
    complete: bool = True
    match: str | Callable[[dict[str, Any]], bool] | None = None
    build: Callable[[dict[str, Any]], list[Event]] | None = None
    note: str = ""


_counter = iter(range(1, 1_000_000))


def _rid() -> str:
    return f"resp-{next(_counter)}"


def _created(rid: str) -> Event:
    return {"type": "response.created", "response": {"id": rid}}


def _completed(rid: str) -> Event:
    usage = {
        "input_tokens": 0,
        "input_tokens_details": None,
        "output_tokens": 0,
        "output_tokens_details": None,
        "total_tokens": 0,
    }
    return {"type": "response.completed", "response": {"id": rid, "usage": usage}}


def message_events(text: str, *, deltas: int = 0, item_id: str | None = None) -> list[Event]:
    """An assistant message, streamed in ``deltas`` pieces when ``deltas`` > 0."""
    mid = item_id or f"msg-{next(_counter)}"
    done = {
        "type": "response.output_item.done",
        "item": {
            "type": "message",
            "role": "assistant",
            "id": mid,
            "content": [{"type": "output_text", "text": text}],
        },
    }
    if deltas <= 0:
        return [done]
    added = {
        "type": "response.output_item.added",
        "item": {"type": "message", "role": "assistant", "id": mid, "content": []},
    }
    size = max(1, -(-len(text) // deltas))
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    return [added, *({"type": "response.output_text.delta", "delta": p} for p in pieces), done]


def function_call(
    name: str,
    arguments: dict[str, Any],
    *,
    call_id: str,
    namespace: str | None = None,
) -> Event:
    """A ``function_call`` output item (arguments become the JSON string codex expects)."""
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": orjson.dumps(arguments).decode(),
    }
    if namespace is not None:
        item["namespace"] = namespace
    return {"type": "response.output_item.done", "item": item}


def exec_command(cmd: str, *, call_id: str, escalate: bool = False, **extra: Any) -> Event:
    """The unified-exec shell tool call of codex 0.169.0."""
    args: dict[str, Any] = {"cmd": cmd, "workdir": None, "yield_time_ms": 10000, **extra}
    if escalate:
        args["sandbox_permissions"] = "require_escalated"
        args.setdefault("justification", "the scenario needs an approval")
    return function_call("exec_command", args, call_id=call_id)


def reply(*items: Event | list[Event], **step: Any) -> Step:
    """A complete response made of output items (each an event or a list of events)."""
    events: list[Event] = []
    for item in items:
        events.extend(item if isinstance(item, list) else [item])
    return Step(events=events, **step)


def message(text: str, *, deltas: int = 2, **step: Any) -> Step:
    """A complete response holding one streamed assistant message."""
    return Step(events=message_events(text, deltas=deltas), **step)


def fail_500(**step: Any) -> Step:
    """An HTTP 500 answer (with ``request_max_retries = 0`` the turn fails)."""
    return Step(status=500, **step)


def broken(text: str, **step: Any) -> Step:
    """A stream that starts a message, sends one delta, then closes before completion."""
    events = message_events(text, deltas=2)[:2]
    return Step(events=events, complete=False, **step)


def running(build: Callable[[dict[str, Any]], list[Event]], **step: Any) -> Step:
    """A response whose output items are computed from the request body."""
    return Step(build=build, **step)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is not the place for access logs."""

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, b'{"models":[]}', "application/json")
        else:
            self._send(404, b"{}", "application/json")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/responses"):
            self._send(404, b"{}", "application/json")
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        step = self.server.model.take(body)
        if step.wait:
            time.sleep(step.wait)
        if step.status != 200:
            error = {"error": {"message": "scripted failure", "type": "server_error"}}
            self._send(step.status, orjson.dumps(error), "application/json")
            return
        events = step.build(body) if step.build is not None else step.events
        rid = _rid()
        stream = [_created(rid), *events]
        if step.complete:
            stream.append(_completed(rid))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        # No content-length: the body ends when the connection closes, so a broken stream
        # is simply a close before response.completed.
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for n, event in enumerate(stream):
                if n and step.delay:
                    time.sleep(step.delay)
                chunk = b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event))
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    model: FakeModel


class FakeModel:
    """The scripted model. Use :meth:`serve` to run it; :attr:`base_url` goes in config.toml."""

    def __init__(self, steps: list[Step] | None = None) -> None:
        self._lock = threading.Lock()
        self._steps: list[Step] = list(steps or [])
        self.requests: list[dict[str, Any]] = []
        """Every ``/responses`` request body, in arrival order."""
        self.unscripted = 0
        """Requests that found no step (answered with a plain "ok" message)."""
        self._arrived = threading.Condition(self._lock)
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def add(self, *steps: Step) -> None:
        """Append steps to the script (a scenario may script as it goes)."""
        with self._lock:
            self._steps.extend(steps)

    @property
    def pending(self) -> int:
        """Steps not yet consumed."""
        with self._lock:
            return len(self._steps)

    def take(self, body: dict[str, Any]) -> Step:
        """The first step that matches ``body``, removed from the script."""
        text = orjson.dumps(body).decode()
        with self._lock:
            self.requests.append(body)
            self._arrived.notify_all()
            for n, step in enumerate(self._steps):
                if step.match is None or (
                    step.match(body) if callable(step.match) else step.match in text
                ):
                    return self._steps.pop(n)
            self.unscripted += 1
        return message("ok", deltas=0)

    def wait_requests(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """Block until at least ``count`` requests arrived (or raise TimeoutError)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"model got {len(self.requests)} requests, not {count}")
                self._arrived.wait(left)
            return list(self.requests)

    @contextmanager
    def serve(self) -> Iterator[FakeModel]:
        """Listen on a free loopback port for the duration of the block."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.model = self
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, name="fake-model", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def tool_names(body: dict[str, Any]) -> list[str]:
    """Names of the tools offered in a request (namespaced tools as ``namespace.name``)."""
    names: list[str] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace" or "tools" in tool:
            for sub in tool.get("tools") or []:
                if isinstance(sub, dict) and "name" in sub:
                    names.append(f"{tool.get('name')}.{sub['name']}")
        elif "name" in tool:
            names.append(str(tool["name"]))
    return names


def function_outputs(body: dict[str, Any]) -> dict[str, str]:
    """``call_id → output`` of every ``function_call_output`` in a request's input."""
    found: dict[str, str] = {}
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                output = orjson.dumps(output).decode()
            found[str(item.get("call_id"))] = output
    return found


def user_texts(body: dict[str, Any]) -> list[str]:
    """Texts of the user messages in a request's input (not tool arguments or outputs)."""
    texts: list[str] = []
    for item in body.get("input") or []:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        for part in item.get("content") or []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    return texts
