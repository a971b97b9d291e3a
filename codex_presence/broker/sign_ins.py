"""Sign-ins to the web roster: the record, the store interface, the in-memory store.

A sign-in (a browser session) is a random id (the cookie's value) that maps to a
:class:`SignIn` record for ``ttl`` seconds; each member has at most ``max_sign_ins`` of them
(a new sign-in past the cap ends that member's oldest, never anyone else's).
:class:`MemorySignIns` keeps them in this process (a broker restart signs everyone out);
:class:`~codex_presence.broker.redis.sign_ins.RedisSignIns` keeps them in the Redis that
brokers share (``--redis``), so that a restart signs nobody out and a sign-out on one broker
ends the session on all. :class:`~codex_presence.broker.web.WebRoster` uses either through
:class:`SignInStore`, whose methods are async because the shared one may ask Redis.

:class:`SignIn` is kept a small typed record, stored as JSON by the shared store, so that
a field added to it travels without touching either store.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "MAX_SIGN_INS",
    "SIGN_IN_TTL",
    "MemorySignIns",
    "SignIn",
    "SignInStore",
    "new_sign_in_id",
    "token_mark",
]

SIGN_IN_TTL = 12 * 3600.0
"""Seconds a browser session lasts before signing in again."""
MAX_SIGN_INS = 32
"""Sign-ins per member; a new sign-in past it ends that member's oldest."""


@dataclass(frozen=True, slots=True)
class SignIn:
    """What a session id stands for."""

    member: str
    key: str = ""
    """The key the page keeps and sends with each request: without it the cookie is no
    session (see :mod:`~codex_presence.broker.web`). Empty in a record from before keys:
    such a session counts for nobody."""
    token: str = ""
    """Which token of the member signed in (:func:`token_mark`): a session whose token was
    rotated since counts for nobody, as the token does. Empty in a record from before
    marks: such a session counts for nobody (its member signs in again)."""


def token_mark(token_digest: bytes) -> str:
    """What a session keeps of the token it was signed in with: a hash of the token's
    sha256 (what the team file holds), shortened, so that the session store holds neither
    the token nor the team file's digest."""
    return hashlib.sha256(b"codex-presence sign-in\0" + token_digest).hexdigest()[:32]


def new_sign_in_id() -> str:
    """A fresh session id: 256 random bits, URL-safe (it is a cookie's value)."""
    return secrets.token_urlsafe(32)


class SignInStore(Protocol):
    """Where sign-ins live."""

    ttl: float
    """Seconds a session lasts (the cookie's Max-Age)."""
    on_ended: Callable[[], None] | None
    """Called when sessions ended (signed out, or pushed out by the cap), so that the
    streams they opened are checked at once; the web roster sets it."""

    async def create(self, session: SignIn) -> str:
        """A new session id for ``session``; the member's oldest go past the cap."""

    async def end(self, session_id: str) -> None:
        """Forget a session (sign-out); unknown ids are ignored."""

    async def get(self, session_id: str) -> SignIn | None:
        """The live session of this id, or None (unknown or expired). The shared store
        raises :class:`~codex_presence.broker.store.StoreUnavailable` when it cannot tell."""


class MemorySignIns:
    """The sessions of this process; ``clock`` (monotonic seconds) times them out."""

    def __init__(
        self,
        *,
        ttl: float = SIGN_IN_TTL,
        max_sign_ins: int = MAX_SIGN_INS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.max_sign_ins = max_sign_ins
        self.on_ended: Callable[[], None] | None = None
        self._clock = clock
        # Oldest first, so that the cap drops the session least recently made.
        self._sessions: OrderedDict[str, tuple[SignIn, float]] = OrderedDict()

    async def create(self, session: SignIn) -> str:
        self._expire()
        mine = [sid for sid, (s, _) in self._sessions.items() if s.member == session.member]
        pushed_out = mine[: max(0, len(mine) - self.max_sign_ins + 1)]
        for session_id in pushed_out:
            del self._sessions[session_id]  # the member's oldest: nobody else's
        session_id = new_sign_in_id()
        self._sessions[session_id] = (session, self._clock() + self.ttl)
        if pushed_out:
            self._ended()
        return session_id

    async def end(self, session_id: str) -> None:
        if self._sessions.pop(session_id, None) is not None:
            self._ended()

    async def get(self, session_id: str) -> SignIn | None:
        entry = self._sessions.get(session_id)
        if entry is None:
            return None
        session, expires = entry
        if expires <= self._clock():
            del self._sessions[session_id]
            return None
        return session

    def _expire(self) -> None:
        now = self._clock()
        for session_id in [k for k, (_, expires) in self._sessions.items() if expires <= now]:
            del self._sessions[session_id]

    def _ended(self) -> None:
        if self.on_ended is not None:
            self.on_ended()
