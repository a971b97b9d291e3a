"""The Gemini CLI vocabulary that the activity mapping reads (Gemini CLI 0.61.0).

The two sources the mapping is fed (:data:`GeminiSource`), the hook events it needs
(:data:`HOOK_EVENTS`: the ones that open or close something; the others cost the person a
process per event for nothing, see below) and the settings document that registers them
(:func:`hook_settings`, :func:`with_hooks`), the notification that means a person is
asked, the chat file's cancellation line, and the mapping's counters. ``docs/gemini-cli.md`` holds
the measurements behind each of them. Pure data and pure functions.

Gemini CLI runs every command hook synchronously, and names it in its spinner while it
runs: each event registered is a wait and a word on the person's screen. ``AfterModel``
fires once per streamed chunk of every answer and ``BeforeModel``, ``BeforeToolSelection``
and ``PreCompress`` once per model call; none of them opens or closes anything, so they are
not in :data:`HOOK_EVENTS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from codex_presence.core.feeder import JsonSourcesStats

__all__ = [
    "CANCELLED",
    "CAPTURED",
    "HOOK_EVENTS",
    "HOOK_NAME",
    "HOOK_TIMEOUT_MS",
    "PACKAGE",
    "PERMISSION_NOTIFICATION",
    "SOURCES",
    "GeminiSource",
    "GeminiStats",
    "hook_settings",
    "is_cancelled",
    "tool_key",
    "with_hooks",
]

GeminiSource = Literal["event", "chat"]
"""Where a message came from (a recording line's ``from``): a hook's ``event`` (the JSON
gemini wrote to the hook's stdin), or a line of the session's ``chat`` file
(``transcript_path``, JSON lines). Named apart from Claude Code's ``hook`` and
``transcript``: a recording's source says whose it is (:mod:`codex_presence.core.clients`)."""

PACKAGE = "@google/gemini-cli"
"""Gemini CLI's npm package: its ``package.json`` beside the program says the version
(:mod:`codex_presence.agent.installed`)."""

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

HOOK_NAME = "codex-presence"
"""The name of our hooks: gemini's spinner shows it while one runs ("Executing Hook:
codex-presence"), and for 3 s from its start, so it says whose it is."""

HOOK_TIMEOUT_MS = 5000
"""Our hooks' ``timeout`` (milliseconds; gemini's default is 60 000): the poster answers in
tens of milliseconds, and gemini waits for a hook, so a stuck one must not hold the person
a minute. gemini then signals the hook's shell only: a child still holding its stdout holds
the turn too, so the poster must ``exec`` and bound itself, and never exit 2 (which blocks
the event's action: measured, docs/gemini-cli.md)."""

PERMISSION_NOTIFICATION = "ToolPermission"
"""``Notification``'s ``notification_type`` when gemini asks to run a tool ("Allow
execution of [Shell]?"): the one notification type 0.61.0 has."""

CANCELLED = "Request cancelled."
"""The ``content`` of the chat file's ``info`` line that gemini writes at once at an Esc,
and at "No" at an approval; no hook fires for either."""


@dataclass(slots=True)
class GeminiStats(JsonSourcesStats):
    """What the mapping saw and ignored; for debug logs, tests and ``replay``."""

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


def hook_settings(
    command: str,
    *,
    events: Sequence[str] = HOOK_EVENTS,
    name: str = HOOK_NAME,
    timeout_ms: int = HOOK_TIMEOUT_MS,
) -> dict[str, Any]:
    """The ``hooks`` of a settings document: one command hook per event, each running
    ``command`` (the event comes on its stdin; its stdout must be JSON or nothing)."""
    hook = {"name": name, "type": "command", "command": command, "timeout": timeout_ms}
    return {"hooks": {event: [{"matcher": "*", "hooks": [dict(hook)]}] for event in events}}


def with_hooks(settings: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (a user's document) with the hooks of ``ours`` (:func:`hook_settings`)
    added after its own for each event, as gemini concatenates the hooks of its settings
    files; nothing of the user's is changed or dropped. A ``hooks`` that is no object, or an
    event's list that is no list, is kept as it is and ours go beside nothing there: gemini
    skips what it cannot read, and so must we, without losing it."""
    merged = dict(settings)
    theirs = settings.get("hooks")
    if theirs is not None and not isinstance(theirs, Mapping):
        return merged
    hooks: dict[str, Any] = dict(theirs or {})
    for event, definitions in (ours.get("hooks") or {}).items():
        existing = hooks.get(event)
        if existing is None:
            hooks[event] = list(definitions)
        elif isinstance(existing, list):
            hooks[event] = [*existing, *definitions]
    merged["hooks"] = hooks
    return merged
