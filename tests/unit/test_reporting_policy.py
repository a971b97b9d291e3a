"""The reporter's policy with an injected clock: transitions, heartbeat, silence when idle,
coalescing, backoff and recovery, 401, rejected bodies, the broker's own TTL."""

from __future__ import annotations

from codex_presence import ActivityState
from codex_presence.core.backoff import Backoff
from codex_presence.core.report_policy import PASSING_HOLD, Outcome, Post, ReportPolicy, Wait

IDLE, WORKING, BLOCKED = ActivityState.IDLE, ActivityState.WORKING, ActivityState.BLOCKED


def policy(**kwargs: object) -> ReportPolicy:
    # Jitter pinned to its upper bound so that delays are exact.
    return ReportPolicy(backoff=Backoff(base=0.25, cap=5.0, rand=lambda: 1.0), **kwargs)  # type: ignore[arg-type]


def send(p: ReportPolicy, now: float, outcome: Outcome = Outcome.OK) -> Post:
    action = p.next_action(now)
    assert isinstance(action, Post), action
    p.on_result(outcome, now)
    return action


def test_idle_member_sends_nothing_ever() -> None:
    p = policy()
    for now in (0.0, 10.0, 1000.0):
        assert p.next_action(now) == Wait(until=None)


def test_transition_is_posted_at_once_then_heartbeat_every_10s_then_idle_once() -> None:
    p = policy()
    p.observe(WORKING)
    assert send(p, 1.0) == Post(WORKING, heartbeat=False)
    assert p.next_action(5.0) == Wait(until=11.0)
    assert send(p, 11.0) == Post(WORKING, heartbeat=True)
    assert p.next_action(12.0) == Wait(until=21.0)
    p.observe(IDLE)
    assert send(p, 13.0) == Post(IDLE, heartbeat=False)
    assert p.next_action(100.0) == Wait(until=None)


def test_blocked_is_a_transition_and_is_heartbeated_too() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0)
    p.observe(BLOCKED)
    assert send(p, 0.5) == Post(BLOCKED, heartbeat=False)
    assert send(p, 10.5) == Post(BLOCKED, heartbeat=True)


def test_one_request_in_flight_and_the_latest_state_wins() -> None:
    p = policy()
    p.observe(WORKING)
    assert p.next_action(0.0) == Post(WORKING, heartbeat=False)
    # While it is in flight: blocked, then working, then idle — nothing else is sent.
    for state in (BLOCKED, WORKING, IDLE):
        p.observe(state)
        assert p.next_action(0.1) == Wait(until=None)
    p.on_result(Outcome.OK, 0.2)
    assert send(p, 0.2) == Post(IDLE, heartbeat=False)  # blocked was superseded: never sent
    assert p.settled


def test_failures_back_off_exponentially_capped_and_recover() -> None:
    p = policy()
    p.observe(WORKING)
    delays = []
    now = 0.0
    for _ in range(8):
        send(p, now, Outcome.FAILED)
        wait = p.next_action(now)
        assert isinstance(wait, Wait) and wait.until is not None
        delays.append(round(wait.until - now, 6))
        now = wait.until
    assert delays == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    send(p, now, Outcome.OK)  # the broker is back
    assert p.settled and p.backoff.attempts == 0
    assert p.next_action(now) == Wait(until=now + 10.0)


def test_jitter_stays_within_base_and_ceiling() -> None:
    backoff = Backoff(base=0.25, cap=5.0, rand=lambda: 0.0)
    assert [backoff.next_delay() for _ in range(3)] == [0.25, 0.25, 0.25]
    half = Backoff(base=1.0, cap=8.0, rand=lambda: 0.5)
    assert [half.next_delay() for _ in range(5)] == [1.0, 1.5, 2.5, 4.5, 4.5]


def test_new_transition_during_backoff_waits_for_the_backoff() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0, Outcome.FAILED)
    p.observe(BLOCKED)
    assert p.next_action(0.1) == Wait(until=0.25)
    assert send(p, 0.25) == Post(BLOCKED, heartbeat=False)


