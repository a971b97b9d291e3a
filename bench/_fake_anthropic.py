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

The script, the recorded requests and the server are ``bench/_scripted.py``'s (shared with
the fake OpenAI model of codex's tests); this module is the Messages API's wire format.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench._scripted import Body, ScriptedHandler, ScriptedServer

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

    The stream waits for ``hold`` (if set: the test's word), then ``wait`` seconds, before
    its first byte, then sends its events
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
    hold: threading.Event | None = None
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


_NOT_FOUND = b'{"type":"error","error":{"type":"not_found_error","message":"no"}}'


class _Handler(ScriptedHandler):
    def do_GET(self) -> None:
        self.script.note_other("GET", self.path)
        self.send_json(404, _NOT_FOUND)

    def do_HEAD(self) -> None:
        self.script.note_other("HEAD", self.path)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        raw = self.read_body()
        if self.path.split("?", 1)[0].rstrip("/") != "/v1/messages":
            self.script.note_other("POST", self.path)
            self.send_json(404, _NOT_FOUND)
            return
        body = self.parse(raw)
        reply = self.script.take(body)
        if not self.hold_then_wait(reply.hold, reply.wait):
            return
        if reply.status != 200:
            error = {"type": "error", "error": {"type": "api_error", "message": "scripted"}}
            self.send_json(reply.status, orjson.dumps(error))
            return
        model = str(body.get("model") or "claude-fake")
        request_id = {"request-id": f"req_fake{next(_ids):06d}"}
        self.stream(reply.events(model), delay=reply.delay, headers=request_id)


class FakeAnthropic(ScriptedServer[Reply]):
    """The scripted API. Use :meth:`serve`; :attr:`base_url` goes in ``ANTHROPIC_BASE_URL``.
    :attr:`requests` holds every ``/v1/messages`` request body, in arrival order;
    :attr:`other` the ``(method, path)`` of requests to anything else."""

    handler = _Handler
    thread_name = "fake-anthropic"

    def __init__(self, replies: list[Reply] | None = None) -> None:
        super().__init__(replies)
        self.other: list[tuple[str, str]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def unscripted_answer(self) -> Reply:
        return say("ok", match=None)

    def note_other(self, method: str, path: str) -> None:
        with self._lock:
            self.other.append((method, path))


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
