"""The activity tracker and the connection registry, with plain data and a hand-moved clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codex_presence.broker.connections import Connection, ConnectionRegistry
from codex_presence.broker.record import Report, SessionRecord
from codex_presence.broker.tracker import ENDED_KEPT, ActivityTracker
from codex_presence.core.activity import ActivityState
from tests.support.broker_harness import FakeClock


def report(
    tracker: ActivityTracker,
    name: str,
    state: ActivityState,
    ttl: float | None = None,
    *,
    now_ms: int = 0,
    since: int | None = None,
    session: str = "",
    background: int = 0,
    grace: bool = False,
) -> bool:
    """A report to ``tracker`` (the memory store's way), or, given a since, a TTL or a
    grace, a record put as a shared store's mirror puts it."""
    if since is None and ttl is None and not grace:
        return tracker.report(name, Report(state, session, background), now_ms)
    record = SessionRecord(
        state, now_ms if since is None else since, background, now_ms if background else 0
    )
    return tracker.put(name, session, record, ttl, grace=grace)


def shown(tracker: ActivityTracker) -> tuple[object, ...]:
    """Member a's activity, background, sessions (without the agents)."""
    entry = tracker.entry("a")
    return (entry.state, entry.since, entry.sessions, entry.background)


IDLE, WORKING, BLOCKED = ActivityState.IDLE, ActivityState.WORKING, ActivityState.BLOCKED


def test_idle_is_absence() -> None:
    tracker = ActivityTracker(clock=FakeClock())
    assert tracker.get("alice") is IDLE
    assert report(tracker, "alice", IDLE) is False
    assert len(tracker) == 0
    assert report(tracker, "alice", WORKING) is True
    assert len(tracker) == 1
    assert report(tracker, "alice", IDLE) is True
    assert len(tracker) == 0


def test_only_changes_are_changes() -> None:
    tracker = ActivityTracker(clock=FakeClock())
    assert report(tracker, "a", WORKING) is True
    assert report(tracker, "a", WORKING) is False  # a heartbeat
    assert report(tracker, "a", BLOCKED) is True
    assert report(tracker, "a", WORKING) is True


def test_ttl_lapses_on_read_without_any_sweeper() -> None:
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    report(tracker, "a", WORKING)
    clock.advance(29.999)
    assert tracker.get("a") is WORKING
    clock.advance(0.001)
    assert tracker.get("a") is IDLE
    assert len(tracker) == 0  # the read dropped it


def test_heartbeat_extends_and_a_lapsed_report_reads_as_a_change() -> None:
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    report(tracker, "a", BLOCKED)
    clock.advance(20)
    assert report(tracker, "a", BLOCKED) is False
    clock.advance(20)
    assert tracker.get("a") is BLOCKED
    clock.advance(10)
    assert report(tracker, "a", BLOCKED) is True  # it had lapsed to idle


def test_since_is_kept_by_a_heartbeat_and_moved_by_a_change() -> None:
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    assert tracker.since("a") is None
    report(tracker, "a", WORKING, now_ms=1_000)
    clock.advance(20)
    report(tracker, "a", WORKING, now_ms=21_000)  # a heartbeat
    assert tracker.since("a") == 1_000
    report(tracker, "a", BLOCKED, now_ms=22_000)
    assert tracker.since("a") == 22_000
    clock.advance(30)  # nobody heartbeats: it lapses, and the next report starts anew
    assert tracker.since("a") is None
    report(tracker, "a", BLOCKED, now_ms=60_000)
    assert tracker.since("a") == 60_000
    report(tracker, "a", BLOCKED, now_ms=61_000, since=5)  # a shared store's record says
    assert tracker.since("a") == 5
    report(tracker, "a", IDLE, now_ms=62_000)
    assert tracker.since("a") is None


def test_fractional_ttl_and_bad_ttl() -> None:
    clock = FakeClock()
    tracker = ActivityTracker(ttl=0.25, clock=clock)
    report(tracker, "a", WORKING)
    clock.advance(0.24)
    assert tracker.get("a") is WORKING
    clock.advance(0.01)
    assert tracker.get("a") is IDLE
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="positive"):
            ActivityTracker(ttl=bad)


