"""The notification policy with the time passed in: the delay, once per spell, reminders
that never come more often than asked, "answered" only after an announcement, the member
filter, "session lost", and keys that brokers share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence import ActivityState
from codex_presence.core.notify_policy import (
    LOST_PER_MINUTE,
    Due,
    Notice,
    NotifyEvent,
    NotifyPolicy,
    Rule,
    Wait,
    event_words,
    message,
)

IDLE, WORKING, BLOCKED = ActivityState.IDLE, ActivityState.WORKING, ActivityState.BLOCKED
ALL = frozenset(NotifyEvent)
T0 = 1_800_000_000.0  # unix seconds


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def due(policy: NotifyPolicy, now: float) -> list[Notice]:
    action = policy.next_action(now)
    return list(action.notices) if isinstance(action, Due) else []


def test_blocked_past_the_delay_is_announced_once_with_who_and_since() -> None:
    policy = NotifyPolicy([Rule(after=60)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    assert policy.next_action(T0) == Wait(until=T0 + 60)
    assert policy.next_action(T0 + 59.9) == Wait(until=T0 + 60)
    [notice] = due(policy, T0 + 60)
    assert (notice.member, notice.event, notice.since_ms) == ("alice", NotifyEvent.BLOCKED, ms(T0))
    assert event_words(notice) == "needs input"
    assert policy.next_action(T0 + 3600) == Wait(until=None)  # once: no reminder asked for


def test_answered_within_the_delay_announces_nothing_at_all() -> None:
    policy = NotifyPolicy([Rule(after=60, on=ALL)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    policy.observe("alice", WORKING, ms(T0 + 5), T0 + 5)
    assert policy.next_action(T0 + 100) == Wait(until=None)


def test_a_heartbeat_of_the_same_spell_does_not_start_the_delay_again() -> None:
    policy = NotifyPolicy([Rule(after=60)])
    for t in (0, 10, 20, 30):
        policy.observe("alice", BLOCKED, ms(T0), T0 + t)
    assert len(due(policy, T0 + 60)) == 1


def test_answered_follows_an_announced_spell_for_targets_that_ask() -> None:
    policy = NotifyPolicy([Rule(after=10, on=ALL), Rule(after=10)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    assert [n.target for n in due(policy, T0 + 10)] == [0, 1]
    policy.observe("alice", WORKING, ms(T0 + 30), T0 + 30)
    [notice] = due(policy, T0 + 30)
    assert (notice.target, notice.event, notice.since_ms) == (0, NotifyEvent.ANSWERED, ms(T0 + 30))
    assert notice.blocked_since_ms == ms(T0)
    assert event_words(notice) == "back to work"
    _, body = message(notice, team="acme", now=T0 + 30)
    assert body == "alice is back to work since 08:00:30 UTC (waited 30 s) - team acme"


def test_a_spell_that_lapses_to_idle_reads_no_longer_needs_input() -> None:
    policy = NotifyPolicy([Rule(after=0, on=ALL)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    due(policy, T0)
    policy.observe("alice", IDLE, None, T0 + 40)
    [notice] = due(policy, T0 + 40)
    assert notice.since_ms == ms(T0 + 40)
    assert event_words(notice) == "no longer needs input"
    _, body = message(notice, team="acme", now=T0 + 40)
    # Before: "alice is no longer needs input since …".
    assert body == "alice no longer needs input since 08:00:40 UTC (waited 40 s) - team acme"


def test_reminders_come_every_repeat_and_a_late_look_sends_only_the_latest() -> None:
    policy = NotifyPolicy([Rule(after=60, repeat=600)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    first = due(policy, T0 + 60)
    assert policy.next_action(T0 + 61) == Wait(until=T0 + 660)
    second = due(policy, T0 + 660)
    late = due(policy, T0 + 60 + 600 * 5 + 1)  # slots 2..4 were missed: one notice, slot 5
    assert [len(first), len(second), len(late)] == [1, 1, 1]
    assert [n.key.rsplit(":", 1)[1] for n in first + second + late] == ["0", "1", "5"]


def test_the_member_filter_and_the_event_filter() -> None:
    policy = NotifyPolicy(
        [Rule(after=0, members=frozenset({"bob"})), Rule(after=0, on=frozenset())]
    )
    policy.observe("alice", BLOCKED, ms(T0), T0)
    assert policy.next_action(T0 + 100) == Wait(until=None)
    policy.observe("bob", BLOCKED, ms(T0), T0)
    assert [(n.target, n.member) for n in due(policy, T0)] == [(0, "bob")]


def test_session_lost_while_working_or_blocked_is_told_after_the_delay_and_ends_the_spell() -> None:
    policy = NotifyPolicy([Rule(after=60, on=ALL), Rule(after=60)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    policy.lost("alice", BLOCKED, ms(T0 + 5))
    assert policy.next_action(T0 + 5) == Wait(until=T0 + 65)  # the same delay as blocked
    [notice] = due(policy, T0 + 65)
    assert (notice.target, notice.event, notice.since_ms) == (0, NotifyEvent.LOST, ms(T0 + 5))
    assert event_words(notice) == "session lost"
    assert policy.next_action(T0 + 1000) == Wait(until=None)  # no "needs input" after death
    policy.lost("bob", IDLE, ms(T0 + 6))  # dying idle is no news
    assert policy.next_action(T0 + 1000) == Wait(until=None)


def test_a_lapse_another_broker_tells_of_ends_the_spell_without_a_word() -> None:
    policy = NotifyPolicy([Rule(after=60, on=ALL)])
    policy.observe("alice", BLOCKED, ms(T0), T0)
    [announced] = due(policy, T0 + 60)
    assert announced.event is NotifyEvent.BLOCKED
    policy.lapsed("alice")
    policy.observe("alice", IDLE, None, T0 + 70)  # the lapse, as the roster shows it
    assert policy.next_action(T0 + 1000) == Wait(until=None)  # no "no longer needs input"


def test_a_session_lost_is_named_by_its_session_and_start_not_by_when_it_was_seen() -> None:
    """Two brokers that see one death at different times claim it under one name; the
    body says since when the state held."""
    a, b = (NotifyPolicy([Rule(on=ALL)], target_ids=["t1"]) for _ in range(2))
    a.lost("alice", BLOCKED, ms(T0 + 70), since_ms=ms(T0), session="S1")
    b.lost("alice", BLOCKED, ms(T0 + 71), since_ms=ms(T0), session="S1")
    [first], [second] = due(a, T0 + 130), due(b, T0 + 131)
    assert first.key == second.key == f"t1:alice:lost:S1.{ms(T0)}:0"
    a.lost("alice", WORKING, ms(T0 + 90), since_ms=ms(T0 + 80), session="S1")
    assert [n.key for n in due(a, T0 + 150)] != [first.key]  # a later death is news
    _, body = message(second, team="acme", now=T0 + 71)
    assert body.endswith("while blocked (since 08:00:00 UTC, 1 min 11 s) - team acme"), body


def test_two_policies_fed_alike_name_every_event_alike() -> None:
    """What lets brokers sharing Redis claim one event under one name."""
    a, b = (NotifyPolicy([Rule(after=5, on=ALL)], target_ids=["t1"]) for _ in range(2))
    for policy, seen in ((a, T0 + 0.2), (b, T0 + 0.7)):  # each sees it a bit later
        policy.observe("alice", BLOCKED, ms(T0), seen)
    assert [n.key for n in due(a, T0 + 5)] == [n.key for n in due(b, T0 + 6)]


def test_bad_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="after"):
        Rule(after=-1)
    with pytest.raises(ValueError, match="repeat"):
        Rule(repeat=float("nan"))


# -- properties over any sequence of reports ---------------------------------------------

STATES = st.sampled_from([IDLE, WORKING, BLOCKED])
STEP = st.tuples(st.sampled_from(["alice", "bob"]), STATES, st.floats(0, 120))


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(STEP, max_size=40),
    after=st.floats(0, 90),
    repeat=st.sampled_from([0.0, 30.0, 300.0]),
)
def test_no_notice_early_none_twice_none_unasked(
    steps: list[tuple[str, ActivityState, float]], after: float, repeat: float
) -> None:
    rules = [
        Rule(after=after, repeat=repeat, on=ALL),
        Rule(after=after, members=frozenset({"bob"})),
    ]
    policy = NotifyPolicy(rules)
    now = T0
    current: dict[str, tuple[ActivityState, int | None]] = {}
    keys: set[str] = set()
    announced: set[tuple[int, str, int]] = set()
    last_blocked: dict[tuple[int, str, int], float] = {}
    for member, state, gap in steps:
        action = policy.next_action(now)
        if isinstance(action, Wait):
            assert action.until is None or action.until > now
        for notice in action.notices if isinstance(action, Due) else ():
            assert notice.key not in keys, "a notice twice"
            keys.add(notice.key)
            rule = rules[notice.target]
            assert rule.wants(notice.member, notice.event)
            if notice.event is NotifyEvent.BLOCKED:
                assert current[notice.member] == (BLOCKED, notice.since_ms)
                assert now >= notice.since_ms / 1000 + after
                spell = (notice.target, notice.member, notice.since_ms)
                if spell in last_blocked:
                    assert repeat > 0 and now - last_blocked[spell] >= repeat - 1e-6
                last_blocked[spell] = now
                announced.add(spell)
            elif notice.event is NotifyEvent.ANSWERED:
                assert notice.blocked_since_ms is not None
                assert (notice.target, notice.member, notice.blocked_since_ms) in announced
        previous = current.get(member, (IDLE, None))
        since = None if state is IDLE else (previous[1] if previous[0] is state else ms(now))
        current[member] = (state, since)
        policy.observe(member, state, since, now)
        now += gap


def test_a_member_back_within_the_delay_after_a_death_pings_nobody() -> None:
    """A runner that died and came back (working or blocked since after the death) before
    the target's delay ran out is no news, as an approval answered at once."""
    policy = NotifyPolicy([Rule(after=30, on=ALL)])
    policy.lost("alice", WORKING, ms(T0 + 5), since_ms=ms(T0), session="S1")
    policy.observe("alice", WORKING, ms(T0 + 8), T0 + 8)  # a new session, since after it
    assert policy.next_action(T0 + 1000) == Wait(until=None)
    policy.lost("bob", WORKING, ms(T0 + 5), since_ms=ms(T0), session="S2")
    policy.observe("bob", WORKING, ms(T0 - 100), T0 + 8)  # another session, from before
    assert [n.member for n in due(policy, T0 + 35)] == ["bob"]


