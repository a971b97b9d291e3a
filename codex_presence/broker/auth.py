"""Who an HTTP request is: the member of its bearer token, or of another
:data:`Authenticator` (the web roster's sign-in cookie), asked in turn.

Authentication is HTTP's: the broker's rules (:mod:`~.state`) take members, never
requests. :class:`Authentication` is made once per app (:func:`~.app.create_app`) and
asked by every route; the bearer header comes first. Authenticators are async, because a
browser sign-in may live in the shared store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request

from codex_presence.broker.team import Member, Team

__all__ = ["Authentication", "Authenticator", "bearer_token"]

Authenticator = Callable[[Request], Awaitable["Member | None"]]
"""Maps a request to the member it is authenticated as, or None; may raise
:class:`~codex_presence.broker.store.StoreUnavailable` (503) when it cannot tell."""


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None. Two such
    headers are ambiguous (a proxy added one?): neither counts."""
    headers = request.headers.getlist("authorization")
    if len(headers) != 1 or not headers[0]:
        return None
    scheme, _, token = headers[0].partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class Authentication:
    """The members of ``team`` by their bearer token, then by each of ``authenticators``."""

    def __init__(self, team: Team, authenticators: Sequence[Authenticator] = ()) -> None:
        self._team = team
        self._authenticators = tuple(authenticators)

    def bearer(self, request: Request) -> Member | None:
        """The member whose bearer token this request carries, or None. Reporting
        activity takes this alone: it is a runner's act, never a browser's."""
        token = bearer_token(request)
        return None if token is None else self._team.authenticate(token)

    @property
    def unauthorized_reason(self) -> str:
        if self._authenticators:
            return "missing or wrong bearer token, and no valid browser sign-in"
        return "missing or wrong bearer token"

    async def member(self, request: Request) -> Member | None:
        """The member this request is authenticated as, by any authenticator, or None."""
        member = self.bearer(request)
        if member is not None:
            return member
        for authenticator in self._authenticators:
            member = await authenticator(request)
            if member is not None:
                return member
        return None
