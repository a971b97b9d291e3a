"""wrap's connection presence: the member's subscription, held for the whole session.

While the SSE stream is open the broker counts this runner in the member's ``connected``.
:class:`ConnectionPresence` is the runner's side of that: the one follow loop
(:class:`~codex_presence.client.stream.RosterStream`, which reconnects with backoff and
gives up only on a 401/403), with its state — ``connecting``, ``online``, ``offline`` —
logged on every change and readable at any time (the design's runner-side connection
signal). The events themselves are for UIs: a runner does not even parse them.

A broker that stays away is said once, not at every attempt: :class:`Outage` logs a
failure when its reason changes, then counts the attempts (a line at the 10th, the 100th,
…) and says how many there were once the broker is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from codex_presence._wire import counted
from codex_presence.client.stream import ConnectionState, RosterStream

__all__ = ["ConnectionPresence", "ConnectionState", "Outage"]

logger = logging.getLogger("codex_presence.presence")


class Outage:
    """A run of failed attempts, in the log: each new reason once (``what: reason``), the
    count at every power of ten, and :meth:`over` says how many there were."""

    def __init__(
        self, log: logging.Logger, what: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = log
        self._what = what
        self._clock = clock
        self.attempts = 0
        self._reason: str | None = None
        self._since = 0.0

    def failed(self, reason: str, level: int = logging.WARNING) -> None:
        """One more attempt failed, for ``reason``."""
        if not self.attempts:
            self._since = self._clock()
        self.attempts += 1
        if reason != self._reason:
            self._reason = reason
            self._log.log(level, "%s: %s", self._what, reason)
        elif _power_of_ten(self.attempts):
            self._log.log(level, "still %s: %s", self._what, self._count())
        else:
            self._log.debug("%s: %s (attempt %d)", self._what, reason, self.attempts)

    def over(self) -> str:
        """The run ended (an attempt worked): `` (after …)`` to say so, or "" if there was
        none; the next failure starts a new run."""
        said = f" (after {self._count()})" if self.attempts else ""
        self.attempts, self._reason = 0, None
        return said

    def _count(self) -> str:
        seconds = self._clock() - self._since
        return f"{counted(self.attempts, 'failed attempt')} in {seconds:.0f} s"


def _power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


class ConnectionPresence(RosterStream):
    """One runner's live subscription, kept open across broker restarts, said in the log."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outage = Outage(logger, "offline")

    def _changed(self, state: ConnectionState) -> None:
        if state is ConnectionState.ONLINE:
            back = self._outage.over()
            logger.info("online: subscribed to the broker as %s%s", self.name, back)
        elif state is ConnectionState.OFFLINE:
            if self.refused is not None:
                logger.error("offline: %s", self.reason)
            else:
                self._outage.failed(self.reason)
        else:
            logger.debug("connecting to the broker")
        super()._changed(state)
