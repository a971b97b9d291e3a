"""The broker's notifications, delivered: the I/O shell around the notification policy.

:class:`Notifier` is told each member's activity as the broker publishes it (and every
member's after a start or a resync of the shared store), asks
:class:`~codex_presence.core.notify_policy.NotifyPolicy` what is due, and delivers it to the
configured targets (:mod:`~codex_presence.broker.notify.config`) through a
:class:`Sender` (apprise's, :mod:`~codex_presence.broker.notify.apprise_sender`).

Delivery never hurts the broker:

* nothing is sent on a request's path: the broker only tells the policy (a dict update),
  and one task per target delivers from that target's bounded queue
  (:data:`QUEUE_SIZE`; past it a notice is dropped, and the log says so), so a target
  that stalls delays nobody else's notices and no request;
* each attempt runs in a worker thread with a timeout (apprise's own connect and read
  timeouts, and ours around it); a failed attempt is retried with capped exponential
  backoff (:mod:`codex_presence.core.backoff`) up to ``attempts`` times, then given up with
  one warning naming the target by its label (never its URL) and why; a target that failed
  and then delivers again says so once;
* with several brokers on one Redis, each notice is sent once: the broker that takes its
  claim (:class:`Claims`, a ``SET NX`` with an expiry in
  :mod:`~codex_presence.broker.notify.claims`) sends it; the others keep it and look again
  when the claim lapses, so a broker that died mid-send loses nothing for good. A claim
  kept after a send (or a give-up) stops every broker from sending that notice again,
  including one that restarts and finds the member still blocked.

The time of the policy is the broker's wall clock (``activitySince`` is unix ms): ``clock``
is injectable, and the loop looks again at least every ``max_sleep`` seconds, so that a
test can move the clock and a wall clock that jumps is noticed. A notice another broker
claimed is looked at again every ``recheck`` seconds until it is settled or the claim
lapses.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from codex_presence._wire import ActivityState
from codex_presence.broker.notify.config import Target
from codex_presence.core.backoff import Backoff
from codex_presence.core.notify_policy import (
    LOST_PER_MINUTE,
    Due,
    Notice,
    NotifyEvent,
    NotifyPolicy,
    message,
)

__all__ = [
    "QUEUE_SIZE",
    "Claims",
    "MemoryClaims",
    "Notifier",
    "Sender",
    "TargetStats",
]

logger = logging.getLogger("codex_presence.notify")

QUEUE_SIZE = 64
"""Notices waiting per target at most; past it the newest is dropped (and logged)."""
TIMEOUT = 10.0
"""Seconds one delivery attempt may take."""
ATTEMPTS = 5
"""Attempts per notice before it is given up."""
KEEP = 24 * 3600.0
"""Seconds a claim is kept after its notice was sent or given up: no broker sends it
again within that time (a member blocked a whole day may be announced again, once)."""


class Sender(Protocol):
    """What delivers one notification (blocking; run in a worker thread)."""

    def masked(self, url: str) -> str:
        """The URL with its secrets masked; ValueError for an unknown URL."""

    def send(self, url: str, title: str, body: str, kind: str, timeout: float) -> str | None:
        """None when delivered, else why not (without secrets)."""


class Claims(Protocol):
    """Who sends a notice, among the brokers that share the team's state."""

    async def claim(self, key: str, lease: float) -> float | bool:
        """True: ours to send (for ``lease`` seconds; claiming again renews it). False:
        sent (or given up) already. A number: another broker holds it, for that many
        seconds more. Raises when it cannot tell (the shared store is away)."""

    async def settle(self, key: str, keep: float) -> None:
        """The notice was sent or given up: nobody sends it again for ``keep`` seconds."""


