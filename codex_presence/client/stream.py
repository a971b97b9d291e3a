"""The one SSE follow loop: hold ``GET /subscribe?name=<self>`` for as long as it takes.

While the stream is open the broker counts the member as connected. :class:`RosterStream`
connects, reads the events, and when the stream drops (the broker restarted, the network
went away, or it stayed silent past ``read_timeout`` although the broker sends keep-alives)
reconnects with capped, jittered backoff (:func:`~codex_presence.core.backoff.reconnect_backoff`).
A 401/403 ends it: a wrong token or name will not fix itself. A runner's stream names its
session (``session``): the broker then lets that session's activity lapse a few seconds
after the stream ends, instead of at the TTL.

Its state — ``connecting``, ``online``, ``offline`` — goes to ``on_change`` on every change,
with :attr:`RosterStream.reason` (why it went offline) and :attr:`RosterStream.retry_in`
(when it tries again) to read. Whoever wants the roster itself passes ``on_roster``: the
stream is a light one (``?light=1``): where a full one has a ``roster`` event it has a
``changed`` one, and the stream reads ``GET /roster``, sending back the ``ETag`` it has
(``If-None-Match``: a 304 and no body while the roster is the same); that, the
``presence`` and the ``stale`` events are folded into one :class:`RosterView`, with a
call back after each change (a broker that does not know ``light`` sends ``roster``
events, folded the same way); without it the stream is a quiet one
(``?quiet=1``: the broker sends keep-alives only, no roster to read and drop; a broker
that does not know it sends everything, and the events are not even parsed). Users: wrap's
connection presence (:mod:`codex_presence.client.subscription`), ``roster --watch`` and the
demo's watcher.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import orjson
from httpx_sse import ServerSentEvent, aconnect_sse

from codex_presence._wire import (
    CHANGED_EVENT,
    PRESENCE_EVENT,
    ROSTER_EVENT,
    ROSTER_PATH,
    SILENT_STREAM_TIMEOUT,
    STALE_EVENT,
    SUBSCRIBE_PATH,
    printable,
)
from codex_presence.core.backoff import Backoff, reconnect_backoff

__all__ = ["ConnectionState", "RosterStream", "RosterView"]


class ConnectionState(enum.StrEnum):
    CONNECTING = "connecting"
    ONLINE = "online"
    OFFLINE = "offline"


@dataclass
class RosterView:
    """The roster as the stream has told it so far."""

    team: str = ""
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Presence objects by name, in roster order."""
    privileges: dict[str, str | None] = field(default_factory=dict)
    """Each member's privilege bucket, as the broker computed it."""
    stale: str | None = None
    """Why the broker says what it shows may be out of date (its ``stale`` event: it lost
    its shared store), until its next ``roster`` event; None while current."""


