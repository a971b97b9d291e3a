"""The activity reporter: the I/O shell that carries out :class:`ReportPolicy` with httpx.

:meth:`ActivityReporter.observe` is synchronous and never blocks, so the relay can call it
from its hot path; a background task (:meth:`ActivityReporter.run`) does every POST. Each
POST has a short timeout; what to send and when is the policy's business. On shutdown
(:meth:`ActivityReporter.finish`) a member that the broker holds as non-idle is reported
idle, bounded to about a second. The token is sent in a header and never logged.

What the link learns about the broker goes to the policy:
:meth:`ActivityReporter.use_broker_ttl` (its TTL, from ``GET /whoami``: the heartbeat
follows it) and :meth:`ActivityReporter.resend` (the subscription reconnected: the broker
may have restarted and forgotten).

Each report names the session it is about (``session``, the id the link picked for this
run, which the subscription also carries): a member's sessions are held apart at the
broker. A broker that predates sessions refuses a body with a ``session`` (400): the
reporter then says so once and reports as the member's one anonymous session.

A report of a named session also carries the session's background count (``"background":
N``, commands or tasks it left running; left out when 0, which is what its absence means).
A broker that predates counts refuses the key (400): the reporter says so once and reports
the state alone.

It also carries the session's agent record (``"agent": {...}``, which client, where, what it
waits on; :mod:`codex_presence.core.agent_record`) when the policy says it is news. A
broker that refuses it (a 400 that names it: one that predates records) gets none from
then on, said once; the state still goes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import httpx

from codex_presence._wire import ACTIVITY_PATH, printable
from codex_presence.core.activity import ActivityState
from codex_presence.core.report_policy import Outcome, Post, ReportPolicy

__all__ = ["ActivityReporter"]

logger = logging.getLogger("codex_presence.reporter")


def classify(status: int) -> Outcome:
    if 200 <= status < 300:
        return Outcome.OK
    if status in (401, 403):
        return Outcome.UNAUTHORIZED
    if status in (408, 429) or status >= 500:
        return Outcome.FAILED
    return Outcome.REJECTED


class ActivityReporter:
    """Reports one member's activity to the broker behind ``client``."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        policy: ReportPolicy | None = None,
        clock: Callable[[], float] = anyio.current_time,
        request_timeout: float = 2.0,
        session: str | None = None,
    ) -> None:
        self._client = client
        self.session = session
        """The session id each report carries (None: the anonymous session)."""
        self.policy = policy if policy is not None else ReportPolicy()
        self._clock = clock
        self._timeout = request_timeout
        self._wake = anyio.Event()
        self._failing = False
        self._counts_known = True
        """False once the broker refused a background count: it predates them."""
        self._agents_known = True
        """False once the broker refused an agent record."""
        self.posts = 0
        """How many POSTs were attempted (for tests and the idle-cost benchmark)."""

    def observe(self, state: ActivityState, *, passing: bool = False) -> None:
        """The derived state is now ``state`` (``passing``: on its way to another, see the
        policy). Never blocks; call it from the event loop."""
        self.policy.observe(state, passing=passing, now=self._clock())
        self._wake.set()

    def observe_background(self, count: int) -> None:
        """The session now has ``count`` commands or tasks left running. Never blocks."""
        self.policy.observe_background(count)
        self._wake.set()

    def observe_agent(self, agent: Mapping[str, Any] | None) -> None:
        """The session's agent record is now ``agent``. Never blocks."""
        self.policy.observe_agent(agent)
        self._wake.set()

    def use_broker_ttl(self, ttl: float) -> None:
        """The broker says it holds a report ``ttl`` seconds: heartbeat at a third of it."""
        self.policy.use_broker_ttl(ttl)
        logger.debug("the broker's TTL is %g s: heartbeat every %g s", ttl, self.policy.heartbeat)
        self._wake.set()

    def resend(self) -> None:
        """The broker may have forgotten our state: re-send it now if it is not idle."""
        self.policy.resend()
        self._wake.set()

    async def run(self) -> None:
        """Send what the policy says, forever (cancel to stop, then call :meth:`finish`)."""
        while True:
            self._wake = anyio.Event()  # before asking, so no observe() can be missed
            action = self.policy.next_action(self._clock())
            if isinstance(action, Post):
                await self._send(action)
                continue
            delay = math.inf if action.until is None else max(0.0, action.until - self._clock())
            with anyio.move_on_after(delay):
                await self._wake.wait()

    async def _send(self, action: Post) -> None:
        try:
            outcome = await self._post(action)
        except BaseException:
            self.policy.abandon(self._clock())  # cancelled mid-request: maybe applied
            raise
        self.policy.on_result(outcome, self._clock())

    async def _post(self, action: Post) -> Outcome:
        self.posts += 1
        body: dict[str, object] = {"state": action.state.value}
        if self.session is not None:
            body["session"] = self.session
            if action.background > 0 and self._counts_known:
                body["background"] = action.background
        if action.agent is not None and self._agents_known:
            body["agent"] = action.agent
        try:
            response = await self._client.post(ACTIVITY_PATH, json=body, timeout=self._timeout)
            if response.status_code == 400 and self._leave_out_refused(
                body, await response.aread(), response.text
            ):
                return await self._post(action)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            self._note_failure(str(exc) or type(exc).__name__)
            return Outcome.FAILED  # it never left
        except httpx.HTTPError as exc:
            self._note_failure(str(exc) or type(exc).__name__)
            return Outcome.UNKNOWN  # it may have reached the broker
        outcome = classify(response.status_code)
        if outcome is Outcome.OK:
            if self._failing:
                logger.info("broker reachable again; activity reported (%s)", action.state)
            self._failing = False
            logger.debug(
                "reported %s%s", action.state.value, " (heartbeat)" if action.heartbeat else ""
            )
        elif outcome is Outcome.UNAUTHORIZED:
            logger.error(
                "the broker refused our token (HTTP %d): activity reporting stopped; "
                "the session goes on",
                response.status_code,
            )
        elif outcome is Outcome.REJECTED:
            logger.warning(
                "the broker rejected an activity report (HTTP %d): %s",
                response.status_code,
                printable(response.text[:200]),
            )
        else:
            self._note_failure(f"HTTP {response.status_code}")
        return outcome

    def _leave_out_refused(self, body: Mapping[str, object], said: bytes, text: str) -> bool:
        """An older broker refused a field it does not know (its 400 names it): leave that
        field out of every report from now on, said once; whether one was."""
        if "agent" in body and b"agent" in said:
            self._agents_known = False
            known, instead = "agent records", "reporting without one"
        elif "background" in body and b"'background'" in said:
            self._counts_known = False
            known, instead = "background counts", "reporting the state alone"
        elif self.session is not None and b"session" in said:
            self.session = None
            known, instead = "sessions", "reporting as the member's one session"
        else:
            return False
        logger.warning(
            "the broker does not know %s (it refused one: %s); %s",
            known,
            printable(text[:200]),
            instead,
        )
        return True

    def _note_failure(self, why: str) -> None:
        if not self._failing:
            logger.warning("cannot report activity to the broker (%s); retrying with backoff", why)
        else:
            logger.debug("activity report failed again (%s)", why)
        self._failing = True

    async def finish(self, *, grace: float = 1.0) -> None:
        """Report idle if the broker may hold anything else, at once (a retry's backoff
        waits no more: it could outlast the grace, and the session's last word was never
        said); give up after ``grace`` s.

        Call it once :meth:`run` has been cancelled."""
        self.policy.end()  # idle, and what the session ran goes with it
        with anyio.move_on_after(grace):
            while True:
                action = self.policy.next_action(self._clock())
                if isinstance(action, Post):
                    await self._send(action)
                elif action.until is None:
                    return
                else:
                    await anyio.sleep(max(0.0, action.until - self._clock()))
        logger.warning("could not report idle to the broker in time; its TTL will reset us")
