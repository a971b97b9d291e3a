"""Capped exponential backoff with full jitter: how every retry loop of the package waits.

:func:`reconnect_backoff` is the one schedule for getting back to a broker that went away
(the SSE subscription, ``roster --watch``, asking ``/whoami``); the activity reporter's
retries use :class:`Backoff`'s own, shorter defaults. Pure: the delays are computed, and the
caller sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Backoff", "reconnect_backoff"]


@dataclass(slots=True)
class Backoff:
    """Capped exponential backoff with full jitter (AWS's "full jitter" variant): the n-th
    delay is uniform in [base, min(cap, base * 2**n)], so retrying clients spread out."""

    base: float = 0.25
    cap: float = 5.0
    rand: Callable[[], float] = random.random
    attempts: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** min(self.attempts, 32))
        self.attempts += 1
        return self.base + (ceiling - self.base) * self.rand()

    def reset(self) -> None:
        self.attempts = 0


def reconnect_backoff() -> Backoff:
    """The schedule for reaching a broker again: from half a second up to ten."""
    return Backoff(base=0.5, cap=10.0)