def test_unauthorized_stops_reporting_for_good() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0, Outcome.UNAUTHORIZED)
    p.observe(BLOCKED)
    assert p.stopped and p.settled
    assert p.next_action(100.0) == Wait(until=None)


def test_rejected_body_is_not_retried_until_the_next_transition() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0, Outcome.REJECTED)
    assert p.next_action(50.0) == Wait(until=None)
    p.observe(BLOCKED)
    assert send(p, 51.0) == Post(BLOCKED, heartbeat=False)


def test_idle_after_an_outage_longer_than_the_ttl_sends_nothing() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0)
    send(p, 10.0, Outcome.FAILED)  # the heartbeat fails: the broker is gone
    p.observe(IDLE)
    # The broker's 30 s TTL ran from the last success at 0.0: by 31.0 it holds idle itself.
    assert p.next_action(31.0) == Wait(until=None)
    assert p.held is IDLE


def test_idle_before_the_ttl_lapses_is_retried() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0)
    p.observe(IDLE)
    send(p, 1.0, Outcome.FAILED)
    assert p.next_action(1.1) == Wait(until=1.25)
    assert send(p, 1.25) == Post(IDLE, heartbeat=False)
    assert p.settled


def test_a_report_that_may_have_landed_is_followed_by_idle() -> None:
    """Timed out after it went out: the broker may hold working, so idle is reported."""
    p = policy()
    p.observe(WORKING)
    send(p, 0.0, Outcome.UNKNOWN)
    p.observe(IDLE)
    assert not p.settled
    assert p.next_action(0.1) == Wait(until=0.25)  # after the backoff, as any retry
    assert send(p, 0.25) == Post(IDLE, heartbeat=False)
    assert p.settled
    assert p.next_action(100.0) == Wait(until=None)


def test_a_report_that_never_left_is_not_followed_by_idle() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0, Outcome.FAILED)  # no connection: the broker cannot hold it
    p.observe(IDLE)
    assert p.settled
    assert p.next_action(0.3) == Wait(until=None)


def test_a_cancelled_report_counts_as_maybe_applied() -> None:
    p = policy()
    p.observe(BLOCKED)
    assert p.next_action(0.0) == Post(BLOCKED, heartbeat=False)
    p.abandon(0.1)
    p.observe(IDLE)
    assert send(p, 0.1) == Post(IDLE, heartbeat=False)
    assert p.settled


def test_a_maybe_applied_report_lapses_with_the_brokers_ttl() -> None:
    p = policy()
    p.observe(WORKING)
    send(p, 0.0, Outcome.UNKNOWN)
    p.observe(IDLE)
    assert p.next_action(30.5) == Wait(until=None)  # even if applied at 0.0, lapsed by now
    assert p.settled


def test_the_heartbeat_is_a_third_of_the_ttl_the_broker_states() -> None:
    p = policy()
    assert p.heartbeat == 10.0  # a third of the default 30 s, until the broker says
    p.use_broker_ttl(2.0)
    p.observe(WORKING)
    send(p, 0.0)
    assert p.next_action(0.1) == Wait(until=2.0 / 3)
    assert send(p, 2.0 / 3) == Post(WORKING, heartbeat=True)


def test_resend_posts_a_non_idle_state_at_once_and_never_idle() -> None:
    """The subscription came back: the broker may have restarted empty."""
    p = policy()
    p.observe(BLOCKED)
    send(p, 0.0)
    assert p.next_action(1.0) == Wait(until=10.0)
    p.resend()
    assert send(p, 1.0) == Post(BLOCKED, heartbeat=False)  # now, not at 10.0
    assert p.next_action(2.0) == Wait(until=11.0)
    # While a failed POST waits out its backoff, a resend goes at once too.
    p.observe(WORKING)
    assert send(p, 3.0, Outcome.FAILED) == Post(WORKING, heartbeat=False)
    assert p.next_action(3.1) == Wait(until=3.25)
    p.resend()
    assert send(p, 3.1) == Post(WORKING, heartbeat=False)
    # Idle needs nothing: a broker that forgot holds idle.
    p.observe(IDLE)
    send(p, 4.0)
    p.resend()
    assert p.next_action(4.1) == Wait(until=None)


