"""The broker's notification targets as configured: ``[[notify]]`` in the team file, and
``broker --notify URL``.

A target is one URL in apprise's convention (``json://host/path``, ``ntfys://topic``,
``slack://T/B/C``, ``mailtos://...``: one string per service, the ecosystem's own) and what
it wants (a :class:`~codex_presence.core.notify_policy.Rule`)::

    [[notify]]
    url = "ntfys://alice:PASSWORD@ntfy.example.com/agents"
    after = 120                       # seconds blocked before the first notice (default 60)
    members = ["builder", "scout"]    # whose (default: everyone)
    on = ["blocked", "answered"]      # which events (default ["blocked"]; also "lost")
    repeat = 1800                     # a reminder every 30 min while still blocked (0: none)
    name = "ops phone"                # how admins see it (default: the URL, secrets masked)

Unlike the rest of the team file (whose unknown keys are ignored, for the sake of later
versions), a ``[[notify]]`` entry refuses a key it does not know, naming it: a misspelt
``member`` would otherwise announce everyone, and a misspelt ``after`` ping at once.

A target's URL holds secrets (a Slack token, an ntfy password): :class:`Target` never shows
it in its ``repr``, and what the logs and admins see is its :attr:`Target.label`, which the
notifier sets from apprise's own privacy rendering. Its :attr:`Target.id` (a digest of the
URL) names it in the events that brokers sharing Redis claim, the same on each.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from codex_presence.broker.team import Team, TeamError
from codex_presence.broker.team_file import refuse_control_characters
from codex_presence.core.notify_policy import DEFAULT_AFTER, NotifyEvent, Rule

__all__ = ["Target", "command_line_targets", "parse_notify"]

_KEYS = ("url", "after", "members", "on", "repeat", "name")


@dataclass(frozen=True, slots=True)
class Target:
    """One place to notify: its URL (secret), its rule, and what it is called."""

    url: str = field(repr=False)
    rule: Rule
    name: str | None = None
    """The label given in the team file, if any."""
    label: str = ""
    """How it is shown (logs, admins): :attr:`name`, else the URL with its secrets masked."""

    @property
    def id(self) -> str:
        """A digest of the URL: the same on every broker, and says nothing of the URL."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]


def _seconds(raw: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TeamError(f"{where}: {key!r} must be a number of seconds")
    if not (math.isfinite(value) and value >= 0):
        raise TeamError(f"{where}: {key!r} must be a number of seconds >= 0 (got {value!r})")
    return float(value)


def parse_notify(data: Mapping[str, Any], team: Team, *, source: str = "team file") -> list[Target]:
    """The ``[[notify]]`` entries of a team file's parsed TOML (none: an empty list)."""
    raw_entries = data.get("notify", [])
    if not isinstance(raw_entries, list):
        raise TeamError(f"{source}: 'notify' must be an array of tables ([[notify]])")
    names = {m.name for m in team.members}
    targets = []
    for index, raw in enumerate(raw_entries):
        where = f"{source}: notify[{index}]"
        if not isinstance(raw, dict):
            raise TeamError(f"{where} must be a table")
        unknown = [key for key in raw if key not in _KEYS]
        if unknown:
            raise TeamError(
                f"{where}: unknown key {unknown[0]!r} (a [[notify]] entry takes "
                + ", ".join(map(repr, _KEYS))
                + ")"
            )
        url = raw.get("url")
        if not isinstance(url, str) or "://" not in url or url != url.strip():
            raise TeamError(f"{where}: 'url' must be a notification URL such as json://host/path")
        name = raw.get("name")
        if name is not None:
            if not isinstance(name, str) or not name.strip():
                raise TeamError(f"{where}: 'name' must be a non-empty string")
            refuse_control_characters(name, f"{where}: 'name'")
        members = raw.get("members")
        if members is not None:
            if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
                raise TeamError(f"{where}: 'members' must be an array of member names")
            strangers = [m for m in members if m not in names]
            if strangers:
                raise TeamError(f"{where}: 'members' names {strangers[0]!r}, not a team member")
        on = raw.get("on", [NotifyEvent.BLOCKED.value])
        events = {e.value: e for e in NotifyEvent}
        if not isinstance(on, list) or not all(isinstance(e, str) for e in on):
            raise TeamError(f"{where}: 'on' must be an array of event names")
        strange = [e for e in on if e not in events]
        if strange:
            raise TeamError(
                f"{where}: 'on' holds {strange[0]!r}: the events are "
                + ", ".join(map(repr, events))
            )
        rule = Rule(
            after=_seconds(raw, "after", DEFAULT_AFTER, where),
            members=None if members is None else frozenset(members),
            on=frozenset(events[e] for e in on),
            repeat=_seconds(raw, "repeat", 0.0, where),
        )
        targets.append(Target(url=url, rule=rule, name=name))
    return targets


def command_line_targets(urls: Sequence[str], *, after: float) -> list[Target]:
    """``broker --notify URL`` (repeatable) with ``--notify-after``: every member, blocked."""
    return [Target(url=url, rule=Rule(after=after)) for url in urls]
