"""The roster as text: pure renderers of the design's Presence objects, no I/O.

:func:`roster_text` renders the design's agent-facing roster from Presence objects (as
``GET /roster`` returns them; the object itself is :mod:`codex_presence._wire`'s), so that
the CLI, the MCP tool and anything else print the same bytes::

    team acme roster:
    - alice (you) [director] [admin] connected=2
    - builder [engineer] connected=1
    - scout [scout] [operator] offline

:func:`watch_text` is the human view of ``roster --watch``: the same lines with the
activity after them (a spinner for working, "needs input" for blocked).

Whatever text the broker sent is shown escaped (:func:`~codex_presence._wire.printable`):
a name or title holding an escape sequence or a line break shows as what it is, and can
neither forge a roster line nor act on the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from codex_presence._wire import printable, privilege

__all__ = ["SPINNER", "roster_line", "roster_text", "watch_text"]

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def roster_line(p: Mapping[str, Any], *, you: str | None = None) -> str:
    """One member's line of the agent-facing roster."""
    parts = ["-", printable(str(p["name"]))]
    if you is not None and p["name"] == you:
        parts.append("(you)")
    role = p.get("role")
    if role:
        title = role.get("title")
        if title:
            parts.append(f"[{printable(str(title))}]")
        bucket = privilege(role.get("permissions") or ())
        if bucket:
            parts.append(f"[{bucket}]")
    connected = int(p.get("connected") or 0)
    parts.append(f"connected={connected}" if connected > 0 else "offline")
    return " ".join(parts)


def roster_text(team: str, presences: Iterable[Mapping[str, Any]], *, you: str | None) -> str:
    """The design's exact agent-facing roster, without a final newline."""
    lines = [f"team {printable(team)} roster:"]
    lines.extend(roster_line(p, you=you) for p in presences)
    return "\n".join(lines)


def watch_text(
    team: str, presences: Iterable[Mapping[str, Any]], *, you: str | None, frame: int = 0
) -> str:
    """The roster with each member's activity: a spinner for working, "needs input" for
    blocked, nothing for idle (the design's web roster, in a terminal)."""
    lines = [f"team {printable(team)} roster:"]
    for p in presences:
        line = roster_line(p, you=you)
        activity = p.get("activity")
        if activity == "working":
            line += f"  {SPINNER[frame % len(SPINNER)]} working"
        elif activity == "blocked":
            line += "  [!] needs input"
        lines.append(line)
    return "\n".join(lines)
