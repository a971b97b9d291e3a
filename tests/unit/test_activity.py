"""The activity signal: derivation rule, transitions with causes, absorbed misuse."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codex_presence import ActivitySignal, ActivityState, HandleKind

TURN, TOOL, BLOCK = HandleKind.TURN, HandleKind.TOOL, HandleKind.BLOCK


def test_starts_idle_and_commits_nothing() -> None:
    signal = ActivitySignal()
    assert signal.state is ActivityState.IDLE
    assert signal.commit("anything") is None


def test_turn_makes_working_and_closing_returns_idle_with_causes() -> None:
    signal = ActivitySignal()
    signal.open(TURN, ("th", "t1"))
    started = signal.commit("turn/started")
    assert started is not None
    assert (started.previous, started.state, started.cause) == (
        ActivityState.IDLE,
        ActivityState.WORKING,
        "turn/started",
    )
    signal.close(TURN, ("th", "t1"))
    ended = signal.commit("turn/completed")
    assert ended is not None and ended.state is ActivityState.IDLE


def test_tool_alone_is_working_so_a_dropped_turn_bracket_still_shows() -> None:
    signal = ActivitySignal()
    signal.open(TOOL, ("th", "t1", "item"))
    assert signal.state is ActivityState.WORKING


def test_blocked_wins_over_working() -> None:
    signal = ActivitySignal()
    signal.open(TURN, ("th", "t1"))
    signal.open(TOOL, ("th", "t1", "cmd"))
    signal.open(BLOCK, ("th", "t1", "request", 0))
    assert signal.state is ActivityState.BLOCKED
    signal.close(BLOCK, ("th", "t1", "request", 0))
    assert signal.state is ActivityState.WORKING


def test_no_transition_when_state_unchanged() -> None:
    signal = ActivitySignal()
    signal.open(TURN, ("th", "t1"))
    assert signal.commit("a") is not None
    signal.open(TOOL, ("th", "t1", "x"))
    assert signal.commit("b") is None


def test_double_open_and_unknown_close_are_absorbed_and_counted() -> None:
    signal = ActivitySignal()
    signal.open(TURN, ("th", "t1"))
    signal.open(TURN, ("th", "t1"))
    assert signal.count(TURN) == 1
    assert signal.close(TURN, ("th", "t1")) is True
    assert signal.close(TURN, ("th", "t1")) is False
    assert signal.count(TURN) == 0
    assert signal.state is ActivityState.IDLE
    assert (signal.anomalies.double_open, signal.anomalies.close_unknown) == (1, 1)


def test_close_scope_closes_only_that_scope() -> None:
    signal = ActivitySignal()
    signal.open(TURN, ("a", "t1"))
    signal.open(TOOL, ("a", "t1", "i"))
    signal.open(BLOCK, ("a", None, "flags"))
    signal.open(TURN, ("b", "t2"))
    assert signal.close_scope("a") == 3
    assert signal.state is ActivityState.WORKING
    assert signal.close_scope("a", "t1") == 0
    assert signal.close_scope("b", "t2") == 1
    assert signal.state is ActivityState.IDLE


ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "close", "scope", "commit"]),
        st.sampled_from(list(HandleKind)),
        st.sampled_from([("a", "1"), ("a", "2"), ("b", "1")]),
    ),
    max_size=60,
)


@given(ops)
def test_counts_never_negative_and_state_always_follows_the_rule(
    sequence: list[tuple[str, HandleKind, tuple[str, str]]],
) -> None:
    signal = ActivitySignal()
    last = ActivityState.IDLE
    for op, kind, key in sequence:
        if op == "open":
            signal.open(kind, key)
        elif op == "close":
            signal.close(kind, key)
        elif op == "scope":
            signal.close_scope(key[0])
        else:
            transition = signal.commit(op)
            if transition is not None:
                assert transition.previous is last and transition.state is not last
                last = transition.state
        counts = {k: signal.count(k) for k in HandleKind}
        assert all(n >= 0 for n in counts.values())
        expected = (
            ActivityState.BLOCKED
            if counts[BLOCK]
            else ActivityState.WORKING
            if counts[TURN] or counts[TOOL]
            else ActivityState.IDLE
        )
        assert signal.state is expected
    signal.close_all()
    assert signal.state is ActivityState.IDLE