def test_session_lost_notices_of_one_member_are_limited_per_minute() -> None:
    """One member faking runner deaths made a broker send 316 notices a minute: at most
    LOST_PER_MINUTE per member and target in any minute, the rest dropped and counted;
    another member's are their own."""
    policy = NotifyPolicy([Rule(after=0, on=ALL)])
    told = []
    for i in range(20):  # a death every 3 s for a minute
        at = T0 + 3 * i
        policy.lost("mallory", WORKING, ms(at), since_ms=ms(at - 1), session=f"S{i}")
        told += due(policy, at)
    assert len([n for n in told if n.member == "mallory"]) == LOST_PER_MINUTE
    assert policy.dropped == {"mallory": 20 - LOST_PER_MINUTE}
    policy.lost("alice", WORKING, ms(T0 + 59), since_ms=ms(T0), session="A1")
    assert [n.member for n in due(policy, T0 + 59)] == ["alice"]
    policy.lost("mallory", WORKING, ms(T0 + 120), since_ms=ms(T0 + 119), session="S99")
    assert [n.member for n in due(policy, T0 + 120)] == ["mallory"]  # a minute on: news


# -- a member with several agents: the notices follow the wait (issue 34) --------------------


def test_one_agent_answered_while_another_works_says_the_wait_it_ended() -> None:
    """Agent A works since T0; agent B blocks at T0+10 (the member blocked since then) and
    is answered at T0+17: the member is working again, its since A's (T0). Before: "back to
    work since <T0> (waited 0 s)"; the wait's end is when it ended, and how long it was."""
    policy = NotifyPolicy([Rule(after=5, on=ALL)])
    policy.observe("duo", WORKING, ms(T0), T0)
    policy.observe("duo", BLOCKED, ms(T0 + 10), T0 + 10, [_agent("claude", "api", "make")])
    assert [n.event for n in due(policy, T0 + 15)] == [NotifyEvent.BLOCKED]
    policy.observe("duo", WORKING, ms(T0), T0 + 17)  # the earliest working: A's
    [answered] = due(policy, T0 + 17)
    assert answered.event is NotifyEvent.ANSWERED
    assert (answered.blocked_since_ms, answered.since_ms) == (ms(T0 + 10), ms(T0 + 17))
    _, body = message(answered, team="acme", now=T0 + 17)
    assert "(waited 7 s)" in body and "claude in api: approve `make`" in body, body


