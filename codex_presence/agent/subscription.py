"""Connection presence: hold ``GET /subscribe?name=<self>`` for the whole session.

While the SSE stream is open the broker counts this runner in the member's ``connected``;
when it drops, :class:`ConnectionPresence` reconnects with capped, jittered backoff and
says so. Its state — ``connecting``, ``online``, ``offline`` — is logged on every change
and can be read at any time (the design's runner-side connection signal). A stream that
stays silent past ``read_timeout`` (the broker sends keep-alives) is treated as dead.
A 401/403 ends the attempts: a wrong token or name will not fix itself.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

import anyio
import httpx
from httpx_sse import aconnect_sse

from codex_presence.core.report_policy import Backoff

__all__ = ["ConnectionPresence", "ConnectionState"]

logger = logging.getLogger("codex_presence.presence")


class ConnectionState(enum.StrEnum):
    CONNECTING = "connecting"
    ONLINE = "online"
    OFFLINE = "offline"


class ConnectionPresence:
    """One runner's live subscription, kept open across broker restarts."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        name: str,
        backoff: Backoff | None = None,
        read_timeout: float = 45.0,
        on_change: Callable[[ConnectionState], None] | None = None,
    ) -> None:
        self._client = client
        self._name = name
        self._backoff = backoff if backoff is not None else Backoff(base=0.5, cap=10.0)
        self._read_timeout = read_timeout
        self._on_change = on_change
        self.state = ConnectionState.OFFLINE
        self.stopped_reason: str | None = None
        self.connects = 0

    def _set(self, state: ConnectionState, detail: str = "") -> None:
        if state is self.state:
            return
        self.state = state
        if state is ConnectionState.ONLINE:
            logger.info("online: subscribed to the broker as %s", self._name)
        elif state is ConnectionState.OFFLINE:
            level = logging.ERROR if self.stopped_reason else logging.WARNING
            logger.log(level, "offline%s", f": {detail}" if detail else "")
        else:
            logger.debug("connecting to the broker")
        if self._on_change is not None:
            self._on_change(state)

    async def run(self) -> None:
        """Stay subscribed until cancelled (or refused for good)."""
        while True:
            self._set(ConnectionState.CONNECTING)
            detail = await self._hold_once()
            if self.stopped_reason is not None:
                self._set(ConnectionState.OFFLINE, self.stopped_reason)
                return
            self._set(ConnectionState.OFFLINE, detail)
            await anyio.sleep(self._backoff.next_delay())

    async def _hold_once(self) -> str:
        """One subscription, from connect to close; returns why it ended."""
        timeout = httpx.Timeout(5.0, read=self._read_timeout)
        try:
            async with aconnect_sse(
                self._client,
                "GET",
                "/subscribe",
                params={"name": self._name},
                timeout=timeout,
            ) as source:
                status = source.response.status_code
                if status in (401, 403):
                    self.stopped_reason = (
                        f"the broker refused the subscription (HTTP {status}); not retrying"
                    )
                    return self.stopped_reason
                if status != 200:
                    return f"HTTP {status}"
                self.connects += 1
                self._backoff.reset()
                self._set(ConnectionState.ONLINE)
                async for _event in source.aiter_sse():
                    pass  # the events are for UIs; being subscribed is what counts
                return "the broker closed the stream"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}"
