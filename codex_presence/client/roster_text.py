"""The roster as text: pure renderers of the design's Presence objects, no I/O.

:func:`roster_text` renders the design's agent-facing roster from Presence objects (as
``GET /roster`` returns them; the object itself is :mod:`codex_presence._wire`'s), so that
the CLI, the MCP tool and anything else print the same bytes::

    team acme roster:
    - alice (you) [director] [admin] connected=2
    - builder [engineer] connected=1
    - scout [scout] [operator] offline

Activity stays out of it by default, as the design says; asked for (``roster
--activity``, the MCP tool's ``include_activity``), each working or blocked member's line
ends with the state and how long it has held (from ``activitySince``)::

    - builder [engineer] connected=1 working 3m

and when two or more of the member's sessions are busy, how many are working and blocked::

    - builder [engineer] connected=2 blocked 1m (sessions: 1 working, 1 blocked)

and, apart from the state, the commands or tasks the member's sessions left running
(``background``), and for how long (from ``backgroundSince``), idle members included::

    - builder [engineer] connected=1 (background: 1 command, 4m)

and under the member, one line per agent the broker lists (``agents``: each session's
client, project and state, and while blocked what it waits on, in the words of
:func:`~codex_presence.core.agent_record.waits_words`), when at least one of them said
which client it is (sessions that share nothing are the member's line already)::

    - bob [engineer] connected=2 blocked 1m (sessions: 1 working, 1 blocked)
      - claude in api-server: blocked 1m, approve `make`
      - codex-app-server in web: working 3m

:func:`watch_text` is the human view of ``roster --watch``: the same lines with the
activity after them (a spinner for working, "needs input" for blocked) and how long it has
held, and the background ("idle · 1 background command · 4 min"), with the agents under
it ("  · claude in api-server · [!] approve `make` · 1 min"). Durations are measured
against this machine's clock, as :func:`elapsed_text` writes them.

Whatever text the broker sent is shown escaped (:func:`~codex_presence._wire.printable`):
a name or title holding an escape sequence or a line break shows as what it is, and can
neither forge a roster line nor act on the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from codex_presence._wire import printable, privilege
from codex_presence.core.agent_record import agent_words, described, waits_words

__all__ = [
    "SPINNER",
    "agent_lines",
    "background_text",
    "elapsed_text",
    "roster_line",
    "roster_text",
    "sessions_text",
    "watch_text",
]

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def elapsed_text(seconds: float, *, compact: bool = False) -> str:
    """How long, to the unit that matters: ``45 s``, ``14 min``, ``2 h 5 min``, ``3 d 4 h``
    (``compact``: ``45s``, ``14m``, ``2h5m``, ``3d4h``)."""
    whole = max(0, int(seconds))
    if whole < 60:
        parts = [(whole, "s")]
    elif whole < 3600:
        parts = [(whole // 60, "min")]
    elif whole < 86400:
        parts = [(whole // 3600, "h"), (whole % 3600 // 60, "min")]
    else:
        parts = [(whole // 86400, "d"), (whole % 86400 // 3600, "h")]
    parts = parts[:1] + [(n, unit) for n, unit in parts[1:] if n]
    if compact:
        return "".join(f"{n}{unit[0]}" for n, unit in parts)
    return " ".join(f"{n} {unit}" for n, unit in parts)


def _since_text(p: Mapping[str, Any], now_ms: int | None, *, compact: bool) -> str:
    """How long ``p``'s activity has held, or "" when the broker did not say."""
    since = p.get("activitySince")
    if now_ms is None or isinstance(since, bool) or not isinstance(since, int):
        return ""
    return elapsed_text((now_ms - since) / 1000, compact=compact)


def background_text(p: Mapping[str, Any], now_ms: int | None, *, compact: bool) -> str:
    """``1 command, 4m`` (``compact``) or ``1 background command · 4 min`` from ``p``'s
    ``background`` and ``backgroundSince``, or "" (none, or a broker that does not say)."""
    count = p.get("background")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        return ""
    noun = "command" if count == 1 else "commands"
    since = p.get("backgroundSince")
    held = ""
    if now_ms is not None and isinstance(since, int) and not isinstance(since, bool):
        held = elapsed_text((now_ms - since) / 1000, compact=compact)
    if compact:
        return f"{count} {noun}, {held}" if held else f"{count} {noun}"
    return f"{count} background {noun} · {held}" if held else f"{count} background {noun}"


def sessions_text(p: Mapping[str, Any]) -> str:
    """``2 working, 1 blocked`` from ``p``'s ``sessions`` (two or more busy sessions), or ""
    (one or none, or a broker that does not say)."""
    sessions = p.get("sessions")
    if not isinstance(sessions, Mapping):
        return ""
    counts = []
    for state in ("working", "blocked"):
        n = sessions.get(state)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            counts.append((n, state))
    if sum(n for n, _ in counts) < 2:
        return ""
    return ", ".join(f"{n} {state}" for n, state in counts)


