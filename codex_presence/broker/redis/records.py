"""What crosses from Redis into a broker, read through one bounded reader: the session
record stored under ``s:<session>:<name>``, and every number of a key or an event.

Redis is shared: anyone with write access (an operator by hand, another version, a bug,
a forged ``PUBLISH``) can leave a value no broker writes. A number out of range was the
way around the rule that such a value costs its key alone: a time of ``1e30`` became an
integer past 64 bits in the mirror, and the fan-out's encoder raised, which ended every
broker of the team. So every number read from Redis goes through :func:`number`, which
refuses what no broker writes (not an integer, negative, past its bound: a time past
:data:`TIME_MAX`, a count past :data:`COUNT_MAX`); the reader then drops that key or
that event alone (:class:`Unreadable`, counted by the link) and the team goes on.

A session's record is a JSON object with named keys (self-describing: a field added
later is one more key, which an older reader ignores):
``{"state", "since", "background", "backgroundSince", "agent"}``, the last three left out
when 0 or null (most reports: each key costs every broker a decoding); :func:`record` reads
one (its ``agent`` checked again as the report endpoint checks it: markup and control
characters never reach a page, whoever wrote the key).
"""

from __future__ import annotations

from typing import Any

from codex_presence._wire import (
    ACTIVITY_STATES,
    MAX_BACKGROUND,
    agent_problem,
)
from codex_presence.broker.record import Agent, SessionRecord

__all__ = ["COUNT_MAX", "SEQ_MAX", "TIME_MAX", "TTL_MAX", "Unreadable", "number", "record"]

TIME_MAX = 99_999_999_999_999
"""The largest time (unix ms) a broker writes: 14 digits, what Redis's cjson keeps exact
(year 5138)."""
SEQ_MAX = 99_999_999_999_999
"""The largest change number: past it, cjson would round the numbers (the scripts start
the counter again, as after ``DEL seq``)."""
COUNT_MAX = 1_000_000
"""The largest count of streams a broker writes for one member."""
TTL_MAX = 2**31 - 1
"""The longest TTL (ms) an event may carry."""


class Unreadable(ValueError):
    """A key or an event holding what no broker writes: dropped alone, and counted."""


def number(value: object, most: int, what: str) -> int:
    """``value`` read as an integer from 0 to ``most``: an int (not a bool), or the
    digits Redis returns a stored integer as. Raises :class:`Unreadable` naming ``what``
    for anything else (a float, ``1e30``, twenty digits, a negative)."""
    if type(value) is int and 0 <= value <= most:  # what every event holds: at once
        return value
    if (
        isinstance(value, bytes | str)
        and 0 < len(value) <= 15
        and value.isascii()
        and value.isdigit()
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        shown = repr(value)[:40]
        raise Unreadable(f"{what} is {shown}, which no broker writes (0 to {most})")
    return value


def record(data: object, checked: Agent | None = None) -> SessionRecord:
    """A session's record as stored (decoded JSON), or :class:`Unreadable`. ``checked``:
    an agent object checked already (the one the mirror holds for that session): an
    equal one is taken as it is, not checked again (most events repeat their session's
    agent)."""
    if not isinstance(data, dict):
        raise Unreadable("a session record that is no JSON object")
    state = ACTIVITY_STATES.get(data.get("state"))  # type: ignore[arg-type]
    if state is None:
        raise Unreadable(f"a session record's state is {str(data.get('state'))[:40]!r}")
    get = data.get
    since, background = get("since"), get("background", 0)
    if not (  # what every record a broker wrote holds: read at once (issue 32's cost)
        type(since) is int
        and type(background) is int
        and 0 <= since <= TIME_MAX
        and 0 <= background <= MAX_BACKGROUND
    ):
        since = number(since, TIME_MAX, "a session's since")
        background = number(background, MAX_BACKGROUND, "a background count")
    agent: Any = get("agent")
    if agent is None:
        pass
    elif checked is not None and agent == checked:
        agent = checked
    elif (problem := agent_problem(agent)) is not None:
        raise Unreadable(f"a session record's agent: {problem}")
    return SessionRecord(
        state,  # by position: a record is made for every change a broker hears
        since,
        background,
        number(get("backgroundSince"), TIME_MAX, "a background since") if background else 0,
        agent,
    )
