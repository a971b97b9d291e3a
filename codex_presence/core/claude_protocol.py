"""The Claude Code vocabulary that the activity mapping reads (Claude Code 2.1.332).

The three sources the mapping is fed (:data:`ClaudeSource`), the hook events it needs and
the settings document that registers them as HTTP hooks (:func:`hook_settings`), the
notification types and session statuses that mean something, and the transcript's
interrupt marker. ``docs/claude-code-hooks.md`` holds the measurements behind each of
them. Pure data and pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "BLOCKING_NOTIFICATIONS",
    "HOOK_EVENTS",
    "HOOK_TIMEOUT",
    "IDLE_NOTIFICATION",
    "IDLE_STATUSES",
    "INTERRUPT_PREFIX",
    "PERSON_WAITS",
    "RESUME_HINT_FLAGS_ENV",
    "SOURCES",
    "TRANSCRIPT_TYPES",
    "ClaudeSource",
    "hook_settings",
    "is_interrupt_marker",
    "resume_hint_flags",
    "transcript_line_may_matter",
    "with_hooks",
]

ClaudeSource = Literal["hook", "transcript", "session"]
"""Where a message came from: a hook POST, an entry of the session's transcript (JSONL),
or a new content of claude's session status file (``<config dir>/sessions/<pid>.json``)."""

SOURCES: tuple[ClaudeSource, ...] = ("hook", "transcript", "session")

HOOK_EVENTS: tuple[str, ...] = (
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "SessionEnd",
)
"""The hook events the mapping reads, each registered as an HTTP hook. (SessionStart
cannot be one: Claude Code skips HTTP hooks for it, and the state does not need it.)"""

HOOK_TIMEOUT = 2
"""Seconds claude waits for a hook's answer. The server answers at once; this bounds what
a wedged server could cost a turn (claude waits on the answers of its own flow)."""

BLOCKING_NOTIFICATIONS: frozenset[str] = frozenset(
    {"permission_prompt", "agent_needs_input", "elicitation_dialog"}
)
"""``Notification`` types that mean a person must act (the design's list)."""

IDLE_NOTIFICATION = "idle_prompt"
"""claude has sat at its prompt for ``messageIdleNotifThresholdMs`` (60 s by default)."""

IDLE_STATUSES: frozenset[str] = frozenset({"idle", "shell"})
"""Session statuses that say nothing runs: ``shell`` is idle with a background command
still running, which is not the member's work (see the mapping)."""

PERSON_WAITS: frozenset[str] = frozenset(
    {"permission prompt", "input needed", "worker request", "sandbox request"}
)
"""``waitingFor`` values of a ``waiting`` session status that wait on a person. Others
(``dialog open``: a settings dialog the person opened, say) carry no opinion."""

INTERRUPT_PREFIX = "[Request interrupted by user"
"""The text of the user entry claude writes when an interrupt (Esc, Ctrl+C, "No" at a
permission dialog) ends a turn: ``… for tool use]`` or ``…]``."""

TRANSCRIPT_TYPES: frozenset[bytes] = frozenset(
    {b"user", b"assistant", b"system", b"queue-operation"}
)
"""Transcript entry types worth reading and recording: the conversation, its ``system``
markers and the prompt queue. The rest is bookkeeping (``api-request-shape`` holds the
whole system prompt), ~90% of the bytes."""

RESUME_HINT_FLAGS_ENV = "CLAUDE_CODE_RELAUNCH_RESUME_HINT_FLAGS"
"""The variable claude reads (once, then unsets) for the flags of its parting hint
(``claude FLAGS --resume ID``) in place of its own arguments. Without it claude lists its
own arguments, our ``--settings FILE`` first: a path, so the flags are printed only if the
whole line fits the terminal (otherwise none at all), and they would name a file that is
gone. claude takes the value only if parsing it as arguments gives it back unchanged."""

_TYPE_MARKER = re.compile(
    rb'"type"\s*:\s*"(?:%s)"' % b"|".join(re.escape(kind) for kind in sorted(TRANSCRIPT_TYPES))
)


def transcript_line_may_matter(line: bytes) -> bool:
    """A byte-level pre-check: can this transcript line be of a :data:`TRANSCRIPT_TYPES`
    type? (A ``"type": "…"`` with its quotes unescaped is JSON structure, never string
    text.) False lines are skipped unparsed."""
    return _TYPE_MARKER.search(line) is not None


def is_interrupt_marker(entry: Mapping[str, Any]) -> bool:
    """Whether a transcript entry is claude's own interrupt marker: a ``user`` entry whose
    content is one text block starting :data:`INTERRUPT_PREFIX` (a prompt the person typed
    is a plain string, so typing the same words cannot pass for it)."""
    if entry.get("type") != "user" or entry.get("rowSource", "harness") != "harness":
        return False
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or len(content) != 1:
        return False
    block = content[0]
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"].startswith(INTERRUPT_PREFIX)
    )


def resume_hint_flags(args: Sequence[str]) -> str:
    """The value of :data:`RESUME_HINT_FLAGS_ENV` for a claude given ``args`` (its arguments
    as the person typed them, a ``--settings`` of theirs included): the arguments themselves,
    which claude parses and takes only if they come back unchanged, so the hint lists what
    plain claude would list. A prompt at the end (an argument with a space) is left out, as
    claude leaves it out; any other argument with a space, or an empty one, cannot survive
    being joined with spaces: then "" (no flags, which is what claude makes of such a value)."""
    kept = list(args)
    if kept and _has_space(kept[-1]):
        kept.pop()
    if any(not arg or _has_space(arg) for arg in kept):
        return ""
    return " ".join(kept)


def _has_space(arg: str) -> bool:
    return any(char.isspace() for char in arg)


def hook_settings(
    url: str, *, events: tuple[str, ...] = HOOK_EVENTS, timeout: int = HOOK_TIMEOUT
) -> dict[str, Any]:
    """The ``--settings`` document that sends each of ``events`` to ``url`` as an HTTP hook
    (no ``matcher``: every tool matches)."""
    hook = {"type": "http", "url": url, "timeout": timeout}
    return {"hooks": {event: [{"hooks": [hook]}] for event in events}}


def with_hooks(settings: Mapping[str, Any], url: str) -> dict[str, Any]:
    """The user's own settings document (from a ``--settings`` they gave claude) with our
    hooks added after theirs: claude takes one ``--settings``, the last one given."""
    merged = dict(settings)
    theirs = merged.get("hooks")
    hooks = dict(theirs) if isinstance(theirs, dict) else {}
    for event, groups in hook_settings(url)["hooks"].items():
        existing = hooks.get(event)
        hooks[event] = [*(existing if isinstance(existing, list) else []), *groups]
    merged["hooks"] = hooks
    return merged
