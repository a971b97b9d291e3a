"""What a Gemini CLI session's transitions mean to a person: the words for their causes (a
hook event's name, the chat file's cancellation), the Gemini CLI line of
:func:`codex_presence.core.wording.event_words`. Pure.
"""

from __future__ import annotations

__all__ = ["gemini_words"]

_GEMINI = {
    "BeforeAgent": "prompt submitted",
    "BeforeTool": "tool started",
    "AfterTool": "tool finished",
    "Notification ToolPermission": "approval requested",
    "AfterAgent": "turn completed",
    "SessionEnd": "session ended",
    "chat Request cancelled.": "cancelled",
}


def gemini_words(cause: str, message: object, previous: str) -> str | None:
    """The event a person knows for a Gemini CLI transition's ``cause``; None: not one of
    gemini's."""
    return _GEMINI.get(cause)
