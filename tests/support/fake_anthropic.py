"""A fake Anthropic Messages API on 127.0.0.1, scripted per scenario, for Claude Code.

Claude Code (``ANTHROPIC_BASE_URL`` pointed here) calls only ``POST /v1/messages?beta=true``
with ``"stream": true``. Each such request is answered by the first matching :class:`Reply`
of the script, in order, as a server-sent-event stream of the real event shapes:
``message_start``, ``content_block_start`` / ``content_block_delta`` / ``content_block_stop``
for each text or ``tool_use`` block, ``message_delta`` carrying the ``stop_reason``, and
``message_stop``. A request that no reply matches gets a plain ``"ok"`` text and counts in
:attr:`FakeAnthropic.unscripted`. Every request body is kept in :attr:`FakeAnthropic.requests`
so that a scenario can read what Claude Code sent (a ``tool_result``, the interrupt marker).

Claude Code also sends requests of its own beside the conversation (a session title, say).
By default a reply matches only a *conversation* request, one that offers tools; such a side
request falls through to the unscripted answer and never eats a scripted reply.

The stdlib ``ThreadingHTTPServer`` in a daemon thread is enough, as in ``fake_model.py``: a
thread per connection lets a long reply hold one stream while another is answered.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

__all__ = [
    "Block",
    "FakeAnthropic",
    "Reply",
    "bash",
    "conversation",
    "last_user_texts",
    "say",
    "sse_events",
    "text",
    "tool_results",
    "tool_use",
    "user_texts",
]

Body = dict[str, Any]
Event = dict[str, Any]
Matcher = str | Callable[[Body], bool] | None

_ids = itertools.count(1)


@dataclass(frozen=True)
class Block:
    """One content block of an assistant message: ``text`` or ``tool_use``."""

    type: str
    text: str = ""
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    id: str = ""


def text(value: str) -> Block:
    return Block(type="text", text=value)


def tool_use(name: str, input: dict[str, Any], *, id: str | None = None) -> Block:
    """A ``tool_use`` block (``id`` defaults to a fresh ``toolu_fake…``)."""
    return Block(type="tool_use", name=name, input=input, id=id or f"toolu_fake{next(_ids):06d}")


def bash(command: str, *, id: str | None = None, description: str = "run a command") -> Block:
    """A call of Claude Code's ``Bash`` tool."""
    return tool_use("Bash", {"command": command, "description": description}, id=id)


def conversation(body: Body) -> bool:
    """True for a request of the conversation itself: one that offers tools."""
    return bool(body.get("tools"))


@dataclass
class Reply:
    """One scripted answer to ``POST /v1/messages``.

    The stream waits ``wait`` seconds before its first byte, then sends its events
    ``delay`` seconds apart. ``status`` other than 200 sends an error body instead;
    ``complete=False`` ends the stream before ``message_delta`` (a broken stream).
    ``match`` picks the reply only for a request whose body contains that text or for
    which that predicate holds; the default, :func:`conversation`, skips side requests.
    """

    blocks: list[Block] = field(default_factory=list)
    stop_reason: str | None = None
    status: int = 200
    wait: float = 0.0
    delay: float = 0.0
    complete: bool = True
    match: Matcher = conversation
    note: str = ""

    def events(self, model: str) -> list[Event]:
        reason = self.stop_reason or (
            "tool_use" if any(b.type == "tool_use" for b in self.blocks) else "end_turn"
        )
        return sse_events(self.blocks, model=model, stop_reason=reason, complete=self.complete)


def say(value: str, **reply: Any) -> Reply:
    """A reply of one text block (the turn ends: ``stop_reason`` ``end_turn``)."""
    return Reply(blocks=[text(value)], **reply)