def _agents(p: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``p``'s agents, when at least one of them said what it is (a ``client``): sessions
    that shared nothing (``--share none``, an older runner) add nothing to the member's
    own line and sessions count, so a member with none of the others has no agent lines."""
    agents = p.get("agents")
    if not isinstance(agents, list):
        return []
    listed = [a for a in agents if isinstance(a, Mapping)]
    return listed if any(described(a) for a in listed) else []


def _state_since(agent: Mapping[str, Any], now_ms: int | None, *, compact: bool) -> str:
    since = agent.get("since")
    if now_ms is None or isinstance(since, bool) or not isinstance(since, int):
        return ""
    return elapsed_text((now_ms - since) / 1000, compact=compact)


def agent_lines(
    p: Mapping[str, Any], now_ms: int | None, *, compact: bool, frame: int = 0
) -> list[str]:
    """One line per agent of ``p`` (the roster's ``agents``), to go under its member's:
    ``  - claude in api-server: blocked 1m, approve `make``` (``compact``, the agent-facing
    roster) or ``  · claude in api-server · [!] approve `make` · 1 min`` (the watch view),
    escaped (:func:`~codex_presence._wire.printable`)."""
    lines = []
    for agent in _agents(p):
        state = agent.get("state")
        state = state if state in ("idle", "working", "blocked") else "idle"
        held = _state_since(agent, now_ms, compact=compact)
        waits = waits_words(agent.get("waits")) if state == "blocked" else ""
        if compact:
            said = f"{state} {held}" if held and state != "idle" else state
            said = f"{said}, {waits}" if waits else said
            lines.append(f"  - {printable(agent_words(agent))}: {printable(said)}")
            continue
        if state == "working":
            shown = f"{SPINNER[frame % len(SPINNER)]} working"
        elif state == "blocked":
            shown = f"[!] {waits}"
        else:
            shown = "idle"
        parts = [agent_words(agent), shown]
        if held and state != "idle":
            parts.append(held)
        lines.append("  · " + printable(" · ".join(parts)))
    return lines


def roster_line(
    p: Mapping[str, Any],
    *,
    you: str | None = None,
    activity: bool = False,
    now_ms: int | None = None,
) -> str:
    """One member's line of the agent-facing roster; with ``activity``, a working or
    blocked member's state and how long it has held by ``now_ms`` (unix ms) are added, and
    any member's background."""
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
    state = p.get("activity")
    if activity and state in ("working", "blocked"):
        parts.append(str(state))
        since = _since_text(p, now_ms, compact=True)
        if since:
            parts.append(since)
        sessions = sessions_text(p)
        if sessions:
            parts.append(f"(sessions: {sessions})")
    background = background_text(p, now_ms, compact=True) if activity else ""
    if background:
        parts.append(f"(background: {background})")
    return " ".join(parts)


def roster_text(
    team: str,
    presences: Iterable[Mapping[str, Any]],
    *,
    you: str | None,
    activity: bool = False,
    now_ms: int | None = None,
) -> str:
    """The design's exact agent-facing roster, without a final newline; ``activity`` adds
    each working or blocked member's state and how long it has held by ``now_ms``."""
    lines = [f"team {printable(team)} roster:"]
    for p in presences:
        lines.append(roster_line(p, you=you, activity=activity, now_ms=now_ms))
        if activity:
            lines.extend(agent_lines(p, now_ms, compact=True))
    return "\n".join(lines)


def watch_text(
    team: str,
    presences: Iterable[Mapping[str, Any]],
    *,
    you: str | None,
    frame: int = 0,
    now_ms: int | None = None,
) -> str:
    """The roster with each member's activity: a spinner for working, "needs input" for
    blocked, nothing for idle (the design's web roster, in a terminal), and how long it has
    held by ``now_ms`` (unix ms; None: not said)."""
    lines = [f"team {printable(team)} roster:"]
    for p in presences:
        line = roster_line(p, you=you)
        activity = p.get("activity")
        background = background_text(p, now_ms, compact=False)
        if activity == "working":
            line += f"  {SPINNER[frame % len(SPINNER)]} working"
        elif activity == "blocked":
            line += "  [!] needs input"
        elif background:
            line = f"{line}  idle · {background}"
        if activity in ("working", "blocked"):
            extra = [_since_text(p, now_ms, compact=False), sessions_text(p), background]
            line = " · ".join([line, *filter(None, extra)])
        lines.append(line)
        lines.extend(agent_lines(p, now_ms, compact=False, frame=frame))
    return "\n".join(lines)
