"""When to tell the broker what: the activity reporter's policy, sans-I/O.

The design's rules ("Activity presence" in presence-design.md), as a state machine that is
fed the derived state, the outcome of each POST and the time, and answers what to do next:

* on every transition, POST the new state at once; while non-idle, re-POST every
  ``heartbeat`` seconds so the broker's TTL never lapses mid-turn (a third of the TTL: 10 s
  for the default 30 s, and whatever the broker says its TTL is, once it has said it); on
  going idle, POST idle once, then nothing — an idle member sends nothing at all;
* the session's background count (commands or tasks it left running) travels with the
  state: a change of the count alone is a report too, and a session with a count above 0
  heartbeats like a busy one, idle or not, so that the broker's TTL never drops the count
  of a live runner ("idle and no background" is the one silence);
* the session's agent record (which client, where, what it waits on: issue 32's
  ``agent``; :mod:`codex_presence.core.agent_record`) goes with the first report and
  again with the first report after it changed; a change of it is a report of its own
  only when the truth is not the silence (blocked on one approval, then on another: the
  second is news), so an idle session stays silent and its record waits for its next
  report. When the broker may have forgotten, or the TTL lapsed, it is sent again;
* when the broker may have forgotten (the subscription reconnected: it may have
  restarted empty), a non-idle state is re-sent at once, not at the next heartbeat;
* one request in flight at a time; the latest state wins (states that were superseded while
  a request was in flight are never sent);
* a failed POST is retried with capped exponential backoff and jitter for as long as what
  the broker holds differs from the truth; a success resets the backoff; at the session's
  end (:meth:`ReportPolicy.end`) idle is tried at once, whatever the backoff said: the
  end's tries are bounded by the caller, and a wait could outlast them;
* a POST whose outcome is unknown (it timed out or was cancelled after it went out) may
  have been applied: until a success says otherwise the broker may hold that state too, so
  a different truth (idle, typically, at the end of a session) is still reported;
* a 401/403 stops reporting for good (the token is wrong; retrying cannot help), and a
  rejected body (another 4xx) is not retried until the next transition;
* a *passing* state (the mapping knows its source is on the way to another within tens of
  milliseconds: codex between a person's "no, stop" and the end of the turn) is sent only
  once it has lasted ``passing_hold`` seconds: the state that follows it in time replaces
  it unsent, so no one is shown a spinner the person at the agent never saw. Every other
  state, blocked and an approval's working included, is sent at once as ever.

Why here, and not in the page or the mapping: only the mapping sees the person's answer,
so only it can tell a passing working from the working of an approved command, whose
report must not wait (a wait for any working after blocked would delay every approval);
but the mapping has no clock, and the wait is about what the broker is told — the page,
the ``roster`` command and the MCP tool all read the broker, so hiding it in the page alone
would leave the others flashing.

:class:`ReportPolicy` knows no sockets or clocks: ``now`` is passed in, which is what lets
the tests check heartbeat and backoff timings exactly. The I/O shell is
:mod:`codex_presence.client.reporter`; the retry schedule is :mod:`codex_presence.core.backoff`'s.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from codex_presence._wire import DEFAULT_TTL, HEARTBEAT, ActivityState, heartbeat_for
from codex_presence.core.backoff import Backoff

__all__ = ["PASSING_HOLD", "Outcome", "Post", "ReportPolicy", "Wait"]

PASSING_HOLD = 0.3
"""Seconds a passing state is held back: past the 12-50 ms codex takes to end a turn after
a "no, stop" (and a loaded machine's delays), short enough that a turn that goes on after
all shows working within a third of a second."""


class Outcome(enum.Enum):
    """How a POST ended, as far as the policy cares."""

    OK = "ok"
    """2xx: the broker holds what was sent."""
    UNAUTHORIZED = "unauthorized"
    """401/403: stop reporting."""
    REJECTED = "rejected"
    """Another 4xx: the request itself is wrong; do not retry the same thing."""
    FAILED = "failed"
    """No connection, 5xx, 429: not applied; retry with backoff."""
    UNKNOWN = "unknown"
    """Timed out or broken after the request went out: maybe applied; retry with backoff."""


@dataclass(frozen=True, slots=True)
class Post:
    """Send this state now."""

    state: ActivityState
    heartbeat: bool
    """True when the state is unchanged since the last success: a TTL refresh."""
    background: int = 0
    """The session's background count, sent with the state."""
    agent: Mapping[str, Any] | None = None
    """The agent record to send with it (None: the broker holds the latest already)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to send until ``until`` (None: until the state changes)."""

    until: float | None


@dataclass(slots=True)
class ReportPolicy:
    """Decides every POST of one member's activity reporter."""

    heartbeat: float = HEARTBEAT
    broker_ttl: float = DEFAULT_TTL
    """After this long without a successful report the broker holds idle by itself."""
    backoff: Backoff = field(default_factory=Backoff)
    truth: ActivityState = ActivityState.IDLE
    """The latest derived state."""
    held: ActivityState = ActivityState.IDLE
    """What the broker holds as far as we know (absence of a report is idle)."""
    held_since: float = 0.0
    """When the broker last accepted a report (the TTL runs from there)."""
    background: int = 0
    """The latest background count."""
    held_background: int = 0
    """The count the broker holds as far as we know."""
    agent: Mapping[str, Any] | None = None
    """The latest agent record (None: none to send)."""
    held_agent: Mapping[str, Any] | None = None
    """The record the broker holds as far as we know."""
    in_flight: ActivityState | None = None
    in_flight_background: int = 0
    in_flight_agent: Mapping[str, Any] | None = None
    uncertain: ActivityState | None = None
    """A state the broker may hold besides :attr:`held`: a POST of it ended without an
    answer, and no success came since."""
    uncertain_since: float = 0.0
    stopped: bool = False
    passing_hold: float = PASSING_HOLD
    _passing_until: float | None = None
    _retry_at: float | None = None
    _rejected: tuple[ActivityState, int] | None = None

    def observe(self, state: ActivityState, *, passing: bool = False, now: float = 0.0) -> None:
        """The derived state changed (or was re-announced) at ``now``; ``passing``: the
        mapping knows it is on the way to another (see the module doc)."""
        if state is not self.truth:
            self._rejected = None  # a new state deserves a new try
            self._passing_until = now + self.passing_hold if passing else None
        elif not passing:
            self._passing_until = None
        self.truth = state

    def observe_background(self, count: int) -> None:
        """The session's background count is now ``count``."""
        if count != self.background:
            self._rejected = None
        self.background = count

    def observe_agent(self, agent: Mapping[str, Any] | None) -> None:
        """The session's agent record is now ``agent``."""
        if agent != self.agent:
            self._rejected = None
        self.agent = agent

    @property
    def _agent_news(self) -> bool:
        return self.agent is not None and self.agent != self.held_agent

    @property
    def _quiet(self) -> bool:
        """Whether the truth needs no heartbeat: idle, with nothing in the background."""
        return self.truth is ActivityState.IDLE and self.background == 0

    def use_broker_ttl(self, ttl: float) -> None:
        """The broker holds a report ``ttl`` seconds: heartbeat at a third of that."""
        self.broker_ttl = ttl
        self.heartbeat = heartbeat_for(ttl)

    def resend(self) -> None:
        """The broker may have forgotten what it held (it restarted): a non-idle truth is
        sent at once, whatever the backoff said. Idle needs nothing: a broker that
        forgot holds idle, and one that did not still gets whatever is pending (the agent
        record goes again with the next report)."""
        self.held_agent = None
        if self.stopped or self._quiet:
            return
        self.held = ActivityState.IDLE
        self.held_background = 0
        self._retry_at = None
        self.backoff.reset()

    def end(self) -> None:
        """The session ends: the truth is idle with nothing left running, and it is said
        now, not when the backoff of a failed POST says (the broker may well be back; the
        caller bounds the tries, and a failure within them backs off again)."""
        self.observe(ActivityState.IDLE)
        self.observe_background(0)
        self._retry_at = None

    def next_action(self, now: float) -> Post | Wait:
        """What to do at ``now``. Never a second Post while one is in flight."""
        if self.stopped or self.in_flight is not None:
            return Wait(until=None)
        if self._passing_until is not None:
            if now < self._passing_until:
                return Wait(until=self._passing_until)
            self._passing_until = None  # it lasted: a state like any other now
        if (
            self.held is not ActivityState.IDLE or self.held_background
        ) and now >= self.held_since + self.broker_ttl:
            self.held = ActivityState.IDLE  # the broker's TTL has lapsed: it holds idle now
            self.held_background = 0
            self.held_agent = None
        if self.uncertain is not None and now >= self.uncertain_since + self.broker_ttl:
            self.uncertain = None  # even if it was applied, it has lapsed by now
        differs = (
            self.truth is not self.held
            or self.background != self.held_background
            or (self.uncertain is not None and self.uncertain is not self.truth)
            or (self._agent_news and not self._quiet)
        )
        if self._retry_at is not None and now < self._retry_at:
            if self._quiet and not differs:
                return Wait(until=None)
            return Wait(until=self._retry_at)
        if differs:
            if (self.truth, self.background) == self._rejected:
                return Wait(until=None)
            return self._post(heartbeat=False)
        self._retry_at = None
        if self._quiet:
            return Wait(until=None)  # silence when idle with nothing in the background
        due = self.held_since + self.heartbeat
        if now >= due:
            return self._post(heartbeat=True)
        return Wait(until=due)

    def _post(self, *, heartbeat: bool) -> Post:
        self.in_flight = self.truth
        self.in_flight_background = self.background
        self.in_flight_agent = self.agent if self._agent_news else None
        return Post(
            state=self.truth,
            heartbeat=heartbeat,
            background=self.background,
            agent=self.in_flight_agent,
        )

    def on_result(self, outcome: Outcome, now: float) -> None:
        """The POST of :attr:`in_flight` ended with ``outcome`` at ``now``."""
        sent, self.in_flight = self.in_flight, None
        if sent is None:
            return
        if outcome is Outcome.OK:
            self.held, self.held_since = sent, now
            self.held_background = self.in_flight_background
            if self.in_flight_agent is not None:
                self.held_agent = self.in_flight_agent
            self.uncertain = None
            self._retry_at = None
            self.backoff.reset()
        elif outcome is Outcome.UNAUTHORIZED:
            self.stopped = True
        elif outcome is Outcome.REJECTED:
            self._rejected = (sent, self.in_flight_background)
        else:
            if outcome is Outcome.UNKNOWN:
                self.uncertain, self.uncertain_since = sent, now
            self._retry_at = now + self.backoff.next_delay()

    def abandon(self, now: float) -> None:
        """The request in flight was cancelled: it may have been applied, and a new
        request may be sent."""
        sent, self.in_flight = self.in_flight, None
        if sent is not None:
            self.uncertain, self.uncertain_since = sent, now

    @property
    def settled(self) -> bool:
        """True when the broker holds the truth (or reporting has stopped)."""
        return self.stopped or (
            self.in_flight is None
            and self.held is self.truth
            and self.held_background == self.background
            and self.uncertain in (None, self.truth)
            and (not self._agent_news or self._quiet)
        )
