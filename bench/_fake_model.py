"""A fake OpenAI Responses-API model server on 127.0.0.1, scripted per scenario.

Codex talks to it as its model provider (protocol doc §9): every ``POST …/responses`` is
answered by the next matching :class:`Step` of the script, in order; ``GET …/models``
answers ``{"models":[]}``. Every request body is recorded so that a scenario can read what
codex sent (the MCP tool name in ``tools``, a subagent id in a ``function_call_output``).

The script, the recorded requests and the server are ``bench/_scripted.py``'s (shared with
the tests' fake Anthropic API); this module is the Responses API's wire format.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench._scripted import ScriptedHandler, ScriptedServer

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

    ``events`` are sent as SSE ``data:`` lines (``delay`` seconds apart, after ``hold``
    is set, if given: the test's word, and then ``wait`` seconds); ``status`` other than
    200 sends an error body instead; ``complete=False`` drops the connection before
    ``response.completed`` would have been sent (the events given are sent, then the stream
    just ends). ``match`` picks the step only for a request whose body contains that text
    (or for which that predicate holds), so concurrent threads can each get their own
    answer.
    ``build`` computes the events from the request body at answer time.
    """

    events: list[Event] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    wait: float = 0.0
    hold: threading.Event | None = None
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


class _Handler(ScriptedHandler):
    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, b'{"models":[]}')
        else:
            self.send_json(404, b"{}")

    def do_POST(self) -> None:
        raw = self.read_body()
        if not self.path.rstrip("/").endswith("/responses"):
            self.send_json(404, b"{}")
            return
        body = self.parse(raw)
        step: Step = self.script.take(body)
        if not self.hold_then_wait(step.hold, step.wait):
            return
        if step.status != 200:
            error = {"error": {"message": "scripted failure", "type": "server_error"}}
            self.send_json(step.status, orjson.dumps(error))
            return
        events = step.build(body) if step.build is not None else step.events
        rid = _rid()
        stream = [_created(rid), *events]
        if step.complete:
            stream.append(_completed(rid))
        self.stream(stream, delay=step.delay)


class FakeModel(ScriptedServer[Step]):
    """The scripted model. Use :meth:`serve` to run it; :attr:`base_url` goes in config.toml.
    :attr:`requests` holds every ``/responses`` request body, in arrival order; a request
    no step matches is answered with a plain "ok" message (:attr:`unscripted` counts them)."""

    handler = _Handler
    thread_name = "fake-model"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def unscripted_answer(self) -> Step:
        return message("ok", deltas=0)


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
