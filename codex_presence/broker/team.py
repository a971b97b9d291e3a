"""The team: who may talk to a broker, with which token, in which role.

The model only: :class:`Team`, its :class:`Member` objects and their :class:`Role`, the
tokens (fresh from :mod:`secrets`, held only as their sha256) and the token check
(:meth:`Team.authenticate`). Reading and writing the team file is
:mod:`codex_presence.broker.team_file`'s; the privilege bucket a role's permissions make is
:func:`codex_presence._wire.privilege`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from codex_presence._wire import RoleJson

__all__ = ["Member", "Role", "Team", "TeamError", "hash_token", "new_token"]

_TOKEN_PREFIX = "cp_"


class TeamError(ValueError):
    """A team file or a member spec that cannot be used."""


@dataclass(frozen=True, slots=True)
class Role:
    """A member's role: a title to show and the permissions that make the privilege bucket."""

    title: str
    permissions: tuple[str, ...] = ()

    def to_json(self) -> RoleJson:
        """The design's ``Role`` object."""
        return {"title": self.title, "permissions": list(self.permissions)}


@dataclass(frozen=True, slots=True)
class Member:
    """One member of the team. ``token_digest`` is the raw sha256 of the token."""

    name: str
    role: Role | None
    token_digest: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class Team:
    """A validated team: a name and its members, in file order."""

    name: str
    members: tuple[Member, ...]
    _by_digest: dict[bytes, Member] = field(init=False, repr=False, compare=False)
    _by_name: dict[str, Member] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Member] = {}
        by_digest: dict[bytes, Member] = {}
        for member in self.members:
            if member.name in by_name:
                raise TeamError(f"member {member.name!r} is listed twice")
            if member.token_digest in by_digest:
                raise TeamError(
                    f"members {by_digest[member.token_digest].name!r} and {member.name!r} "
                    "share a token"
                )
            by_name[member.name] = member
            by_digest[member.token_digest] = member
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_by_digest", by_digest)

    def member(self, name: str) -> Member | None:
        return self._by_name.get(name)

    def authenticate(self, token: str) -> Member | None:
        """The member whose token this is, or None.

        The presented token is hashed first and looked up by digest: an attacker who times
        the lookup learns about sha256 outputs, not about any token. The final equality is
        checked with :func:`hmac.compare_digest`, against a dummy when nothing matched, so
        that a miss costs the same as a hit.
        """
        digest = hash_token(token)
        member = self._by_digest.get(digest)
        expected = member.token_digest if member is not None else _DUMMY_DIGEST
        if hmac.compare_digest(digest, expected) and member is not None:
            return member
        return None


_DUMMY_DIGEST = hashlib.sha256(b"codex-presence: no such token").digest()


def hash_token(token: str) -> bytes:
    """The raw sha256 of a token (the file stores its hex form)."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> str:
    """A fresh random token: 256 bits, URL-safe, with a prefix that secret scanners can spot."""
    return _TOKEN_PREFIX + secrets.token_urlsafe(32)