# -- a passing state ----------------------------------------------------------------------------


def blocked_at(p: ReportPolicy, now: float) -> None:
    p.observe(WORKING, now=now)
    send(p, now)
    p.observe(BLOCKED, now=now)
    assert send(p, now) == Post(BLOCKED, heartbeat=False)  # blocked: at once


def test_a_passing_working_replaced_within_the_hold_is_never_sent() -> None:
    p = policy()
    blocked_at(p, 0.0)
    p.observe(WORKING, passing=True, now=5.0)
    assert p.next_action(5.0) == Wait(until=5.0 + PASSING_HOLD)
    p.observe(IDLE, now=5.05)  # codex ended the turn 50 ms later
    assert send(p, 5.05) == Post(IDLE, heartbeat=False)
    assert p.next_action(5.0 + PASSING_HOLD) == Wait(until=None)
    assert p.settled


def test_a_passing_working_that_lasts_is_sent_after_the_hold() -> None:
    p = policy()
    blocked_at(p, 0.0)
    p.observe(WORKING, passing=True, now=5.0)
    assert p.next_action(5.1) == Wait(until=5.0 + PASSING_HOLD)
    assert send(p, 5.0 + PASSING_HOLD) == Post(WORKING, heartbeat=False)
    assert p.next_action(6.0) == Wait(until=5.0 + PASSING_HOLD + 10.0)  # heartbeats as ever


def test_a_working_that_is_not_passing_is_sent_at_once_after_blocked() -> None:
    p = policy()
    blocked_at(p, 0.0)
    p.observe(WORKING, now=5.0)  # an approval: the command runs
    assert send(p, 5.0) == Post(WORKING, heartbeat=False)


def test_a_passing_working_that_turns_real_is_sent_at_once() -> None:
    p = policy()
    blocked_at(p, 0.0)
    p.observe(WORKING, passing=True, now=5.0)
    p.observe(WORKING, now=5.02)  # the mapping learnt the turn goes on
    assert send(p, 5.02) == Post(WORKING, heartbeat=False)


def test_blocked_after_a_passing_working_is_sent_at_once() -> None:
    p = policy()
    blocked_at(p, 0.0)
    p.observe(WORKING, passing=True, now=5.0)
    p.observe(BLOCKED, now=5.01)
    assert p.next_action(5.01) == Wait(until=10.0)  # the broker holds blocked already
    assert p.settled


# -- the background count (issue 23, part 3) -------------------------------------------------


def test_a_background_count_is_reported_and_heartbeats_while_idle() -> None:
    """A change of the count alone is a report; an idle session with a count heartbeats so
    that the broker's TTL does not drop it; idle with no count goes silent again."""
    p = policy()
    p.observe(WORKING)
    assert send(p, 0.0) == Post(WORKING, heartbeat=False)
    p.observe_background(1)
    assert send(p, 1.0) == Post(WORKING, heartbeat=False, background=1)
    p.observe(IDLE)
    assert send(p, 2.0) == Post(IDLE, heartbeat=False, background=1)
    assert p.next_action(3.0) == Wait(until=12.0)  # idle, but a command runs
    assert send(p, 12.0) == Post(IDLE, heartbeat=True, background=1)
    p.observe_background(0)
    assert send(p, 13.0) == Post(IDLE, heartbeat=False, background=0)
    assert p.settled
    assert p.next_action(1000.0) == Wait(until=None)  # idle and no background: silence


def test_a_count_is_resent_when_the_broker_may_have_forgotten() -> None:
    p = policy()
    p.observe_background(2)
    assert send(p, 0.0) == Post(IDLE, heartbeat=False, background=2)
    p.resend()
    assert send(p, 1.0) == Post(IDLE, heartbeat=False, background=2)


def test_a_rejected_count_waits_for_the_next_change() -> None:
    p = policy()
    p.observe_background(3)
    assert send(p, 0.0, Outcome.REJECTED) == Post(IDLE, heartbeat=False, background=3)
    assert p.next_action(100.0) == Wait(until=None)
    p.observe_background(2)
    assert send(p, 101.0) == Post(IDLE, heartbeat=False, background=2)
