"""wrap's connection presence: the member's subscription, held for the whole session.

While the SSE stream is open the broker counts this runner in the member's ``connected``.
:class:`ConnectionPresence` is the runner's side of that: the one follow loop
(:class:`~codex_presence.client.stream.RosterStream`, which reconnects with backoff and
gives up only on a 401/403), with its state — ``connecting``, ``online``, ``offline`` —
logged on every change and readable at any time (the design's runner-side connection
signal). The events themselves are for UIs: a runner does not even parse them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx

from codex_presence._wire import SILENT_STREAM_TIMEOUT
from codex_presence.client.stream import ConnectionState, RosterStream
from codex_presence.core.backoff import Backoff

__all__ = ["ConnectionPresence", "ConnectionState"]

logger = logging.getLogger("codex_presence.presence")


class ConnectionPresence:
    """One runner's live subscription, kept open across broker restarts."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        name: str,
        backoff: Backoff | None = None,
        read_timeout: float = SILENT_STREAM_TIMEOUT,
        on_change: Callable[[ConnectionState], None] | None = None,
    ) -> None:
        self._on_change = on_change
        self._stream = RosterStream(
            client, name, backoff=backoff, read_timeout=read_timeout, on_change=self._changed
        )

    @property
    def state(self) -> ConnectionState:
        return self._stream.state

    @property
    def connects(self) -> int:
        """How many times the subscription was established."""
        return self._stream.connects

    @property
    def stopped_reason(self) -> str | None:
        """Why the attempts ended for good (the broker refused), or None."""
        return self._stream.reason if self._stream.refused is not None else None

    def _changed(self, state: ConnectionState) -> None:
        stream = self._stream
        if state is ConnectionState.ONLINE:
            logger.info("online: subscribed to the broker as %s", stream.name)
        elif state is ConnectionState.OFFLINE:
            level = logging.ERROR if stream.refused is not None else logging.WARNING
            logger.log(level, "offline: %s", stream.reason)
        else:
            logger.debug("connecting to the broker")
        if self._on_change is not None:
            self._on_change(state)

    async def run(self) -> None:
        """Stay subscribed until cancelled (or refused for good)."""
        await self._stream.run()
