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

from codex_presence.client.stream import ConnectionState, RosterStream

__all__ = ["ConnectionPresence", "ConnectionState"]

logger = logging.getLogger("codex_presence.presence")


class ConnectionPresence(RosterStream):
    """One runner's live subscription, kept open across broker restarts, said in the log."""

    def _changed(self, state: ConnectionState) -> None:
        if state is ConnectionState.ONLINE:
            logger.info("online: subscribed to the broker as %s", self.name)
        elif state is ConnectionState.OFFLINE:
            level = logging.ERROR if self.refused is not None else logging.WARNING
            logger.log(level, "offline: %s", self.reason)
        else:
            logger.debug("connecting to the broker")
        super()._changed(state)
