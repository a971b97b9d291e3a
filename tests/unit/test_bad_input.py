"""Bad input, generated, into the mapping where test_codex_mapping.py's property test does
not reach.

test_codex_mapping.py already feeds random message soups (junk fields, ids up to 2**70).
Here the messages are a *well-formed* turn whose events are duplicated, reordered and
replayed late, and requests whose ids are huge; the properties are stronger than
"survives": duplicates change nothing, a late replay of an ended turn never pins the state,
and an answered request unblocks whatever its id looks like. (The same kind of input
through the real ``wrap`` command is tests/test_bad_input_through_wrap.py's.)
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence import CodexMapping
from tests.support.depth import examples

# -- into the mapping: a well-formed turn, abused --------------------------------------------


def note(method: str, **p: Any) -> dict[str, Any]:
    return {"method": method, "params": p}


def well_formed_turn(thread: str, turn: str, rid: Any) -> list[tuple[str, dict[str, Any]]]:
    """One turn with a command that needs approval, as codex 0.169.0 sends it."""
    ids = {"threadId": thread, "turnId": turn}
    cmd = {"type": "commandExecution", "id": f"{turn}-cmd"}
    return [
        (
            "server",
            note(
                "thread/status/changed",
                threadId=thread,
                status={"type": "active", "activeFlags": []},
            ),
        ),
        ("server", note("turn/started", threadId=thread, turn={"id": turn})),
        ("server", note("item/started", item=cmd, **ids)),
        (
            "server",
            {
                "method": "item/commandExecution/requestApproval",
                "id": rid,
                "params": {**ids, "itemId": cmd["id"]},
            },
        ),
        ("client", {"id": rid, "result": {"decision": "accept"}}),
        ("server", note("serverRequest/resolved", threadId=thread, requestId=rid)),
        ("server", note("item/completed", item=cmd, **ids)),
        ("server", note("thread/status/changed", threadId=thread, status={"type": "idle"})),
        (
            "server",
            note("turn/completed", threadId=thread, turn={"id": turn, "status": "completed"}),
        ),
    ]


def run(events: list[tuple[str, dict[str, Any]]]) -> tuple[CodexMapping, list[str]]:
    """Feed ``events`` as lines, checking at each step what any order must respect:
    transitions chain (each starts where the last ended), the member is blocked only once
    a request or waiting flag was seen and working only once a turn or tool started, and
    the end of stream reports idle exactly when the member was not idle."""
    mapping = CodexMapping()
    seen = []
    state = "idle"
    asked = started = False
    for direction, msg in events:
        method = msg.get("method", "")
        asked = asked or method.endswith("requestApproval") or "waitingOnApproval" in str(msg)
        started = started or method in ("turn/started", "item/started")
        line = orjson.dumps(msg) + b"\n"
        transition = mapping.feed_line(direction, line)  # type: ignore[arg-type]
        if transition is not None:  # a change of state, or of the background count alone,
            # or of what a block waits on or where the agent works
            assert transition.previous.value == state
            changes = (transition.changes_state, transition.changes_background)
            assert any(changes) or transition.changes_agent
            assert transition.background == mapping.background
            state = transition.state.value
        assert mapping.state == state  # every change was reported
        assert state != "blocked" or asked
        assert state != "working" or started
        seen.append(state)
    return mapping, seen


def close(mapping: CodexMapping) -> None:
    before, background = mapping.state, mapping.background
    transition = mapping.close()
    if before == "idle" and not background:
        assert transition is None
    else:
        assert transition is not None
        assert (transition.previous.value, transition.state.value) == (before, "idle")
        assert (transition.previous_background, transition.background) == (background, 0)
        assert transition.cause == "eof"
    assert mapping.state == "idle" and not mapping.has_pending and not mapping.background


huge_ids = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(min_size=1, max_size=20),
    st.text(alphabet="0123456789", min_size=30, max_size=30),
    st.binary(min_size=1, max_size=4096).map(lambda b: b.hex()),  # up to 8 KiB of id
)


@settings(max_examples=examples(2))
@given(huge_ids)
def test_a_request_with_any_id_blocks_until_that_id_is_answered(rid: Any) -> None:
    _, seen = run(well_formed_turn("th", "t1", rid))
    assert seen[3] == "blocked"
    assert seen[4] == "working"
    assert seen[-1] == "idle"


@settings(max_examples=examples(2))
@given(st.lists(st.integers(min_value=1, max_value=3), min_size=9, max_size=9), huge_ids)
def test_duplicated_events_change_nothing(copies: list[int], rid: Any) -> None:
    """Every event repeated 1-3 times in place: the state after each event is the same
    as with each event once (a repeated request is one request; a repeated answer
    answers nothing more)."""
    events = well_formed_turn("th", "t1", rid)
    _, once = run(events)
    repeated: list[tuple[str, dict[str, Any]]] = []
    positions = []
    for event, n in zip(events, copies, strict=True):
        repeated += [event] * n
        positions.append(len(repeated) - 1)
    _, seen = run(repeated)
    assert [seen[p] for p in positions] == once


@settings(max_examples=examples(3))
@given(st.permutations(range(9)), st.booleans())
def test_any_order_of_a_turns_events_ends_idle_at_eof(order: list[int], twice: bool) -> None:
    events = well_formed_turn("th", "t1", 7)
    shuffled = [events[i] for i in order] * (2 if twice else 1)
    mapping, _ = run(shuffled)
    close(mapping)


@settings(max_examples=examples(3))
@given(st.lists(st.integers(min_value=0, max_value=8), max_size=20))
def test_late_replays_of_an_ended_turn_never_pin_the_state(late: list[int]) -> None:
    """After the turn ended (turn/completed) and the thread went idle, any of its events
    arriving again — items, approvals already answered, even turn/started — must not
    leave the member working or blocked once the thread is idle again."""
    events = well_formed_turn("th", "t1", 7)
    replay = [events[i] for i in late if events[i][0] == "server"]
    mapping, _ = run([*events, *replay, events[-2]])  # the thread says idle again
    assert mapping.state == "idle", replay


@given(st.permutations(range(18)))
def test_two_interleaved_turns_in_any_order_end_idle(order: list[int]) -> None:
    a = well_formed_turn("th", "t1", 1)
    b = well_formed_turn("th2", "t2", "1")  # the same id, as a string: another request
    both = a + b
    mapping, _ = run([both[i] for i in order])
    close(mapping)


def test_one_mapping_ends_idle_after_a_thousand_generated_turns() -> None:
    """Bounded memory for ended turns and pending requests: many unanswered requests and
    many ended turns later, the mapping still tracks (and forgets) correctly."""
    mapping = CodexMapping()
    for n in range(1000):
        for direction, msg in well_formed_turn("th", f"t{n}", n)[:4]:  # never answered
            mapping.feed_line(direction, orjson.dumps(msg))  # type: ignore[arg-type]
        assert mapping.state == "blocked"
        mapping.feed_line(
            "server",
            orjson.dumps(note("turn/completed", threadId="th", turn={"id": f"t{n}"})),
        )
        mapping.feed_line(
            "server",
            orjson.dumps(note("thread/status/changed", threadId="th", status={"type": "idle"})),
        )
        assert mapping.state == "idle", n
    assert not mapping.has_pending