class RosterStream:
    """One member's live subscription, kept open across broker restarts."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        name: str,
        *,
        backoff: Backoff | None = None,
        read_timeout: float = SILENT_STREAM_TIMEOUT,
        on_change: Callable[[ConnectionState], None] | None = None,
        on_roster: Callable[[RosterView], None] | None = None,
        session: str | None = None,
    ) -> None:
        self._client = client
        self.name = name
        self.session = session
        """The session this subscription is bound to (``?session=``; None: none)."""
        self._backoff = backoff if backoff is not None else reconnect_backoff()
        self._read_timeout = read_timeout
        self._on_change = on_change
        self._on_roster = on_roster
        self.state = ConnectionState.OFFLINE
        self.view = RosterView()
        self.connects = 0
        self.reason = ""
        """Why the stream last ended (empty while it never did)."""
        self.retry_in: float | None = None
        """Seconds until the next attempt, while offline; None once refused."""
        self.refused: int | None = None
        """The HTTP status (401 or 403) that ended the attempts for good."""
        self.etag: str | None = None
        """The ``ETag`` of the roster last read with ``GET /roster`` (light stream)."""
        self._read: list[Any] = []
        """The members as ``GET /roster`` gave them last (the ETag's)."""
        self.reads: dict[int, int] = {}
        """``GET /roster`` reads by HTTP status (200, 304, ...): what the light stream cost."""

    def _set(self, state: ConnectionState) -> None:
        if state is not self.state:
            self.state = state
            self._changed(state)

    def _changed(self, state: ConnectionState) -> None:
        """The state changed (a subclass may say so too)."""
        if self._on_change is not None:
            self._on_change(state)

    async def run(self) -> None:
        """Stay subscribed until cancelled; returns when the broker refuses for good."""
        while True:
            self._set(ConnectionState.CONNECTING)
            self.reason = await self._hold_once()
            if self.refused is not None:
                self.retry_in = None
                self._set(ConnectionState.OFFLINE)
                return
            self.retry_in = self._backoff.next_delay()
            self._set(ConnectionState.OFFLINE)
            await anyio.sleep(self.retry_in)

    async def _hold_once(self) -> str:
        """One subscription, from connect to close; returns why it ended."""
        timeout = httpx.Timeout(5.0, read=self._read_timeout)
        params = {"name": self.name}
        if self.session is not None:
            params["session"] = self.session
        if self._on_roster is None:
            params["quiet"] = "1"  # keep-alives only: no roster to read and drop
        else:
            params["light"] = "1"  # no roster on the stream: it is read with GET /roster
        try:
            async with aconnect_sse(
                self._client, "GET", SUBSCRIBE_PATH, params=params, timeout=timeout
            ) as source:
                status = source.response.status_code
                if status in (401, 403):
                    self.refused = status
                    why = await _refusal(source.response)
                    return f"the broker refused the subscription (HTTP {status}{why}); not retrying"
                if status != 200:
                    await source.response.aread()
                    text = printable(source.response.text[:200])
                    return f"subscribe: HTTP {status} {text}".rstrip()
                self.connects += 1
                self._backoff.reset()
                self._set(ConnectionState.ONLINE)
                async for event in source.aiter_sse():
                    if self._on_roster is None:
                        continue
                    if event.event == CHANGED_EVENT:
                        changed = await self._read_roster(event)
                    else:
                        changed = self._apply(event)
                    if changed:
                        self._on_roster(self.view)
                return "the broker closed the stream"
        except httpx.HTTPError as exc:
            return f"lost the stream: {exc or type(exc).__name__}"

    async def _read_roster(self, event: ServerSentEvent) -> bool:
        """A ``changed`` event: the roster read (a 304 while it is the one read last; the
        ``presence`` events after it wait in the stream meanwhile); whether the view
        changed."""
        try:
            data = orjson.loads(event.data) if event.data else None
        except orjson.JSONDecodeError:
            return False
        if not isinstance(data, dict):
            return False
        headers = {} if self.etag is None else {"if-none-match": self.etag}
        response = await self._client.get(ROSTER_PATH, headers=headers)
        self.reads[response.status_code] = self.reads.get(response.status_code, 0) + 1
        if response.status_code == 200:
            try:
                members = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                members = None
            if isinstance(members, list):
                self._read = members
                self.etag = response.headers.get("etag")
        elif response.status_code != 304:
            return True  # the stream will say why (a refusal ends it)
        self._fold_roster(data, self._read)  # (a 304: the roster read last)
        return True

    def _fold_roster(self, data: dict[str, Any], members: Iterable[Any]) -> None:
        """A whole roster into :attr:`view` (a ``roster`` event, or a ``changed`` one and
        the members read): current, so no longer stale."""
        view = self.view
        view.team = str(data.get("team", ""))
        view.members = {
            p["name"]: p for p in members if isinstance(p, dict) and isinstance(p.get("name"), str)
        }  # (a member object without a name is no broker's: skipped, never a crash)
        privileges = data.get("privileges")
        view.privileges = privileges if isinstance(privileges, dict) else {}
        view.stale = None

    def _apply(self, event: ServerSentEvent) -> bool:
        """Fold one event into :attr:`view`; whether it changed anything."""
        try:
            data = orjson.loads(event.data) if event.data else None
        except orjson.JSONDecodeError:
            return False  # not a broker's event
        if not isinstance(data, dict):
            return False
        view = self.view
        if event.event == ROSTER_EVENT and isinstance(data.get("members"), list):
            self._fold_roster(data, data["members"])
            return True
        if event.event == STALE_EVENT:
            reason = data.get("reason")
            view.stale = printable(reason[:200]) if isinstance(reason, str) and reason else "?"
            return True
        if event.event == PRESENCE_EVENT and isinstance(data.get("name"), str):
            view.members[data["name"]] = data
            return True
        return False


async def _refusal(response: httpx.Response) -> str:
    """``: <the broker's reason>`` from a refusal's JSON body (``{"error": …}``), or ""."""
    body = await response.aread()
    try:
        reason = orjson.loads(body[:1000]).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    return f": {printable(reason[:200])}" if isinstance(reason, str) and reason else ""