def test_next_expiry_drops_the_lapsed() -> None:
    clock = FakeClock(100)
    tracker = ActivityTracker(ttl=10, clock=clock)
    assert tracker.next_expiry() is None
    report(tracker, "a", WORKING)
    clock.advance(3)
    report(tracker, "b", BLOCKED)
    assert tracker.next_expiry() == 110
    clock.advance(8)
    assert tracker.next_expiry() == 113
    assert len(tracker) == 1
    clock.advance(5)
    assert tracker.next_expiry() is None


def test_a_report_may_carry_its_own_ttl() -> None:
    """What the Redis store's mirror does with another broker's report: it holds for the
    TTL that broker applied (here left: 2.5 s of a 30 s TTL)."""
    clock = FakeClock(100)
    tracker = ActivityTracker(ttl=30, clock=clock)
    assert tracker.next_lapse() is None
    assert report(tracker, "a", BLOCKED, ttl=2.5) is True
    assert tracker.next_lapse() == 2.5
    clock.advance(2)
    assert tracker.next_lapse() == 0.5
    assert tracker.get("a") is BLOCKED
    clock.advance(0.5)
    assert tracker.get("a") is IDLE
    assert tracker.next_lapse() is None


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(list(ActivityState)),
            st.floats(min_value=0, max_value=20),
        ),
        max_size=40,
    )
)
def test_matches_a_model(steps: list[tuple[str, ActivityState, float]]) -> None:
    """Whatever the reports and gaps, reads equal the naive model of the design."""
    clock = FakeClock(0)
    tracker = ActivityTracker(ttl=10, clock=clock)
    model: dict[str, tuple[ActivityState, float]] = {}

    def expected(name: str) -> ActivityState:
        state, at = model.get(name, (IDLE, 0.0))
        return state if state is not IDLE and clock.now < at + 10 else IDLE

    for name, state, gap in steps:
        clock.advance(gap)
        before = expected(name)
        assert report(tracker, name, state) is (before is not state)
        model[name] = (state, clock.now)
        for other in ("a", "b"):
            assert tracker.get(other) is expected(other)


def test_registry_counts_and_timestamps() -> None:
    registry = ConnectionRegistry()
    assert registry.get("a") == Connection(0, 0, 0)
    assert registry.attach("a", 1000) == 1
    assert registry.attach("a", 2000) == 2
    assert registry.get("a") == Connection(2, 1000, 2000)
    registry.touch("a", 3000)
    assert registry.get("a") == Connection(2, 1000, 3000)
    assert registry.detach("a") == 1
    assert registry.detach("a") == 0
    assert registry.detach("a") == 0  # never negative
    assert registry.get("a") == Connection(0, 1000, 3000)


def test_registry_first_emit_sets_created_at() -> None:
    registry = ConnectionRegistry()
    registry.touch("b", 500)
    registry.attach("b", 900)
    assert registry.get("b") == Connection(1, 500, 900)


# -- background counts (issue 23, part 3) ----------------------------------------------------


def test_background_is_held_apart_from_the_state() -> None:
    """An idle session with a command running is held, shows idle, and counts; a count of
    0 makes the session idle-and-absent again."""
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    assert report(tracker, "a", IDLE, session="s1", background=1, now_ms=1000) is True
    assert shown(tracker) == (IDLE, None, (0, 0), (1, 1000))
    assert tracker.holds("a", "s1")
    assert report(tracker, "a", WORKING, session="s2", background=2, now_ms=2000) is True
    assert shown(tracker) == (WORKING, 2000, (1, 0), (3, 1000))
    assert report(tracker, "a", IDLE, session="s1", background=1, now_ms=3000) is False
    assert report(tracker, "a", IDLE, session="s1", background=0, now_ms=4000) is True
    assert tracker.background("a") == (2, 2000)
    assert not tracker.holds("a", "s1")
    assert report(tracker, "a", IDLE, session="s2", now_ms=5000) is True
    assert shown(tracker) == (IDLE, None, (0, 0), (0, None))
    assert len(tracker) == 0


