"""A fake Gemini API on 127.0.0.1, scripted per scenario, for Gemini CLI.

Gemini CLI (``GOOGLE_GEMINI_BASE_URL`` pointed here, API-key auth) sends the conversation as
``POST /v1beta/models/MODEL:streamGenerateContent?alt=sse``; each such request is answered by
the first matching :class:`Reply` of the script, in order, as server-sent events of the real
shape: ``data: {"candidates": [{"content": {"role": "model", "parts": [...]}, ...}]}`` lines,
the parts of the answer split over two chunks, the last carrying ``finishReason: STOP`` and
the ``usageMetadata``. A part is a text or a ``functionCall`` (:func:`shell` calls gemini's
``run_shell_command``). A request that no reply matches gets a plain ``"ok"`` text and counts
in :attr:`FakeGemini.unscripted`. Every request body is kept in :attr:`FakeGemini.requests`
so that a scenario can read what gemini sent (a ``functionResponse``).

Beside the conversation gemini asks ``:countTokens`` (answered with a count, never
scripted) and, for its own checks, ``:generateContent`` (not streamed): such a side request
is answered by a matching reply whose :attr:`Reply.side` is set, else with ``"ok"`` (or
``{}`` when it asks for JSON); it never eats a reply of the conversation. By default a reply
matches only a conversation request (:func:`conversation`: one that offers tools).

:attr:`Reply.hold` makes a reply wait for the test's word: the stream sends nothing until
that :class:`threading.Event` is set (a turn the test keeps running as long as it likes).

The script, the recorded requests and the server are ``bench/_scripted.py``'s (shared with
the fake models of codex and claude); this module is the Gemini API's wire format.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench._scripted import Body, ScriptedHandler, ScriptedServer

__all__ = [
    "FakeGemini",
    "Part",
    "Reply",
    "call",
    "conversation",
    "function_responses",
    "say",
    "shell",
    "text",
    "user_texts",
]

Chunk = dict[str, Any]
Matcher = str | Callable[[Body], bool] | None

_ids = itertools.count(1)

_USAGE = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


@dataclass(frozen=True)
class Part:
    """One part of the model's answer: a ``text`` or a ``functionCall``."""

    text: str = ""
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        if self.name:
            return {"functionCall": {"name": self.name, "args": self.args}}
        return {"text": self.text}


def text(value: str) -> Part:
    return Part(text=value)


def call(name: str, args: dict[str, Any]) -> Part:
    """A ``functionCall`` of the tool ``name``."""
    return Part(name=name, args=args)


def shell(command: str, *, description: str = "run a command") -> Part:
    """A call of Gemini CLI's ``run_shell_command`` tool."""
    return call("run_shell_command", {"command": command, "description": description})


def conversation(body: Body) -> bool:
    """True for a request of the conversation itself: one that offers tools."""
    return bool(body.get("tools"))


@dataclass
class Reply:
    """One scripted answer.

    The stream waits for :attr:`hold` (if any), then ``wait`` seconds, before its first
    byte, and sends its chunks ``delay`` seconds apart. ``status`` other than 200 sends an
    error body instead; ``complete=False`` ends the stream before the chunk with the
    ``finishReason`` (a broken stream). ``match`` picks the reply only for a request whose
    body contains that text or for which that predicate holds; the default,
    :func:`conversation`, skips side requests. ``side=True`` makes it the answer of a
    non-streamed ``:generateContent`` instead (its texts joined)."""

    parts: list[Part] = field(default_factory=list)
    status: int = 200
    wait: float = 0.0
    delay: float = 0.0
    complete: bool = True
    hold: threading.Event | None = None
    side: bool = False
    match: Matcher = conversation
    note: str = ""

    def chunks(self, model: str) -> list[Chunk]:
        return stream_chunks(self.parts, model=model, complete=self.complete)


def say(value: str, **reply: Any) -> Reply:
    """A reply of one text part (the turn ends)."""
    return Reply(parts=[text(value)], **reply)


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return candidate


def stream_chunks(parts: list[Part], *, model: str, complete: bool = True) -> list[Chunk]:
    """The streamed chunks of one answer made of ``parts``: the first half of a text in one
    chunk, the rest with the function calls in the next, then the finish."""
    response_id = f"fake{next(_ids):06d}"
    wire: list[list[dict[str, Any]]] = [[], []]
    for part in parts:
        if part.name:
            wire[1].append(part.wire())
        else:
            half = len(part.text) // 2
            if part.text[:half]:
                wire[0].append({"text": part.text[:half]})
            wire[1].append({"text": part.text[half:]})
    chunks: list[Chunk] = []
    pieces = [p for p in wire if p]
    for n, piece in enumerate(pieces):
        last = n == len(pieces) - 1
        chunk: Chunk = {
            "candidates": [_candidate(piece, "STOP" if last and complete else None)],
            "modelVersion": model,
            "responseId": response_id,
        }
        if last and complete:
            chunk["usageMetadata"] = _USAGE
        chunks.append(chunk)
        if last and not complete:
            break
    if not chunks and complete:
        chunks.append(
            {
                "candidates": [_candidate([{"text": ""}], "STOP")],
                "usageMetadata": _USAGE,
                "modelVersion": model,
                "responseId": response_id,
            }
        )
    return chunks


