"""Realistic app-server traffic for the benchmarks: turns made of the 0.169.0 message shapes
of shared/codex-app-server-protocol.md, mostly streaming deltas, as real sessions are."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import orjson

_EMITTED = 1796044232571


def _note(method: str, params: dict[str, object]) -> bytes:
    return orjson.dumps({"method": method, "params": params, "emittedAtMs": _EMITTED})


def turn_lines(thread: str, n: int, *, deltas_per_message: int = 60) -> Iterator[bytes]:
    """The server's lines of turn number ``n`` on ``thread``: reasoning, a command with
    streamed output, an approval, and a streamed answer."""
    turn = f"01a22c94-175d-7952-9347-{n:012d}"
    ids = {"threadId": thread, "turnId": turn}
    yield _note(
        "thread/status/changed",
        {"threadId": thread, "status": {"type": "active", "activeFlags": []}},
    )
    yield _note(
        "turn/started",
        {
            "threadId": thread,
            "turn": {
                "id": turn,
                "rootTurnId": turn,
                "items": [],
                "itemsView": "notLoaded",
                "status": "inProgress",
                "error": None,
                "startedAt": 1796044232,
                "completedAt": None,
                "durationMs": None,
            },
        },
    )
    yield _note(
        "item/started",
        {
            "item": {
                "type": "userMessage",
                "id": f"u{n}",
                "clientId": None,
                "content": [
                    {
                        "type": "text",
                        "text": "run the tests and fix what fails",
                        "text_elements": [],
                    }
                ],
                "startedAtMs": _EMITTED,
                "completedAtMs": None,
            },
            **ids,
            "startedAtMs": _EMITTED,
        },
    )
    yield _note(
        "item/started",
        {
            "item": {
                "type": "reasoning",
                "id": f"rs{n}",
                "summary": [],
                "content": [],
                "startedAtMs": _EMITTED,
                "completedAtMs": None,
            },
            **ids,
            "startedAtMs": _EMITTED,
        },
    )
    for k in range(deltas_per_message // 3):
        yield _note(
            "item/reasoning/summaryTextDelta",
            {
                **ids,
                "itemId": f"rs{n}",
                "delta": f"Considering step {k} of the plan ",
                "summaryIndex": 0,
            },
        )
    yield _note(
        "item/completed",
        {
            "item": {
                "type": "reasoning",
                "id": f"rs{n}",
                "summary": ["..."],
                "content": [],
                "startedAtMs": _EMITTED,
                "completedAtMs": _EMITTED,
            },
            **ids,
            "completedAtMs": _EMITTED,
        },
    )
    command = {
        "type": "commandExecution",
        "id": f"call_{n}",
        "pluginId": None,
        "scriptPath": None,
        "command": "/bin/bash -lc 'pytest -q'",
        "cwd": "/work/project",
        "processId": None,
        "source": "agent",
        "status": "inProgress",
        "commandActions": [{"type": "unknown", "command": "pytest -q"}],
        "aggregatedOutput": None,
        "exitCode": None,
        "durationMs": None,
        "startedAtMs": _EMITTED,
        "completedAtMs": None,
    }
    yield _note(
        "thread/status/changed",
        {"threadId": thread, "status": {"type": "active", "activeFlags": ["waitingOnApproval"]}},
    )
    yield _note("item/started", {"item": command, **ids, "startedAtMs": _EMITTED})
    yield orjson.dumps(
        {
            "method": "item/commandExecution/requestApproval",
            "id": n,
            "params": {
                "kind": "command",
                **ids,
                "itemId": f"call_{n}",
                "startedAtMs": _EMITTED,
                "environmentId": "local",
                "reason": "run tests",
                "command": "/bin/bash -lc 'pytest -q'",
                "cwd": "/work/project",
            },
        }
    )
    yield _note("serverRequest/resolved", {"threadId": thread, "requestId": n})
    yield _note(
        "thread/status/changed",
        {"threadId": thread, "status": {"type": "active", "activeFlags": []}},
    )
    for k in range(deltas_per_message):
        yield _note(
            "item/commandExecution/outputDelta",
            {
                **ids,
                "itemId": f"call_{n}",
                "delta": f"tests/test_module_{k}.py ........................ [{k}%]\n",
            },
        )
    yield _note(
        "item/completed",
        {
            "item": {**command, "status": "completed", "exitCode": 0},
            **ids,
            "contentTokenCount": None,
            "completedAtMs": _EMITTED,
        },
    )
    yield _note(
        "item/started",
        {
            "item": {
                "type": "agentMessage",
                "id": f"msg{n}",
                "text": "",
                "phase": None,
                "startedAtMs": _EMITTED,
                "completedAtMs": None,
            },
            **ids,
            "startedAtMs": _EMITTED,
        },
    )
    for k in range(deltas_per_message):
        yield _note("item/agentMessage/delta", {**ids, "itemId": f"msg{n}", "delta": f"word{k} "})
    yield _note(
        "item/completed",
        {
            "item": {
                "type": "agentMessage",
                "id": f"msg{n}",
                "text": "All tests pass.",
                "phase": None,
                "startedAtMs": _EMITTED,
                "completedAtMs": _EMITTED,
            },
            **ids,
            "contentTokenCount": None,
            "completedAtMs": _EMITTED,
        },
    )
    yield _note(
        "thread/tokenUsage/updated",
        {
            **ids,
            "tokenUsage": {
                "total": {
                    "totalTokens": 15,
                    "inputTokens": 10,
                    "cachedInputTokens": 0,
                    "outputTokens": 5,
                    "reasoningOutputTokens": 0,
                },
                "modelContextWindow": 258400,
            },
        },
    )
    yield _note(
        "account/rateLimits/updated",
        {"rateLimits": {"limitId": "codex", "primary": None, "secondary": None}},
    )
    yield _note("thread/status/changed", {"threadId": thread, "status": {"type": "idle"}})
    yield _note(
        "turn/completed",
        {
            "threadId": thread,
            "turn": {
                "id": turn,
                "rootTurnId": turn,
                "items": [],
                "itemsView": "notLoaded",
                "status": "completed",
                "error": None,
                "startedAt": 1796044232,
                "completedAt": 1796044240,
                "durationMs": 8000,
            },
        },
    )


def server_stream(min_lines: int) -> list[bytes]:
    """At least ``min_lines`` server lines (no newlines), whole turns on two threads."""
    lines: list[bytes] = []
    for n in itertools.count():
        thread = (
            "01a22c94-1743-7cf3-8b22-0496ed4ad6d8"
            if n % 2
            else "01a22c95-8421-74e0-992d-d760cc3d2438"
        )
        lines.extend(turn_lines(thread, n))
        if len(lines) >= min_lines:
            return lines
    raise AssertionError("unreachable")