def test_background_lapses_with_its_session() -> None:
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    report(tracker, "a", IDLE, session="s1", background=1, now_ms=1)
    report(tracker, "a", IDLE, session="s2", background=1, now_ms=2)
    assert tracker.shorten("a", "s1", 3) is True  # its subscription ended
    clock.advance(3)
    assert tracker.background("a") == (1, 2)
    clock.advance(27)
    assert tracker.background("a") == (0, None)
    assert tracker.next_expiry() is None


def test_a_session_ended_by_a_report_of_idle_is_told_from_one_that_lapsed() -> None:
    """What tells a clean end from a death where the reports went to another broker."""
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    report(tracker, "a", WORKING, session="clean")
    report(tracker, "a", WORKING, session="dead")
    assert not tracker.ended_idle("a", "clean")  # held: not ended at all
    report(tracker, "a", IDLE, session="clean")
    tracker.shorten("a", "dead", 3)
    clock.advance(3)
    assert not tracker.holds("a", "clean") and not tracker.holds("a", "dead")
    assert tracker.ended_idle("a", "clean") and not tracker.ended_idle("a", "dead")
    report(tracker, "a", IDLE, session="dead")  # not held: it had lapsed, and stays so
    assert not tracker.ended_idle("a", "dead")
    report(tracker, "a", WORKING, session="clean")  # the same id again: news since
    assert not tracker.ended_idle("a", "clean")


def test_the_sessions_remembered_as_ended_idle_are_bounded() -> None:
    tracker = ActivityTracker(clock=FakeClock())
    for n in range(ENDED_KEPT + 1):
        report(tracker, "a", WORKING, session=f"s{n}")
        report(tracker, "a", IDLE, session=f"s{n}")
    assert not tracker.ended_idle("a", "s0")  # the oldest, forgotten
    assert tracker.ended_idle("a", "s1") and tracker.ended_idle("a", f"s{ENDED_KEPT}")


def test_a_lapse_on_a_grace_is_kept_for_the_taking_and_a_report_since_clears_it() -> None:
    """A session shortened to its grace (here, or by another broker through the mirror's
    shortened report) that lapses is handed over once; one reported again, or reported
    idle, or lapsing by its plain TTL, is not a grace's lapse."""
    clock = FakeClock()
    tracker = ActivityTracker(ttl=30, clock=clock)
    for session in ("died", "back", "clean", "ttl"):
        report(tracker, "a", BLOCKED, session=session)
    report(tracker, "b", WORKING, 3, session="there", grace=True)  # another broker's release
    for session in ("died", "back", "clean"):
        assert tracker.shorten("a", session, 3)
    report(tracker, "a", BLOCKED, session="back")  # reported again: the full TTL
    report(tracker, "a", IDLE, session="clean")
    clock.advance(3)
    assert sorted(tracker.take_grace_lapses()) == [("a", "died"), ("b", "there")]
    assert tracker.take_grace_lapses() == []  # taken once
    clock.advance(27)
    assert tracker.get("a") is IDLE  # "back" and "ttl" lapsed by the TTL: no grace's
    assert tracker.take_grace_lapses() == []


def test_the_same_record_again_holds_longer_or_shorter_and_after_a_lapse_is_a_change() -> None:
    """The mirror's heartbeat (the record it holds, put again: most reports) moves the
    lapse later and keeps the very same activity; put again with a shorter TTL (another
    broker's grace) it moves the lapse closer and counts as a grace; once lapsed, the same
    record is a change."""
    clock = FakeClock(0)
    tracker = ActivityTracker(ttl=30, clock=clock)
    record = SessionRecord(BLOCKED, 5, 0, 0)
    assert tracker.put("a", "s", record, 10) is True
    first = tracker.entry("a")
    clock.advance(8)
    assert tracker.put("a", "s", SessionRecord(BLOCKED, 5, 0, 0), 10) is False
    assert tracker.entry("a") is first
    clock.advance(8)  # 16 s: past the first lapse, within the second
    assert tracker.entry("a") is first
    assert tracker.next_lapse() == 2
    assert tracker.put("a", "s", record, 1, grace=True) is False
    assert tracker.next_lapse() == 1
    clock.advance(1)
    assert tracker.get("a") is IDLE
    assert tracker.take_grace_lapses() == [("a", "s")]
    assert tracker.put("a", "s", record, 10) is True
