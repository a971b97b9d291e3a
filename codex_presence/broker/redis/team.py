"""Whose team the keys in Redis hold: the team's marks, checked by every broker before it
writes anything.

Two deployments may name their teams alike and share a Redis and a prefix by mistake; their
presence would merge. Each broker registers a mark per member in the ``team`` key (a digest
of the team's name, the member's name and their token's digest: it tells nothing more about
the token) and compares, at each (re)connection, its team file with the marks there
(:class:`TeamCheck`, the ``TEAM`` script of :mod:`~codex_presence.broker.redis.scripts`):
not one member in common is another deployment (:class:`AnotherTeam`, an outage saying
so); some in common is a team file changing broker by broker (a warning, once). Used by
:class:`~codex_presence.broker.redis.store.RedisStore`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from codex_presence.broker.redis.link import RedisLink, StateLost
from codex_presence.broker.redis.scripts import TEAM
from codex_presence.broker.team import Team

__all__ = ["AnotherTeam", "TeamCheck", "team_marks"]

logger = logging.getLogger("codex_presence.broker")


class AnotherTeam(StateLost):
    """The team's keys hold another deployment's team (not one member with the same name
    and token): this broker shares nothing with it (an outage, saying so)."""


def team_marks(team: Team) -> dict[str, str]:
    """Each member's mark in Redis's ``team`` key: a digest of the team's name, the
    member's name and their token's digest (which the team file holds; the mark tells
    nothing more about the token)."""
    marks = {}
    for member in team.members:
        seed = b"\0".join((team.name.encode(), member.name.encode(), member.token_digest))
        marks[member.name] = hashlib.blake2b(seed, digest_size=8).hexdigest()
    return marks


class TeamCheck:
    """This broker's team file (``marks``: :func:`team_marks`) against the one the team's
    brokers registered in Redis, through ``link``."""

    def __init__(self, link: RedisLink, marks: Mapping[str, str]) -> None:
        self._link = link
        self.marks = marks
        """This broker's team file's marks (replaced when the file changes)."""
        self._script = link.script(TEAM)
        self._said: tuple[int, int] = (0, 0)
        """The differences (members only here, only there) as last said."""

    async def check(
        self, say_lost: Callable[[list[bytes]], None], *, followed: bool = False
    ) -> None:
        """Compare this broker's team file with the one the team's brokers registered in
        Redis (:func:`team_marks`), before writing anything. Not one member in common: a
        second deployment with the same team name and prefix, whose presence would merge
        into this one's; refused, as an outage that says so (the first deployment goes
        on). Some in common: the team file changed (a rolling change; otherwise the
        brokers disagree on who is in the team): said once, and this file's marks stay.
        ``say_lost`` is told of the keys the script could not read (and replaced).
        ``followed``: this broker, already sharing the keys, follows its team file's change
        (every token rotated at once is no other deployment): its marks are written
        whatever Redis held. Raises :class:`AnotherTeam` (never when ``followed``)."""
        args: list[Any] = ["1" if followed else "0"]
        for name, mark in self.marks.items():
            args.extend((name, mark))
        common, here, there, lost = await self._link.run_script(self._script, args)
        say_lost(lost)
        if there and not common and not followed:
            raise AnotherTeam(
                f"the keys {self._link.key('*')} hold another deployment's team of the same "
                f"name ({there} members, none with a name and token of this team file): "
                "this broker shares nothing with it; give each deployment its own "
                "--redis-prefix (or the same team file)"
            )
        fresh = not common and not there  # the first broker of the team: nothing to compare
        if not fresh and (here or there) and (here, there) != self._said:
            logger.warning(
                "redis: this team file differs from the one the team's brokers registered "
                "(%d members or tokens only here, %d only there): expected while the file "
                "changes broker by broker; otherwise give every broker the same file",
                here,
                there,
            )
        self._said = (here, there)
