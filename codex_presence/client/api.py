"""The broker's JSON endpoints as a member calls them: ``GET /whoami``, ``GET /roster``,
(for an admin) ``GET /notify``, and ``GET /healthz`` for whether the roster is current.

One fetch for each, used by everything that asks: ``wrap`` (whose token is this?),
``roster``, the MCP tool and the demo. Each either returns the answer or raises one
:class:`BrokerError` saying why not, in words fit for a user and never holding the token:

* :class:`BrokerUnreachable` — no answer at all (the broker is down, the URL is wrong);
* :class:`TokenRefused` — 401/403: the token is not (or no longer) a member's;
* :class:`NotABroker` — an answer that is not a broker's JSON (a proxy's sign-in page, a
  dev server's fallback route);
* :class:`BrokerError` itself — another HTTP status.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codex_presence._wire import (
    HEALTHZ_PATH,
    HISTORY_PATH,
    NOTIFY_PATH,
    ROSTER_PATH,
    WHOAMI_PATH,
    Whoami,
    masked,
    parse_whoami,
    printable,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "BrokerError",
    "BrokerUnreachable",
    "NotABroker",
    "TokenRefused",
    "fetch_history",
    "fetch_notify_targets",
    "fetch_roster",
    "fetch_store_trouble",
    "fetch_whoami",
    "token_refused",
]


class BrokerError(Exception):
    """The broker did not give the answer asked for; the message says why."""


class BrokerUnreachable(BrokerError):
    """No HTTP answer at all."""


class TokenRefused(BrokerError):
    """401/403: the broker does not take this token."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class NotABroker(BrokerError):
    """An answer, but not a codex-presence broker's JSON."""

    def __init__(self, message: str, content_type: str) -> None:
        super().__init__(message)
        self.content_type = content_type


def _where(client: httpx.AsyncClient) -> str:
    """The broker's URL as every message shows it: without its password."""
    return masked(str(client.base_url).rstrip("/"))


async def _get(client: httpx.AsyncClient, path: str) -> httpx.Response:
    """The 200 response to ``GET path``, or the :class:`BrokerError` saying why not."""
    import httpx

    try:
        response = await client.get(path)
    except httpx.HTTPError as exc:
        hint = ""
        if client.base_url.scheme == "https" and "WRONG_VERSION_NUMBER" in str(exc):
            hint = " (the broker speaks plain HTTP unless a TLS proxy is in front of it: http://?)"
        raise BrokerUnreachable(
            f"cannot reach the presence broker at {_where(client)}: "
            f"{exc or type(exc).__name__}{hint}"
        ) from None
    status = response.status_code
    if status in (401, 403):
        raise token_refused(client, status)
    if status != 200:
        raise _status_error(client, response, path)
    return response


def _status_error(client: httpx.AsyncClient, response: httpx.Response, path: str) -> BrokerError:
    """An answer other than 200, said in one sentence: a broker's own reason (its JSON
    ``error``), or that what answered is not a broker (a page of HTML, ~300 characters of
    it, said nothing a user could act on)."""
    status = response.status_code
    kind = response.headers.get("content-type", "")
    if kind.partition(";")[0].strip().lower() == "application/json":
        try:
            reason = response.json().get("error")
        except (ValueError, AttributeError):
            reason = None
        if isinstance(reason, str):
            return BrokerError(f"GET {path}: HTTP {status}: {printable(reason[:200])}")
    shown = printable(kind.partition(";")[0].strip() or "no content type")
    return NotABroker(
        f"GET {path}: {_where(client)} answered HTTP {status} ({shown}), not as a "
        "codex-presence broker does: is it the broker's URL?",
        shown,
    )


def token_refused(client: httpx.AsyncClient, status: int) -> TokenRefused:
    """What to raise when the broker behind ``client`` refused its token with ``status``."""
    return TokenRefused(f"the broker at {_where(client)} refused the token ({status})", status)


def _not_a_broker(client: httpx.AsyncClient, response: httpx.Response, path: str) -> NotABroker:
    kind = printable(response.headers.get("content-type", "no content type"))
    return NotABroker(
        f"GET {path}: {_where(client)} is not a codex-presence broker "
        f"(it answered {kind}, not a codex-presence broker's JSON)",
        kind,
    )


async def fetch_whoami(client: httpx.AsyncClient) -> Whoami:
    """Whose token ``client`` carries, and in which team."""
    response = await _get(client, WHOAMI_PATH)
    me = parse_whoami(response.content)
    if me is None:
        raise _not_a_broker(client, response, WHOAMI_PATH)
    return me


async def fetch_roster(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The team's roster: one Presence object per member, in team-file order."""
    response = await _get(client, ROSTER_PATH)
    try:
        roster = response.json()
    except ValueError:
        raise _not_a_broker(client, response, ROSTER_PATH) from None
    if not isinstance(roster, list):
        raise _not_a_broker(client, response, ROSTER_PATH)
    return roster


async def fetch_history(
    client: httpx.AsyncClient, member: str, since_ms: int | None = None
) -> dict[str, Any]:
    """``member``'s timeline (``GET /history``): intervals, totals, waits."""
    from urllib.parse import urlencode

    query = {"member": member} if since_ms is None else {"member": member, "since": since_ms}
    path = f"{HISTORY_PATH}?{urlencode(query)}"
    response = await _get(client, path)
    try:
        answer = response.json()
    except ValueError:
        raise _not_a_broker(client, response, HISTORY_PATH) from None
    if not isinstance(answer, dict):
        raise _not_a_broker(client, response, HISTORY_PATH)
    return answer


async def fetch_notify_targets(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The broker's notification targets (an admin's view: label, rule, counts; never a
    URL). A member who is not an admin is told so, not that the token was refused."""
    try:
        response = await _get(client, NOTIFY_PATH)
    except TokenRefused as refused:
        if refused.status == 403:
            raise BrokerError(
                f"the broker at {_where(client)} shows its notification targets to admins "
                "(members.manage) only"
            ) from None
        raise
    try:
        targets = response.json().get("targets")
    except (ValueError, AttributeError):
        targets = None
    if not isinstance(targets, list):
        raise _not_a_broker(client, response, NOTIFY_PATH)
    return [t for t in targets if isinstance(t, dict)]


async def fetch_store_trouble(client: httpx.AsyncClient) -> str | None:
    """Why the broker's roster may be out of date: it shares its state through Redis and
    cannot reach it (``/healthz`` answers 503; the reason is said to a member's token).
    None when it is current, or when ``/healthz`` says nothing usable (a broker that
    just answered the roster is not made an error by this question)."""
    import httpx

    try:
        response = await client.get(HEALTHZ_PATH)
        health = response.json()
    except (httpx.HTTPError, ValueError):
        return None
    if response.status_code != 503 or not isinstance(health, dict):
        return None
    if health.get("status") != "unavailable":
        return None
    reason = health.get("reason")
    return printable(reason[:200]) if isinstance(reason, str) and reason else "unreachable"