class MemoryClaims:
    """One broker alone: every notice is its own; settled ones are remembered for ``keep``
    so that a reminder key is never sent twice."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._settled: dict[str, float] = {}

    async def claim(self, key: str, lease: float) -> float | bool:
        until = self._settled.get(key)
        return until is None or until <= self._clock()

    async def settle(self, key: str, keep: float) -> None:
        now = self._clock()
        if len(self._settled) > 4 * QUEUE_SIZE:
            self._settled = {k: t for k, t in self._settled.items() if t > now}
        self._settled[key] = now + keep


@dataclass(slots=True)
class TargetStats:
    """What an admin sees of a target (``GET /notify``): never its URL."""

    sent: int = 0
    given_up: int = 0
    dropped: int = 0
    failing: int = 0
    """Notices given up in a row (0: the last one was delivered)."""
    last_error: str | None = None
    last_sent_ms: int | None = None


_KIND = {
    NotifyEvent.BLOCKED: "warning",
    NotifyEvent.ANSWERED: "success",
    NotifyEvent.LOST: "failure",
}


class Notifier:
    """Notifications for ``team`` to ``targets``, sent by ``sender``, claimed through
    ``claims`` (default: this broker alone). ``link`` is the roster page's public
    address, if the broker knows it."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        team: str,
        sender: Sender,
        claims: Claims | None = None,
        link: str | None = None,
        clock: Callable[[], float] = time.time,
        timeout: float = TIMEOUT,
        attempts: int = ATTEMPTS,
        backoff: Callable[[], Backoff] = lambda: Backoff(base=1.0, cap=60.0),
        lease: float | None = None,
        keep: float = KEEP,
        max_sleep: float = 5.0,
        recheck: float = 2.0,
    ) -> None:
        labelled = []
        for target in targets:
            label = target.name or sender.masked(target.url)  # ValueError: unknown URL
            labelled.append(Target(target.url, target.rule, target.name, label))
        self.targets = tuple(labelled)
        self.team = team
        self.policy = NotifyPolicy([t.rule for t in self.targets], [t.id for t in self.targets])
        self.stats = [TargetStats() for _ in self.targets]
        self._sender = sender
        self._claims = claims if claims is not None else MemoryClaims()
        self._link = link
        self._clock = clock
        self._timeout = timeout
        self._attempts = max(1, attempts)
        self._backoff = backoff
        self._lease = lease if lease is not None else 2 * timeout + 5
        self._keep = keep
        self._max_sleep = max_sleep
        self._recheck = recheck
        self._wake = anyio.Event()
        self._limiter = anyio.CapacityLimiter(max(1, len(self.targets)))
        self._queues: list[MemoryObjectSendStream[Notice]] = []
        self._dropped_said: dict[str, int] = {}
        """Member -> the count of dropped "session lost" notices last said."""
        self._dropping: dict[int, int] = {}
        """Targets whose queue overflowed -> their dropped count when it began."""
        self.looked_at = -math.inf
        """The time (of ``clock``) the policy was last asked at: tests wait for it."""
        self.pending = 0
        """Notices queued or being delivered."""

    # -- what the broker tells (never waits) ------------------------------------------

    def observe(
        self, name: str, state: ActivityState, since_ms: int | None, agents: object = None
    ) -> None:
        """``name``'s activity as the broker shows it, with its ``agents`` when listed."""
        self.policy.observe(name, state, since_ms, self._clock(), agents)
        self._wake.set()

    def lost(
        self,
        name: str,
        state: ActivityState,
        at_ms: int,
        *,
        since_ms: int | None = None,
        session: str | None = None,
    ) -> None:
        """``name``'s ``session`` died at ``at_ms`` while in ``state`` (held since
        ``since_ms``): the broker saw its death grace lapse."""
        self.policy.lost(name, state, at_ms, since_ms=since_ms, session=session)
        self._wake.set()

    def lapsed(self, name: str) -> None:
        """A session of ``name`` lapsed on a grace another broker gave (that broker tells of
        it): its blocked spell ends unanswered."""
        self.policy.lapsed(name)

    # -- the work --------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver until cancelled."""
        streams = [anyio.create_memory_object_stream[Notice](QUEUE_SIZE) for _ in self.targets]
        self._queues = [send for send, _ in streams]
        async with anyio.create_task_group() as tg:
            for index, (send, inbox) in enumerate(streams):
                tg.start_soon(self._deliver_all, index, send, inbox)
            while True:
                now = self._clock()
                action = self.policy.next_action(now)
                if isinstance(action, Due):
                    for notice in action.notices:
                        self._enqueue(notice)
                    self._say_dropped()
                    continue
                self._say_dropped()
                self.looked_at = now
                delay = self._max_sleep
                if action.until is not None:
                    delay = min(delay, max(0.0, action.until - now))
                with anyio.move_on_after(delay):
                    await self._wake.wait()
                self._wake = anyio.Event()

    def _say_dropped(self) -> None:
        """One warning when a member's "session lost" notices start being dropped past
        :data:`~codex_presence.core.notify_policy.LOST_PER_MINUTE`, then one per 100."""
        for member, count in self.policy.dropped.items():
            said = self._dropped_said.get(member, 0)
            if count > said and (said == 0 or count // 100 > said // 100):
                self._dropped_said[member] = count
                logger.warning(
                    "notify: %d 'session lost' notices of %s dropped: more than %d a minute",
                    count,
                    member,
                    LOST_PER_MINUTE,
                )

    def _enqueue(self, notice: Notice) -> None:
        try:
            self._queues[notice.target].send_nowait(notice)
            self.pending += 1
        except anyio.WouldBlock:
            stats = self.stats[notice.target]
            stats.dropped += 1
            if notice.target not in self._dropping:  # one line per overflow, not per notice
                self._dropping[notice.target] = stats.dropped - 1
                logger.warning(
                    "notify %s: %d notices already wait for this target: dropping new ones "
                    "until it catches up",
                    self.targets[notice.target].label,
                    QUEUE_SIZE,
                )

    async def _deliver_all(
        self,
        index: int,
        send: MemoryObjectSendStream[Notice],
        inbox: MemoryObjectReceiveStream[Notice],
    ) -> None:
        async with send, inbox:
            async for notice in inbox:
                try:
                    await self._deliver(notice)
                finally:
                    self.pending -= 1
                if index in self._dropping and not send.statistics().current_buffer_used:
                    dropped = self.stats[index].dropped - self._dropping.pop(index)
                    logger.warning(
                        "notify %s: caught up; %d notices were dropped",
                        self.targets[index].label,
                        dropped,
                    )

    async def _deliver(self, notice: Notice) -> None:
        target = self.targets[notice.target]
        stats = self.stats[notice.target]
        backoff = self._backoff()
        failures = 0
        reason = ""
        while failures < self._attempts:
            try:
                claim = await self._claims.claim(notice.key, self._lease)
            except Exception as exc:  # the shared store is away: wait, uncounted
                logger.debug("notify %s: cannot claim a notice yet (%s)", target.label, exc)
                await anyio.sleep(backoff.next_delay())
                continue
            if claim is False:
                return  # another broker sent it (or gave it up)
            if claim is not True:
                # Another broker's: look again when it settles, or its lease lapses.
                await anyio.sleep(min(float(claim) + 0.05, self._recheck))
                continue
            problem = await self._attempt(target, notice)
            if problem is None:
                await self._settle(notice)
                stats.sent += 1
                stats.last_sent_ms = round(self._clock() * 1000)
                if stats.failing:
                    logger.warning("notify %s: delivers again", target.label)
                stats.failing = 0
                logger.info(
                    "notify %s: told of %s (%s)", target.label, notice.member, notice.event.value
                )
                return
            failures += 1
            reason = problem
            logger.info(
                "notify %s: attempt %d of %d failed: %s",
                target.label,
                failures,
                self._attempts,
                problem,
            )
            if failures < self._attempts:
                await anyio.sleep(backoff.next_delay())
        await self._settle(notice)
        stats.given_up += 1
        stats.failing += 1
        stats.last_error = reason
        logger.warning(
            "notify %s: gave up telling of %s (%s) after %d attempts (%d given up in a row): %s",
            target.label,
            notice.member,
            notice.event.value,
            self._attempts,
            stats.failing,
            reason,
        )

    async def _attempt(self, target: Target, notice: Notice) -> str | None:
        title, body = message(notice, team=self.team, now=self._clock(), link=self._link)
        kind = _KIND[notice.event]
        with anyio.move_on_after(self._timeout + 1):
            return await anyio.to_thread.run_sync(
                self._sender.send,
                target.url,
                title,
                body,
                kind,
                self._timeout,
                limiter=self._limiter,
                abandon_on_cancel=True,
            )
        return f"no answer within {self._timeout:g} s"

    async def _settle(self, notice: Notice) -> None:
        try:
            await self._claims.settle(notice.key, self._keep)
        except Exception as exc:  # the claim lapses by itself; another broker may resend
            logger.debug("notify: could not settle a claim (%s)", exc)

    # -- for admins --------------------------------------------------------------------

    def describe(self) -> list[dict[str, object]]:
        """The targets as an admin sees them: label, rule and counts, never the URL."""
        described: list[dict[str, object]] = []
        for target, stats in zip(self.targets, self.stats, strict=True):
            rule = target.rule
            described.append(
                {
                    "label": target.label,
                    "after": rule.after,
                    "members": None if rule.members is None else sorted(rule.members),
                    "on": sorted(e.value for e in rule.on),
                    "repeat": rule.repeat,
                    "sent": stats.sent,
                    "givenUp": stats.given_up,
                    "dropped": stats.dropped,
                    "failing": stats.failing,
                    "lastError": stats.last_error,
                    "lastSentAt": stats.last_sent_ms,
                }
            )
        return described
