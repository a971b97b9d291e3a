"""The history's rules (codex_presence.broker.history), with time passed in: which
transitions are kept, within which bounds, and what GET /history says of them."""

from __future__ import annotations

from typing import Any, cast

import pytest

from codex_presence._wire import ActivityState, Presence, presence
from codex_presence.broker.history import (
    HistoryLimits,
    MemoryHistory,
    MemoryRecorder,
    Transition,
    observed,
    parse_since,
    shown_state,
    summarize,
)
from codex_presence.broker.redis.history import entry_transition

T0 = 1_700_000_000_000


def _presence(activity: str | None, connected: int = 1, since: int | None = None) -> Presence:
    return presence(
        name="alice",
        connected=connected,
        created_at=0,
        last_seen=0,
        role=None,
        activity=ActivityState(activity or "idle"),
        activity_since=since,
    )


def test_shown_state_puts_a_report_before_the_connection() -> None:
    assert shown_state(_presence("blocked", connected=0, since=T0)) == "blocked"
    assert shown_state(_presence("working", since=T0)) == "working"
    assert shown_state(_presence(None)) == "idle"
    assert shown_state(_presence(None, connected=0)) == "offline"


def test_a_report_is_dated_by_its_since_a_lapse_by_the_clock() -> None:
    assert observed(_presence("blocked", since=T0), T0 + 50) == Transition(T0, "blocked")
    assert observed(_presence(None), T0 + 50) == Transition(T0 + 50, "idle")


def test_the_session_is_the_one_the_presence_says_is_in_that_state_since_then() -> None:
    p = cast(Any, _presence("blocked", since=T0))
    p["agents"] = [
        {"session": "s-2", "state": "blocked", "since": T0 - 5},
        {"session": "s-1", "state": "blocked", "since": T0},
        {"session": "s-3", "state": "working", "since": T0},
    ]
    assert observed(p, T0 + 9) == Transition(T0, "blocked", "s-1")
    p["agents"] = [{"session": "", "state": "blocked", "since": T0}, "junk"]
    assert observed(p, T0 + 9) == Transition(T0, "blocked")  # the anonymous session
    p["agents"] = "junk"
    assert observed(p, T0 + 9) == Transition(T0, "blocked")


def test_blocked_three_s_working_two_s_then_idle() -> None:
    transitions = [
        Transition(T0, "blocked"),
        Transition(T0 + 3000, "working"),
        Transition(T0 + 5000, "idle"),
    ]
    answer = summarize("alice", transitions, T0 - 60_000, T0 + 9000)
    assert answer["intervals"] == [
        {"state": "blocked", "since": T0, "until": T0 + 3000},
        {"state": "working", "since": T0 + 3000, "until": T0 + 5000},
        {"state": "idle", "since": T0 + 5000, "until": None},
    ]
    assert answer["totals"] == {"working": 2.0, "blocked": 3.0, "idle": 4.0, "offline": 0.0}
    assert answer["waits"] == {"count": 1, "longest": 3.0, "each": [3.0]}


def test_since_cuts_the_first_interval_and_drops_what_ended_before() -> None:
    transitions = [
        Transition(T0, "working"),
        Transition(T0 + 1000, "blocked"),
        Transition(T0 + 4000, "idle"),
    ]
    answer = summarize("alice", transitions, T0 + 2000, T0 + 4500)
    assert answer["intervals"] == [
        {"state": "blocked", "since": T0 + 2000, "until": T0 + 4000},
        {"state": "idle", "since": T0 + 4000, "until": None},
    ]
    assert answer["totals"]["blocked"] == 2.0
    assert answer["totals"]["working"] == 0.0


def test_a_wait_still_going_on_counts_up_to_now() -> None:
    answer = summarize("alice", [Transition(T0, "blocked")], 0, T0 + 7000)
    assert answer["intervals"] == [{"state": "blocked", "since": T0, "until": None}]
    assert answer["waits"] == {"count": 1, "longest": 7.0, "each": [7.0]}