def _error(status: int, message: str) -> bytes:
    names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}
    return orjson.dumps(
        {"error": {"code": status, "message": message, "status": names.get(status, "INTERNAL")}}
    )


class _Handler(ScriptedHandler):
    def handle(self) -> None:
        """Quiet when gemini resets a kept-alive connection as it exits (node does): that
        is no error of the script's, and the traceback only fills the test output."""
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            self.close_connection = True

    def do_GET(self) -> None:
        self.script.note_other("GET", self.path)
        self.send_json(404, _error(404, "no such route"))

    def do_POST(self) -> None:
        raw = self.read_body()
        route = self.path.split("?", 1)[0]
        model, _, method = route.rpartition("/")[2].partition(":")
        if not route.startswith("/v1beta/models/") or not method:
            self.script.note_other("POST", self.path)
            self.send_json(404, _error(404, "no such route"))
            return
        if method == "countTokens":
            self.script.note_other("POST", self.path)
            self.send_json(200, b'{"totalTokens": 10}')
            return
        body = self.parse(raw)
        if method == "generateContent":
            self._side(body, model)
            return
        if method != "streamGenerateContent":
            self.script.note_other("POST", self.path)
            self.send_json(404, _error(404, f"no method {method}"))
            return
        reply: Reply = self.script.take(body)
        if not self.hold_then_wait(reply.hold, reply.wait):
            return
        if reply.status != 200:
            self.send_json(reply.status, _error(reply.status, "scripted"))
            return
        self._stream(reply.chunks(model), delay=reply.delay)

    def _side(self, body: Body, model: str) -> None:
        reply: Reply = self.script.take_side(body)
        if not self.hold_then_wait(reply.hold, reply.wait):
            return
        if reply.status != 200:
            self.send_json(reply.status, _error(reply.status, "scripted"))
            return
        said = "".join(p.text for p in reply.parts)
        config = body.get("generationConfig")
        if not reply.parts:
            wants_json = isinstance(config, dict) and config.get("responseMimeType")
            said = "{}" if wants_json else "ok"
        answer = {
            "candidates": [_candidate([{"text": said}], "STOP")],
            "usageMetadata": _USAGE,
            "modelVersion": model,
        }
        self.send_json(200, orjson.dumps(answer))

    def _stream(self, chunks: list[Chunk], *, delay: float) -> None:
        """Answer 200 with ``chunks`` as ``data:`` lines (Gemini names no event), ``delay``
        seconds apart; a client that gave up meanwhile (an Esc) ends it quietly."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            for n, chunk in enumerate(chunks):
                if n and delay:
                    time.sleep(delay)
                self.wfile.write(b"data: %s\r\n\r\n" % orjson.dumps(chunk))
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


class FakeGemini(ScriptedServer[Reply]):
    """The scripted API. Use :meth:`serve`; :attr:`base_url` goes in
    ``GOOGLE_GEMINI_BASE_URL``. :attr:`requests` holds every streamed request's body, in
    arrival order; :attr:`side_requests` the ``:generateContent`` ones; :attr:`other` the
    ``(method, path)`` of requests to anything else (``:countTokens`` included)."""

    handler = _Handler
    thread_name = "fake-gemini"

    def __init__(self, replies: list[Reply] | None = None) -> None:
        super().__init__([r for r in replies or [] if not r.side])
        self._side_script = [r for r in replies or [] if r.side]
        self.side_requests: list[Body] = []
        self.other: list[tuple[str, str]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def unscripted_answer(self) -> Reply:
        return say("ok", match=None)

    def take_side(self, body: Body) -> Reply:
        flat = orjson.dumps(body).decode()
        with self._lock:
            self.side_requests.append(body)
            for n, reply in enumerate(self._side_script):
                match = reply.match
                if match is None or match is conversation:  # the default: any side request
                    return self._side_script.pop(n)
                if match(body) if callable(match) else match in flat:
                    return self._side_script.pop(n)
        return Reply(side=True, match=None)

    def note_other(self, method: str, path: str) -> None:
        with self._lock:
            self.other.append((method, path))


def _contents(body: Body) -> list[dict[str, Any]]:
    return [c for c in body.get("contents") or [] if isinstance(c, dict)]


def _parts(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]


def user_texts(body: Body) -> list[str]:
    """Texts of every ``user`` content of a request, in order."""
    return [
        p["text"]
        for c in _contents(body)
        if c.get("role") == "user"
        for p in _parts(c)
        if isinstance(p.get("text"), str)
    ]


def function_responses(body: Body) -> dict[str, Any]:
    """``tool name → response`` of every ``functionResponse`` the request carries (the
    last of a name wins)."""
    found: dict[str, Any] = {}
    for c in _contents(body):
        for p in _parts(c):
            response = p.get("functionResponse")
            if isinstance(response, dict):
                found[str(response.get("name"))] = response.get("response")
    return found
