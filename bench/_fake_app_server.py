"""A scripted stand-in for ``codex app-server``, for load and fault tests where the real
binary would be too heavy (50 at once) or cannot be made to misbehave on cue.

It speaks the 0.169.0 wire format (message shapes from shared/codex-app-server-protocol.md)
on stdio: every ``turn/start`` from the client runs one scripted turn — status active,
``turn/started``, a command item with output deltas, optionally an approval request that
waits for the client's answer, a streamed answer, status idle, ``turn/completed``. It never
decides anything itself; the client (a test or the soak driver) decides through the
``turn/start`` params:

``{"threadId": ..., "input": [...], "script": {"approval": bool, "deltas": int,
"delay_ms": int, "stop_ms": int, "crash": "before_end" | "when_told" | null,
"leave_running": bool, "finish": "when_told" | null}}``

An approval answered ``{"decision": "cancel"}`` interrupts the turn as codex does: the
request is resolved, the waiting flag cleared, and ``stop_ms`` (default 20) later the thread
goes idle and the turn completes ``interrupted``. The approval request carries the
command (``/bin/bash -lc 'make test'``, and ``make test`` as its one action) as codex's
does, and ``thread/start`` announces its thread with the ``cwd`` it was given (else the
process's) and the ``cliVersion`` :data:`VERSION`: what a runner reports of its agent.

``leave_running`` ends the turn (``interrupted``, as an Esc does) with its command still
running: the command's ``item/completed`` comes only once the client sends ``{"method":
"fake/endCommands"}`` (a command that outlives its turn, issue 23's background work).

``crash`` makes the process exit abruptly (status 3) in the middle of the turn: after the
command's output (``before_end``), or once the client sends ``{"method": "fake/crash"}``
after it (``when_told``: a test that must see the turn running first). ``finish:
"when_told"`` keeps the turn running after its command's output until the client sends
``{"method": "fake/finish"}``, so a test decides when the turn ends by order, not by delay.

Run it as ``python bench/_fake_app_server.py``. It lives in ``bench/`` (standard library and orjson
only) so that the soak benchmark runs without the test dependencies; the tests run it too
(``tests/support/wrap_harness.py``).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

VERSION = "0.169.0"
"""The codex version it says it is."""
out = sys.stdout.buffer
inp = sys.stdin.buffer
_next_server_id = 0
_left_running: list[tuple[dict[str, str], dict[str, Any]]] = []
"""Commands whose turn ended while they run (``leave_running``), with their ids."""


def emit(message: dict[str, Any]) -> None:
    out.write(orjson.dumps(message) + b"\n")
    out.flush()


def note(method: str, **params: Any) -> None:
    emit({"method": method, "params": params, "emittedAtMs": int(time.time() * 1000)})


def status(thread: str, kind: str, *flags: str) -> None:
    body: dict[str, Any] = {"type": kind}
    if kind == "active":
        body["activeFlags"] = list(flags)
    note("thread/status/changed", threadId=thread, status=body)


def wait_for_response(request_id: int) -> dict[str, Any]:
    """Read client lines until the answer to our request ``request_id`` arrives: that
    answer."""
    for line in inp:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if (
            isinstance(message, dict)
            and message.get("id") == request_id
            and "method" not in message
        ):
            return message
        if isinstance(message, dict) and "method" in message and "id" in message:
            emit({"id": message["id"], "error": {"code": -32600, "message": "busy in a turn"}})
    sys.exit(0)  # stdin closed while waiting


def wait_for_note(method: bytes) -> None:
    """Read client lines until one names ``method`` (a quoted JSON string)."""
    for line in inp:
        if method in line:
            return
    sys.exit(0)  # stdin closed while waiting


def run_turn(request: dict[str, Any]) -> None:
    global _next_server_id
    params = request.get("params") or {}
    thread = params.get("threadId") or "thread-1"
    script = params.get("script") or {}
    turn = str(uuid.uuid4())
    ids = {"threadId": thread, "turnId": turn}
    delay = script.get("delay_ms", 1) / 1000
    emit({"id": request["id"], "result": {"turn": {"id": turn, "status": "inProgress"}}})
    status(thread, "active")
    note("turn/started", threadId=thread, turn={"id": turn, "status": "inProgress", "items": []})
    command = {
        "type": "commandExecution",
        "id": f"call-{turn[:8]}",
        "status": "inProgress",
        "command": "/bin/bash -lc 'make test'",
    }
    if script.get("approval"):
        status(thread, "active", "waitingOnApproval")
        note("item/started", item=command, **ids)
        request_id = _next_server_id
        _next_server_id += 1
        emit(
            {
                "method": "item/commandExecution/requestApproval",
                "id": request_id,
                "params": {
                    **ids,
                    "itemId": command["id"],
                    "reason": "run the tests",
                    "command": command["command"],
                    "commandActions": [{"type": "unknown", "command": "make test"}],
                },
            }
        )
        answer = wait_for_response(request_id).get("result")
        note("serverRequest/resolved", threadId=thread, requestId=request_id)
        status(thread, "active")
        if isinstance(answer, dict) and answer.get("decision") == "cancel":
            note("item/completed", item={**command, "status": "declined"}, **ids)
            time.sleep(script.get("stop_ms", 20) / 1000)
            status(thread, "idle")
            done = {"id": turn, "status": "interrupted", "items": []}
            note("turn/completed", threadId=thread, turn=done)
            return
    else:
        note("item/started", item=command, **ids)
    for k in range(int(script.get("deltas", 5))):
        time.sleep(delay)
        note("item/commandExecution/outputDelta", **ids, itemId=command["id"], delta=f"line {k}\n")
    if script.get("crash") == "when_told":
        wait_for_note(b'"fake/crash"')
    if script.get("finish") == "when_told":
        wait_for_note(b'"fake/finish"')
    if script.get("crash") in ("before_end", "when_told"):
        os._exit(3)
    if script.get("leave_running"):
        _left_running.append((ids, command))
        status(thread, "idle")
        done = {"id": turn, "status": "interrupted", "items": []}
        note("turn/completed", threadId=thread, turn=done)
        return
    note("item/completed", item={**command, "status": "completed", "exitCode": 0}, **ids)
    message = {"type": "agentMessage", "id": f"msg-{turn[:8]}", "text": ""}
    note("item/started", item=message, **ids)
    for k in range(int(script.get("deltas", 5))):
        note("item/agentMessage/delta", **ids, itemId=message["id"], delta=f"word{k} ")
    note("item/completed", item={**message, "text": "done"}, **ids)
    status(thread, "idle")
    note("turn/completed", threadId=thread, turn={"id": turn, "status": "completed", "items": []})


def main() -> None:
    for line in inp:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        if method == "initialize":
            emit({"id": message.get("id"), "result": {"userAgent": f"fake_app_server/{VERSION}"}})
        elif method == "thread/start":
            thread = str(uuid.uuid4())
            params = message.get("params") or {}
            cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else str(Path.cwd())
            emit({"id": message.get("id"), "result": {"thread": {"id": thread}, "cwd": cwd}})
            started = {"id": thread, "status": {"type": "idle"}, "cwd": cwd, "cliVersion": VERSION}
            note("thread/started", thread=started)
        elif method == "turn/start":
            run_turn(message)
        elif method == "fake/endCommands":
            for ids, command in _left_running:
                done = {**command, "status": "completed", "exitCode": 0}
                note("item/completed", item=done, **ids)
            _left_running.clear()
        elif "id" in message and method is not None:
            emit({"id": message["id"], "result": {}})


if __name__ == "__main__":
    main()