def test_the_session_shows_when_the_transition_carried_one() -> None:
    answer = summarize("alice", [Transition(T0, "working", "s-1")], 0, T0 + 1)
    assert answer["intervals"][0]["session"] == "s-1"


def test_the_same_state_again_is_no_transition_and_time_never_goes_back() -> None:
    history = MemoryHistory()
    assert history.add("alice", Transition(T0, "working")) is None
    assert history.add("alice", Transition(T0 + 5, "working")) is None
    ended = history.add("alice", Transition(T0 - 100, "idle"))
    assert ended == Transition(T0, "working")
    assert history.transitions("alice") == [Transition(T0, "working"), Transition(T0, "idle")]


def test_the_caps_per_member_and_in_total_and_the_window() -> None:
    history = MemoryHistory(HistoryLimits(keep_ms=10_000, per_member=3, total=5))
    for i in range(6):
        history.add("alice", Transition(T0 + i, "working" if i % 2 else "idle"))
    assert [t.at for t in history.transitions("alice")] == [T0 + 3, T0 + 4, T0 + 5]
    for i in range(4):
        history.add("bob", Transition(T0 + 10 + i, "working" if i % 2 else "idle"))
    assert len(history) == 5
    assert [t.at for t in history.transitions("alice")] == [T0 + 4, T0 + 5]  # the team's oldest
    assert [t.at for t in history.transitions("bob")] == [T0 + 11, T0 + 12, T0 + 13]
    history.trim(T0 + 10_012)
    assert history.transitions("alice") == []
    assert [t.at for t in history.transitions("bob")] == [T0 + 12, T0 + 13]
    assert len(history) == 2


def test_the_recorder_tells_each_answered_wait_once() -> None:
    answered: list[float] = []
    recorder = MemoryRecorder(answered=answered.append)
    recorder.observe("alice", _presence("blocked", since=T0), T0)
    recorder.observe("alice", _presence("working", since=T0 + 3000), T0 + 3000)
    recorder.observe("alice", _presence("blocked", since=T0 + 4000), T0 + 4000)
    recorder.observe("alice", _presence(None, connected=0), T0 + 9000)
    assert answered == [3.0]  # going offline answers nothing


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        (["x"], "digits only"),
        (["-5"], "digits only"),
        (["1" * 16], "at most 15"),
        (["1", "2"], "more than once"),
    ],
)
def test_a_bad_since_is_refused_with_its_reason(values: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_since(values)


def test_since_given_or_not() -> None:
    assert parse_since([]) is None
    assert parse_since(["123"]) == 123


NAMES = frozenset({"alice"})


@pytest.mark.parametrize(
    "fields",
    [
        {b"m": b"mallory", b"s": b"idle", b"t": b"1"},
        {b"m": b"alice", b"s": b"asleep", b"t": b"1"},
        {b"m": b"alice", b"s": b"idle", b"t": b"1e9"},
        {b"m": b"alice", b"s": b"idle", b"t": b"0"},
        {b"m": b"alice", b"s": b"idle", b"t": b"1" * 16},
        {b"m": b"alice", b"s": b"idle"},
        {b"m": b"alice", b"s": b"idle", b"t": b"1", b"x": b"no spaces"},
        {b"m": b"\xff", b"s": b"idle", b"t": b"1"},
    ],
)
def test_an_entry_no_broker_writes_is_refused(fields: dict[bytes, bytes]) -> None:
    with pytest.raises(ValueError):
        entry_transition(fields, NAMES)


def test_an_entry_a_broker_writes_is_read() -> None:
    fields = {b"m": b"alice", b"s": b"blocked", b"t": str(T0).encode(), b"x": b"s-1"}
    assert entry_transition(fields, NAMES) == ("alice", Transition(T0, "blocked", "s-1"))
