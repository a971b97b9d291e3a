"""What a Claude Code session's transitions mean to a person: the words for their causes
(a hook's name, a transcript marker, a view of claude's session file), the Claude Code line
of :func:`codex_presence.core.wording.event_words`. Pure.
"""

from __future__ import annotations

__all__ = ["claude_words"]

_CLAUDE = {
    "UserPromptSubmit": "prompt submitted",
    "PreToolUse": "tool started",
    "PermissionRequest": "permission requested",
    "PostToolUse": "tool finished",
    "PostToolUseFailure": "tool failed",
    "PostToolBatch": "tools finished",
    "Notification permission_prompt": "permission requested",
    "Notification agent_needs_input": "input requested",
    "Notification elicitation_dialog": "an MCP server asks for input",
    "Notification idle_prompt": "waiting at the prompt",
    "Stop": "turn completed",
    "StopFailure": "turn failed",
    "SubagentStart": "subagent started",
    "SubagentStop": "subagent finished",
    "SessionEnd": "session ended",
    "transcript interrupt": "interrupted",
    "session busy": "claude says busy",
    "session waiting": "claude says it waits on a person",
    "session idle": "claude says idle",
}


def claude_words(cause: str, message: object, previous: str) -> str | None:
    """The event a person knows for a Claude Code transition's ``cause``; None: not one of
    claude's."""
    return _CLAUDE.get(cause)
