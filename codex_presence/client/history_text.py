"""A member's timeline (``GET /history``) said in a terminal: ``roster --history``.

One line per member, the waits first because they are what a lead asks about::

    - builder: needs input 42 min over 9 waits, longest 11 min; working 3 h 10 min; idle 5 h

The broker's answer is read defensively (a field missing or of the wrong type counts as
nothing), so that another broker's version never makes this raise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from codex_presence._wire import printable
from codex_presence.client.roster_text import elapsed_text

__all__ = ["history_line", "history_text"]

_WORDS = {"working": "working", "idle": "idle", "offline": "offline"}
"""The states after the waits, in this order, as the roster says them."""


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and value >= 0 else 0.0


def history_line(answer: Mapping[str, Any]) -> str:
    """One member's line: the waits (how many, how long, the longest), then the seconds
    spent in each other state, each said only when not zero."""
    name = printable(str(answer.get("member", "?")))
    totals = answer.get("totals")
    totals = totals if isinstance(totals, Mapping) else {}
    waits = answer.get("waits")
    waits = waits if isinstance(waits, Mapping) else {}
    count = waits.get("count")
    count = count if isinstance(count, int) and count >= 0 else 0
    parts = []
    if count:
        noun = "wait" if count == 1 else "waits"
        parts.append(
            f"needs input {elapsed_text(_number(totals.get('blocked')))} over {count} {noun}, "
            f"longest {elapsed_text(_number(waits.get('longest')))}"
        )
    else:
        parts.append("never needed input")
    for state, word in _WORDS.items():
        seconds = _number(totals.get(state))
        if seconds >= 1:
            parts.append(f"{word} {elapsed_text(seconds)}")
    return f"- {name}: " + "; ".join(parts)


def history_text(team: str, answers: Sequence[Mapping[str, Any]], *, hours: float | None) -> str:
    """The whole text: a heading, then one line per member in the order given."""
    span = "kept" if hours is None else f"last {hours:g} h"
    lines = [f"team {printable(team)} history ({span}):"]
    lines += [history_line(answer) for answer in answers]
    return "\n".join(lines)
