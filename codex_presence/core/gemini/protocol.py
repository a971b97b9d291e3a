"""The Gemini CLI vocabulary that the activity mapping reads (Gemini CLI 0.61.0).

The two sources the mapping is fed (:data:`GeminiSource`), the hook events it needs
(:data:`HOOK_EVENTS`: the ones that open or close something; the others cost the person a
process per event for nothing, see below), the notification that means a person is asked,
the chat file's cancellation line, and the mapping's counters. ``docs/gemini-cli.md`` holds
the measurements behind each of them. Pure data and pure functions.

Gemini CLI runs every command hook synchronously, and names it in its spinner while it
runs: each event registered is a wait and a word on the person's screen. ``AfterModel``
fires once per streamed chunk of every answer and ``BeforeModel``, ``BeforeToolSelection``
and ``PreCompress`` once per model call; none of them opens or closes anything, so they are
not in :data:`HOOK_EVENTS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

__all__ = [
    "CANCELLED",
    "CAPTURED",
    "HOOK_EVENTS",
    "PERMISSION_NOTIFICATION",
    "SOURCES",
    "GeminiSource",
    "GeminiStats",
    "is_cancelled",
    "tool_key",
]

GeminiSource = Literal["event", "chat"]
"""Where a message came from (a recording line's ``from``): a hook's ``event`` (the JSON
gemini wrote to the hook's stdin), or a line of the session's ``chat`` file
(``transcript_path``, JSON lines). Named apart from Claude Code's ``hook`` and
``transcript``: a recording's source says whose it is (:mod:`codex_presence.core.clients`)."""

SOURCES: frozenset[str] = frozenset({"event", "chat"})

CAPTURED: dict[str, GeminiSource] = {"hook": "event", "transcript": "chat"}
"""The source of a test driver's capture (it shares Claude Code's capture) as recorded."""

HOOK_EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "Notification",
    "AfterAgent",
    "SessionEnd",
)
"""The events the mapping reads, in the order a turn fires them."""

PERMISSION_NOTIFICATION = "ToolPermission"
"""``Notification``'s ``notification_type`` when gemini asks to run a tool ("Allow
execution of [Shell]?"): the one notification type 0.61.0 has."""

CANCELLED = "Request cancelled."
"""The ``content`` of the chat file's ``info`` line that gemini writes at once at an Esc,
and at "No" at an approval; no hook fires for either."""


@dataclass(slots=True)
class GeminiStats:
    """What the mapping saw and ignored; for debug logs, tests and ``replay``."""

    lines: int = 0
    not_json: int = 0
    hooks: int = 0
    ignored: int = 0
    wrong_shape: int = 0
    late: int = 0
    cancels: int = 0


def is_cancelled(entry: Mapping[str, Any]) -> bool:
    """The chat file's cancellation line: ``{"type": "info", "content": "Request
    cancelled."}``."""
    return entry.get("type") == "info" and entry.get("content") == CANCELLED


def tool_key(msg: Mapping[str, Any]) -> tuple[str, str] | None:
    """What ties a ``BeforeTool`` to its ``AfterTool``: 0.61.0 gives a tool call no id in
    either, so it is the tool's name with its input (as canonical JSON). None when the
    name is missing or not a string."""
    name = msg.get("tool_name")
    if not isinstance(name, str) or not name:
        return None
    try:
        given = orjson.dumps(msg.get("tool_input"), option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # not JSON-able: cannot come from a parsed message, but no crash
        given = repr(msg.get("tool_input"))
    return name, given