def test_two_agents_waiting_in_turn_are_one_wait_told_once() -> None:
    """A blocks at T0, B at T0+2; A is answered at T0+8 while B waits (the member's since
    moves to B's); B is answered at T0+12. Before: a false "no longer needs input (waited
    3 s)" and a second "needs input" for one continuous wait. Now: one "needs input", one
    "answered" at the end, the wait's whole length."""
    policy = NotifyPolicy([Rule(after=5, on=ALL)])
    policy.observe("duo", BLOCKED, ms(T0), T0)
    policy.observe("duo", BLOCKED, ms(T0), T0 + 2)  # B too: the earliest is still A's
    assert [n.event for n in due(policy, T0 + 5)] == [NotifyEvent.BLOCKED]
    policy.observe("duo", BLOCKED, ms(T0 + 2), T0 + 8)  # A answered: B's since now
    assert due(policy, T0 + 8) == [] and due(policy, T0 + 60) == []
    policy.observe("duo", WORKING, ms(T0 + 12), T0 + 12)
    [answered] = due(policy, T0 + 12)
    assert answered.event is NotifyEvent.ANSWERED
    assert (answered.blocked_since_ms, answered.since_ms) == (ms(T0), ms(T0 + 12))


def _agent(client: str, project: str, program: str) -> dict[str, object]:
    return {
        "session": "s1",
        "state": "blocked",
        "since": 0,
        "client": client,
        "project": project,
        "waits": {"kind": "command", "program": program},
    }
