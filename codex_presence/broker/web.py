"""The web roster: the page the broker serves at ``/``, and its session-cookie sign-in.

:class:`WebRoster` owns the browser side of the broker. It adds routes to the broker app
(:func:`~.app.create_app`'s ``routes=``) and an :data:`~.state.Authenticator` (the
:class:`~.state.Broker`'s ``authenticators=``) that recognises its session cookie, so that
``/whoami``, ``/roster`` and ``/subscribe`` work for a signed-in browser as they do for a
bearer token (reporting activity is a runner's act and takes the bearer token alone).

A session is two secrets: the cookie, and a key that the page keeps in its origin's
``localStorage`` and sends with every request (the ``x-codex-presence-key`` header; for
``/subscribe``, which ``EventSource`` opens without headers, ``?key=``). Cookies are not
kept apart by port: a page on another port of this host is sent the cookie (and could keep
it), and can plant one of its own — its author's session — so that the victim's page would
show the attacker's roster as the victim's own. Storage is kept apart by origin, port
included: that page can neither read the key nor set one, so neither a stolen nor a planted
cookie is a session. The cookie also counts only on requests from the page's own origin
(``Origin``, ``Sec-Fetch-Site``).

Routes
------
``GET /``
    The live roster page (``static/roster.html``). Its script asks ``/whoami``; signed
    out, it shows the sign-in form, signed in it opens
    ``EventSource('/subscribe?name=me&key=...')``
    and redraws rows from the ``roster``/``presence`` events (the privilege bucket it shows
    comes from the ``roster`` event: the page has no copy of the rule). It shows how long
    each member has been working or waiting (``activitySince``), puts the longest-waiting
    first, counts who needs input in the tab's title, raises a desktop notification when
    someone becomes blocked if the person turned "notify me" on (the permission is asked
    then, never on load), and marks the rows stale, "as of" the moment, while its stream
    is down or the broker says its shared store is (``stale``). To an admin (by the
    ``roster`` event's bucket) it also lists the broker's notification targets from
    ``GET /notify`` (labels, never URLs), refreshed every 30 s; an operator's page never
    asks.
``GET /static/NAME``
    The page's own assets: ``roster.js``, ``roster-words.js``, ``roster-notify.js``,
    ``roster.css``, ``favicon.svg``. No CDN, no external asset of any kind: the page works on an
    air-gapped loopback broker, and the CSP (``default-src 'self'``) forbids anything else.
``POST /session``
    Sign in. Body ``token=<member token>`` (``application/x-www-form-urlencoded``). 200
    ``{"name": member, "key": session key, "brokerStartedAt": ms}`` with a ``Set-Cookie`` on
    success (the page compares ``brokerStartedAt`` with ``/healthz``'s ``startedAt`` when
    its session is gone, to say whether a restart ended it); 401 for a wrong token. The
    cookie is HttpOnly (no script can read it), SameSite=Strict (no other site can make
    the browser send it), Path=/, and Secure when the request came over https. It holds
    a random session id that maps to the member (and the key) in the broker's
    :mod:`session store <codex_presence.broker.sign_ins>`: the token never reaches the
    browser's storage. In memory (the default), a broker restart signs everyone
    out; in the Redis that brokers share (``--redis``), nobody.
``POST /session/logout``
    With the session's key: forget the session and end the streams it opened (on every
    broker sharing the sessions). Always: expire the cookie. 204. (A session that a
    member's 33rd sign-in pushes out ends its streams at once too; one that expires, at
    their next event or keep-alive.)

Both POSTs refuse (403) a request whose ``Origin`` is another site: SameSite already keeps
the cookie off cross-site requests, and the Origin check stops a login-CSRF that would sign
a victim in as the attacker. The Origin must name the ``Host`` the request carries, or the
broker's ``--public-url`` (behind a proxy that rewrites ``Host``); a refusal is logged
with both and with what would have been accepted.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from urllib.parse import parse_qs, urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from codex_presence._wire import SUBSCRIBE_PATH, Refused
from codex_presence.broker.http import read_body
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.sign_ins import (
    MAX_SIGN_INS,
    SIGN_IN_TTL,
    MemorySignIns,
    SignIn,
    SignInStore,
    token_mark,
)
from codex_presence.broker.state import Broker
from codex_presence.broker.team import Member, Team

__all__ = ["COOKIE_NAME", "HIDE_DELAY", "KEY_HEADER", "SIGN_IN_TTL", "SignedIn", "WebRoster"]

logger = logging.getLogger("codex_presence.web")

COOKIE_NAME = "codex_presence_session"
KEY_HEADER = "x-codex-presence-key"
"""The header that carries the session's key (``?key=`` on ``/subscribe``)."""
HIDE_DELAY = 5.0
"""Seconds a hidden tab keeps its stream before letting go (the design's "few seconds")."""

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_SECURITY_HEADERS = {
    "content-security-policy": _CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
_ASSETS = {
    "roster.js": "text/javascript; charset=utf-8",
    "roster-notify.js": "text/javascript; charset=utf-8",
    "roster-words.js": "text/javascript; charset=utf-8",
    "roster.css": "text/css; charset=utf-8",
    "history-strip.js": "text/javascript; charset=utf-8",
    "history-strip.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


def _asset(name: str) -> bytes:
    return resources.files("codex_presence.broker").joinpath("static", name).read_bytes()


def _key_of(request: Request) -> str | None:
    """The session key a request carries: in its header, or on ``/subscribe`` (which
    ``EventSource`` opens without headers) in ``?key=``."""
    key = request.headers.get(KEY_HEADER)
    if key is None and request.url.path == SUBSCRIBE_PATH:
        key = request.query_params.get("key")
    return key


def _origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lowercased, the port left out where it is the
    scheme's default (as a browser's ``Origin`` leaves it out)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _peer(request: Request) -> str:
    """Where a request came from, as ``host:port`` (``[host]:port`` for IPv6)."""
    client = request.client
    if client is None:
        return "an unknown address"
    host = f"[{client.host}]" if ":" in client.host else client.host
    return f"{host}:{client.port}"


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A new browser session: the cookie's value (the session id), the key the page
    keeps, and whose it is."""

    session_id: str
    key: str
    member: Member


def _json(status: int, data: object, headers: dict[str, str] | None = None) -> Response:
    headers = {**_SECURITY_HEADERS, **(headers or {})}
    return Response(orjson.dumps(data), status, headers, "application/json")


class WebRoster:
    """The page, its assets and the cookie sessions, for one broker's team.

    ``hide_delay`` is written into the page (a ``?hideDelay=<ms>`` query parameter
    overrides it, for tests). ``sessions`` is where the sessions live; without it, in
    memory, with ``sign_in_ttl``, ``max_sign_ins`` and ``clock`` (monotonic seconds).
    ``limits`` bound the sign-in form (``max_form`` bytes within ``body_timeout`` s).
    ``secure_cookie`` forces the Secure attribute on or off; by default it follows the
    request's scheme, so that plain-HTTP loopback works and a TLS proxy gets Secure.
    """

    def __init__(
        self,
        *,
        team: Team,
        hide_delay: float = HIDE_DELAY,
        sign_in_ttl: float = SIGN_IN_TTL,
        max_sign_ins: int = MAX_SIGN_INS,
        secure_cookie: bool | None = None,
        limits: BrokerLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        sign_ins: SignInStore | None = None,
        public_url: str | None = None,
    ) -> None:
        self.team = team
        self.public_origin = _origin_of(public_url) if public_url else None
        """The page's origin as operators reach it (``--public-url``): behind a proxy
        that sends its own ``Host`` (nginx's ``$host`` drops the port), the Origin a
        browser sends is this one."""
        self.hide_delay = hide_delay
        self.secure_cookie = secure_cookie
        self.limits = limits if limits is not None else BrokerLimits()
        if sign_ins is None:
            sign_ins = MemorySignIns(ttl=sign_in_ttl, max_sign_ins=max_sign_ins, clock=clock)
        self.sign_ins = sign_ins
        self._broker_started = 0
        page = _asset("roster.html").decode("utf-8")
        delay_ms = str(round(hide_delay * 1000))
        self._page = page.replace("{{HIDE_DELAY_MS}}", delay_ms).encode("utf-8")
        self._assets = {name: _asset(name) for name in _ASSETS}

    # -- sessions ----------------------------------------------------------------------

    async def sign_in(self, token: str) -> SignedIn | None:
        """A new session for the member whose token this is, or None."""
        member = self.team.authenticate(token)
        if member is None:
            return None
        key = secrets.token_urlsafe(32)
        mark = token_mark(member.token_digest)
        session_id = await self.sign_ins.create(SignIn(member.name, key=key, token=mark))
        return SignedIn(session_id, key, member)

    async def sign_out(self, session_id: str, key: str) -> bool:
        """End the session of ``session_id`` if ``key`` is its key; whether it did."""
        if await self.member_of(session_id, key) is None:
            return False
        await self.sign_ins.end(session_id)
        return True

    async def member_of(self, session_id: str, key: str) -> Member | None:
        """The member of the session whose id and key these are, or None (unknown,
        expired, the key of another session, or signed in with a token since rotated)."""
        session = await self.sign_ins.get(session_id)
        if session is None or not session.key:
            return None
        if not hmac.compare_digest(session.key.encode(), key.encode()):
            return None
        member = self.team.member(session.member)
        if member is None:
            return None
        if not hmac.compare_digest(
            session.token.encode(), token_mark(member.token_digest).encode()
        ):
            return None
        return member

    async def authenticate(self, request: Request) -> Member | None:
        """The broker :data:`~.state.Authenticator` for the session: its cookie and its
        key, on requests from the page's own origin only."""
        session_id = request.cookies.get(COOKIE_NAME)
        key = _key_of(request)
        if not session_id or not key or not self._same_origin(request):
            return None
        return await self.member_of(session_id, key)

    # -- HTTP --------------------------------------------------------------------------

    def routes(self, broker: Broker) -> list[BaseRoute]:
        """The routes to pass to ``create_app(routes=...)``, for ``broker`` (whose streams
        a session that ends ends at once)."""
        self.sign_ins.on_ended = broker.recheck_streams
        self._broker_started = broker.started_at
        return [
            Route("/", self._page_route, methods=["GET"]),
            Route("/static/{name}", self._asset_route, methods=["GET"]),
            Route("/session", self._sign_in_route, methods=["POST"]),
            Route("/session/logout", self._sign_out_route, methods=["POST"]),
        ]

    async def _page_route(self, request: Request) -> Response:
        return Response(self._page, 200, _SECURITY_HEADERS, "text/html; charset=utf-8")

    async def _asset_route(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._assets:
            return _json(404, {"error": "no such asset"})
        return Response(self._assets[name], 200, _SECURITY_HEADERS, _ASSETS[name])

    def _cross_site(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:
            return False  # not a browser, or a same-origin GET-ish request: SameSite rules
        host = request.headers.get("host", "")
        if origin == "null":
            return True
        if urlsplit(origin).netloc.lower() == host.lower():
            return False
        return self.public_origin is None or _origin_of(origin) != self.public_origin

    def _refuse_cross_site(self, request: Request, what: str) -> Response:
        """403 for a sign-in (or out) from another origin, logged with what was seen and
        what would have been accepted: behind a proxy, the usual cause is a ``Host`` it
        rewrote (nginx's ``$host`` drops the port) without ``--public-url``."""
        origin = request.headers.get("origin", "")
        host = request.headers.get("host", "")
        accepted = f"an Origin whose host and port are the Host header's ({host!r})"
        if self.public_origin is not None:
            accepted += f", or --public-url's origin ({self.public_origin!r})"
        else:
            accepted += (
                "; behind a proxy, start the broker with --public-url set to the page's address"
            )
        logger.warning(
            "web %s refused (403) from %s: Origin %r, Host %r; accepted: %s",
            what,
            _peer(request),
            origin,
            host,
            accepted,
        )
        return _json(403, {"error": f"cross-site {what} refused"})

    def _same_origin(self, request: Request) -> bool:
        """Whether a request carrying the cookie comes from the page itself. A browser
        says where a request comes from in ``Sec-Fetch-Site`` (``none``: typed or
        bookmarked) and, on cross-origin and non-GET requests, in ``Origin``; same-site
        is not enough (another port of this host is the same site)."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        return not self._cross_site(request)

    def _secure(self, request: Request) -> bool:
        if self.secure_cookie is not None:
            return self.secure_cookie
        return request.url.scheme == "https"

    async def _sign_in_route(self, request: Request) -> Response:
        if self._cross_site(request):
            return self._refuse_cross_site(request, "sign-in")
        ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            return _json(415, {"error": "the body must be a form: token=<member token>"})
        limits = self.limits
        try:
            body = await read_body(
                request, limit=limits.max_form, within=limits.body_timeout, what="form"
            )
        except Refused as exc:
            return _json(exc.status, {"error": exc.reason}, exc.headers)
        try:
            form = parse_qs(body.decode("utf-8"), max_num_fields=8)
        except (UnicodeDecodeError, ValueError):
            return _json(400, {"error": "the form is not valid"})
        token = (form.get("token") or [""])[0].strip()
        signed_in = await self.sign_in(token) if token else None
        if signed_in is None:
            logger.info("web sign-in refused from %s", _peer(request))
            return _json(401, {"error": "that token is not a member's token"})
        name = signed_in.member.name
        logger.info("web sign-in: %s", name)
        answer = {"name": name, "key": signed_in.key, "brokerStartedAt": self._broker_started}
        response = _json(200, answer)
        response.set_cookie(
            COOKIE_NAME,
            signed_in.session_id,
            max_age=round(self.sign_ins.ttl),
            path="/",
            secure=self._secure(request),
            httponly=True,
            samesite="strict",
        )
        return response

    async def _sign_out_route(self, request: Request) -> Response:
        if self._cross_site(request):
            return self._refuse_cross_site(request, "sign-out")
        session_id = request.cookies.get(COOKIE_NAME)
        key = _key_of(request)
        if session_id and key:
            await self.sign_out(session_id, key)  # its streams end now (the store says so)
        response = Response(status_code=204, headers=_SECURITY_HEADERS)
        response.delete_cookie(
            COOKIE_NAME, path="/", secure=self._secure(request), httponly=True, samesite="strict"
        )
        return response