def sse_events(
    blocks: list[Block], *, model: str, stop_reason: str, complete: bool = True
) -> list[Event]:
    """The Messages API stream events for one assistant message made of ``blocks``."""
    usage = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    events: list[Event] = [
        {
            "type": "message_start",
            "message": {
                "id": f"msg_fake{next(_ids):06d}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        }
    ]
    for index, block in enumerate(blocks):
        if block.type == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            half = len(block.text) // 2
            deltas = [
                {"type": "text_delta", "text": piece}
                for piece in (block.text[:half], block.text[half:])
                if piece
            ]
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            raw = orjson.dumps(block.input).decode()
            half = len(raw) // 2
            deltas += [
                {"type": "input_json_delta", "partial_json": raw[:half]},
                {"type": "input_json_delta", "partial_json": raw[half:]},
            ]
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    if not complete:
        return events
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 5},
        }
    )
    events.append({"type": "message_stop"})
    return events


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is not the place for access logs."""

    def do_GET(self) -> None:
        self.server.fake.note_other("GET", self.path)
        self._send(404, b'{"type":"error","error":{"type":"not_found_error","message":"no"}}')

    def do_HEAD(self) -> None:
        self.server.fake.note_other("HEAD", self.path)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/messages":
            self.server.fake.note_other("POST", self.path)
            self._send(404, b'{"type":"error","error":{"type":"not_found_error","message":"no"}}')
            return
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        if not isinstance(body, dict):
            body = {"unparsed": body}
        reply = self.server.fake.take(body)
        if reply.wait:
            time.sleep(reply.wait)
        if reply.status != 200:
            error = {"type": "error", "error": {"type": "api_error", "message": "scripted"}}
            self._send(reply.status, orjson.dumps(error))
            return
        model = str(body.get("model") or "claude-fake")
        self.close_connection = True
        try:  # claude may have given up on the request meanwhile (Esc)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("request-id", f"req_fake{next(_ids):06d}")
            # No content-length: the body ends when the connection closes.
            self.send_header("connection", "close")
            self.end_headers()
            for n, event in enumerate(reply.events(model)):
                if n and reply.delay:
                    time.sleep(reply.delay)
                chunk = b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event))
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeAnthropic


class FakeAnthropic:
    """The scripted API. Use :meth:`serve`; :attr:`base_url` goes in ``ANTHROPIC_BASE_URL``."""

    def __init__(self, replies: list[Reply] | None = None) -> None:
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._replies: list[Reply] = list(replies or [])
        self.requests: list[Body] = []
        """Every ``/v1/messages`` request body, in arrival order."""
        self.taken: list[tuple[int, str]] = []
        """``(request index, reply note)`` for each scripted reply given."""
        self.unscripted = 0
        """Requests that found no reply (answered with a plain ``"ok"``)."""
        self.other: list[tuple[str, str]] = []
        """``(method, path)`` of requests to anything but ``POST /v1/messages``."""
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *replies: Reply) -> None:
        """Append replies to the script (a scenario may script as it goes)."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def note_other(self, method: str, path: str) -> None:
        with self._lock:
            self.other.append((method, path))

    def take(self, body: Body) -> Reply:
        """The first reply that matches ``body``, removed from the script."""
        flat = orjson.dumps(body).decode()
        with self._lock:
            self.requests.append(body)
            self._arrived.notify_all()
            for n, reply in enumerate(self._replies):
                m = reply.match
                if m is None or (m(body) if callable(m) else m in flat):
                    self.taken.append((len(self.requests) - 1, reply.note))
                    return self._replies.pop(n)
            self.unscripted += 1
        return say("ok", match=None)

    def wait_requests(self, count: int, timeout: float) -> list[Body]:
        """Block until at least ``count`` requests arrived (or raise TimeoutError)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the API got {len(self.requests)} requests, not {count}")
                self._arrived.wait(left)
            return list(self.requests)

    @contextmanager
    def serve(self) -> Iterator[FakeAnthropic]:
        """Listen on a free loopback port for the duration of the block."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, name="fake-anthropic", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def _content(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [c for c in content or [] if isinstance(c, dict)]


def _user_messages(body: Body) -> list[dict[str, Any]]:
    """The ``user`` messages of a request (``system`` ones are skipped)."""
    return [
        m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"
    ]


def _texts(message: dict[str, Any]) -> list[str]:
    return [
        c["text"]
        for c in _content(message)
        if c.get("type") == "text"
        and isinstance(c.get("text"), str)
        and not c["text"].lstrip().startswith("<system-reminder>")
    ]


def user_texts(body: Body) -> list[str]:
    """Texts of every user message of a request, ``<system-reminder>`` blocks left out."""
    return [t for m in _user_messages(body) for t in _texts(m)]


def last_user_texts(body: Body) -> list[str]:
    """Texts of the request's last user message (``<system-reminder>`` blocks left out)."""
    users = _user_messages(body)
    return _texts(users[-1]) if users else []


def tool_results(body: Body) -> dict[str, Any]:
    """``tool_use_id → content`` of every ``tool_result`` the request carries."""
    found: dict[str, Any] = {}
    for m in _user_messages(body):
        for c in _content(m):
            if c.get("type") == "tool_result":
                found[str(c.get("tool_use_id"))] = c.get("content")
    return found
