"""The field rules of the codex mapping (issue 11), fed plain messages: revival, one turn per
thread, what never revives; then their properties over generated sessions of a few
threads, turns and items, with duplicates, reordering, resumed items and lost completions.

The edited recordings that model each public report are ``fixtures/field/`` (replayed by
``tests/unit/test_fixtures.py``); these tests pin each rule on its own, in both feeding paths
(lines, as wrap reads them; parsed messages, as replay feeds recordings).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence import CodexMapping, HandleKind
from codex_presence.core.codex.protocol import PASSIVE_ITEM_TYPES, TOOL_ITEM_TYPES
from tests.support.depth import examples
from tests.support.junk import with_junk_at_some_field
from tests.unit.test_codex_mapping import (
    Session,
    item,
    note,
    request,
    status,
    turn_completed,
    turn_started,
)

both_paths = pytest.mark.parametrize("lines", [True, False], ids=["lines", "messages"])


def completed_turn(thread: str = "th", turn: str = "t1") -> list[dict[str, Any]]:
    """A turn as codex ends it normally: idle status first, then turn/completed."""
    return [
        status(thread, "active"),
        turn_started(thread, turn),
        item("started", "agentMessage", "m", thread, turn),
        item("completed", "agentMessage", "m", thread, turn),
        status(thread, "idle"),
        turn_completed(thread, turn),
    ]


# -- revival ---------------------------------------------------------------------------------


@both_paths
@pytest.mark.parametrize("kind", ["reasoning", "contextCompaction", "commandExecution", "plan"])
def test_a_new_item_revives_a_turn_that_completed_normally(lines: bool, kind: str) -> None:
    """get-bb/bb #1646: new root items on the same turn id after turn/completed."""
    s = Session(lines=lines).server(*completed_turn())
    s.server(item("started", kind, "resumed"))
    assert s.state == "working"
    assert s.mapping.stats.revived == 1
    s.server(item("completed", kind, "resumed"), turn_completed())  # completes a second time
    assert s.transitions == [
        ("working", "turn/started"),
        ("idle", "thread/status/changed"),
        ("working", "item/started"),
        ("idle", "turn/completed"),
    ]


@both_paths
def test_a_revived_turn_ends_by_the_threads_idle_status(lines: bool) -> None:
    s = Session(lines=lines).server(*completed_turn(), status("th", "active"))
    assert s.state == "idle"  # the active status alone opens nothing
    s.server(item("started", "reasoning", "r2"), item("started", "commandExecution", "c2"))
    s.server(status("th", "idle"))
    assert s.transitions[-2:] == [("working", "item/started"), ("idle", "thread/status/changed")]
    # ...and can be revived again, for as long as no newer turn started.
    s.server(item("started", "agentMessage", "m3"))
    assert s.state == "working"


@both_paths
def test_an_idle_status_mid_turn_ends_it_and_the_next_new_item_revives_it(lines: bool) -> None:
    """multica-ai/multica #1771: idle while the turn's work goes on."""
    s = Session(lines=lines).server(
        turn_started(), item("started", "commandExecution", "c"), status("th", "idle")
    )
    assert s.state == "idle"
    s.server(item("completed", "commandExecution", "c"))  # never revives
    assert s.state == "idle"
    s.server(item("started", "userMessage", "steer"))
    assert s.state == "working"
    s.server(turn_completed())
    assert s.state == "idle"


@both_paths
@pytest.mark.parametrize("outcome", ["interrupted", "failed"])
def test_nothing_revives_an_interrupted_or_failed_turn(lines: bool, outcome: str) -> None:
    s = Session(lines=lines).server(
        turn_started(),
        item("started", "commandExecution", "c"),
        status("th", "idle"),  # first makes it revivable; the outcome then forbids it
        turn_completed(status=outcome),
        item("completed", "commandExecution", "c"),
        item("started", "reasoning", "r"),
        item("started", "commandExecution", "c2"),
    )
    assert s.state == "idle"
    assert s.transitions == [("working", "turn/started"), ("idle", "thread/status/changed")]
    assert s.mapping.stats.revived == 0


@both_paths
@pytest.mark.parametrize(
    "ending",
    [status("th", "systemError"), status("th", "notLoaded"), note("thread/closed", threadId="th")],
    ids=["systemError", "notLoaded", "thread/closed"],
)
def test_a_thread_that_errored_unloaded_or_closed_revives_nothing(
    lines: bool, ending: dict[str, Any]
) -> None:
    s = Session(lines=lines).server(*completed_turn(), ending, item("started", "reasoning", "r"))
    assert s.state == "idle" and s.mapping.stats.revived == 0
    s = Session(lines=lines).server(turn_started(), ending, item("started", "reasoning", "r"))
    assert s.state == "idle" and s.mapping.stats.revived == 0


@both_paths
def test_item_completed_never_revives(lines: bool) -> None:
    s = Session(lines=lines).server(
        *completed_turn(),
        item("completed", "commandExecution", "late"),
        item("completed", "agentMessage", "late-msg"),
    )
    assert s.state == "idle"


@both_paths
def test_a_turn_older_than_the_threads_last_turn_started_is_never_revived(lines: bool) -> None:
    s = Session(lines=lines).server(
        *completed_turn("th", "t1"), turn_started("th", "t2"), turn_completed("th", "t2")
    )
    s.server(item("started", "reasoning", "old"))  # on t1: a newer turn has run since
    assert s.state == "idle"
    s.server(item("started", "reasoning", "r", "th", "t2"))
    assert s.state == "working"


def test_a_passive_item_started_is_parsed_only_when_it_names_a_revivable_turn() -> None:
    """The hot path: without a revivable turn (or naming another turn) the line is
    skipped on its bytes, like a delta."""
    mapping = CodexMapping()
    line = orjson.dumps(item("started", "agentMessage", "m", "th", "t1"))
    mapping.feed_line("server", orjson.dumps(turn_started()))
    mapping.feed_line("server", line)
    assert (mapping.stats.dispatched, mapping.stats.skipped) == (1, 1)
    mapping.feed_line("server", orjson.dumps(turn_completed()))
    other = orjson.dumps(item("started", "agentMessage", "m", "th", "t0"))
    mapping.feed_line("server", other)
    assert (mapping.stats.dispatched, mapping.stats.skipped) == (2, 2)
    mapping.feed_line("server", line)
    assert mapping.stats.dispatched == 3 and mapping.state == "working"


# -- one turn at a time ----------------------------------------------------------------------


@both_paths
def test_turn_started_ends_the_threads_other_turn_with_its_tools_and_requests(
    lines: bool,
) -> None:
    """openai/codex #28495, #35810, #35847: a lost turn/completed (and idle status)."""
    s = Session(lines=lines).server(
        turn_started("th", "t1"),
        item("started", "commandExecution", "c"),
        request("item/commandExecution/requestApproval", 0, threadId="th", turnId="t1"),
        turn_started("other", "o1"),
    )
    assert s.state == "blocked"
    s.server(turn_started("th", "t2"))
    assert s.state == "working"
    keys = {key for kind in HandleKind for key in s.mapping.signal.keys(kind)}
    assert keys == {("th", "t2"), ("other", "o1")}
    assert not s.mapping.has_pending
    s.server(turn_completed("th", "t2"), turn_completed("other", "o1"))
    assert s.state == "idle"
    s.server(item("completed", "commandExecution", "c"), turn_completed("th", "t1"))
    assert s.state == "idle"


@both_paths
def test_a_turn_completed_naming_another_turn_ends_the_threads_turn(lines: bool) -> None:
    """One turn at a time: whatever turn it names, the thread's work is over; the turn it
    ended by inference comes back with its next new item."""
    s = Session(lines=lines).server(turn_started("th", "t2"), turn_completed("th", "t1"))
    assert s.state == "idle"
    s.server(item("started", "reasoning", "r", "th", "t2"))
    assert s.state == "working"


# -- properties over generated sessions ------------------------------------------------------

THREADS = ("a", "b")
TURNS = ("t1", "t2", "t3")
ITEMS = ("i1", "i2")
ITEM_TYPES = ("commandExecution", "mcpToolCall", "agentMessage", "reasoning", "userMessage")
assert {"commandExecution", "mcpToolCall"} <= TOOL_ITEM_TYPES
assert {"agentMessage", "reasoning", "userMessage"} <= PASSIVE_ITEM_TYPES

Event = tuple[str, dict[str, Any]]
MANGLED = "x-mangled"
"""Marks an event with junk in one of its fields (a key the mapping never reads)."""


def turn_events(thread: str, turn: str, rid: int, draw: st.DrawFn) -> list[Event]:
    """One turn as codex writes it, with one or two items and maybe an approval."""
    events: list[Event] = [
        ("server", status(thread, "active")),
        ("server", turn_started(thread, turn)),
    ]
    for item_id in draw(st.lists(st.sampled_from(ITEMS), min_size=1, max_size=2, unique=True)):
        kind = draw(st.sampled_from(ITEM_TYPES))
        events.append(("server", item("started", kind, item_id, thread, turn)))
        if draw(st.booleans()):
            events += [
                ("server", status(thread, "active", "waitingOnApproval")),
                (
                    "server",
                    request(
                        "item/commandExecution/requestApproval",
                        rid,
                        threadId=thread,
                        turnId=turn,
                        itemId=item_id,
                    ),
                ),
                ("client", {"id": rid, "result": {"decision": "accept"}}),
                ("server", note("serverRequest/resolved", threadId=thread, requestId=rid)),
                ("server", status(thread, "active")),
            ]
        events.append(("server", item("completed", kind, item_id, thread, turn)))
    outcome = draw(st.sampled_from(["completed", "completed", "interrupted", "failed"]))
    events += [
        ("server", status(thread, "systemError" if outcome == "failed" else "idle")),
        ("server", turn_completed(thread, turn, outcome)),
    ]
    return events


@st.composite
def field_sessions(draw: st.DrawFn) -> list[Event]:
    """Turns of a few threads, interleaved, then broken the ways the field breaks them:
    events lost (a completion, an idle status), duplicated, swapped with their neighbour,
    resumed items (a new item/started of an ended turn) inserted anywhere, and copies of
    events with junk in one field (marked ``MANGLED``: they may end nothing)."""
    per_thread: list[list[Event]] = []
    rid = 0
    for thread in THREADS[: draw(st.integers(1, len(THREADS)))]:
        events: list[Event] = []
        for turn in TURNS[: draw(st.integers(1, len(TURNS)))]:
            events += turn_events(thread, turn, rid, draw)
            rid += 1
        per_thread.append(events)
    session: list[Event] = []
    while any(per_thread):  # interleave, keeping each thread's own order
        queue = draw(st.sampled_from([q for q in per_thread if q]))
        session.append(queue.pop(0))
    for _ in range(draw(st.integers(0, 8))):
        if not session:
            break
        at = draw(st.integers(0, len(session) - 1))
        change = draw(st.sampled_from(["lose", "duplicate", "swap", "resume"]))
        if change == "lose":
            del session[at]
        elif change == "duplicate":
            session.insert(at, session[at])
        elif change == "swap" and at + 1 < len(session):
            session[at], session[at + 1] = session[at + 1], session[at]
        elif change == "resume":
            thread, turn = draw(st.sampled_from(THREADS)), draw(st.sampled_from(TURNS))
            kind = draw(st.sampled_from(ITEM_TYPES))
            session.insert(at, ("server", item("started", kind, "resumed", thread, turn)))
    for _ in range(draw(st.sampled_from([0, 1, 3, 6])) if session else 0):
        at = draw(st.integers(0, len(session) - 1))
        direction, message = session[at]
        mangled = draw(with_junk_at_some_field(message))
        session.insert(at, (direction, {**mangled, MANGLED: True}))
    return session


def thread_of(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    thread = params.get("threadId") if isinstance(params, dict) else None
    return thread if isinstance(thread, str) else None


def handles_of(mapping: CodexMapping, thread: str) -> list[tuple[Any, ...]]:
    return [key for kind in HandleKind for key in mapping.signal.keys(kind) if key[0] == thread]


def feed(mapping: CodexMapping, event: Event, lines: bool) -> None:
    """Feed one event; junk in a field is the message's fault, never a handler's bug."""
    direction, message = event
    if lines:
        try:
            line = orjson.dumps(message)
        except TypeError:  # integers past 64 bits: send them as raw text instead
            line = repr(message).encode()
        mapping.feed_line(direction, line)  # type: ignore[arg-type]
    else:
        mapping.feed_message(direction, message)  # type: ignore[arg-type]
    assert mapping.stats.internal_errors == 0


@settings(max_examples=examples(4))
@given(field_sessions(), st.booleans())
def test_a_thread_whose_last_event_ends_it_holds_no_handle(
    session: list[Event], lines: bool
) -> None:
    """Once a thread's last event is its idle status, or a turn/completed with nothing
    started after it, that thread holds no handle: checked after every event."""
    mapping = CodexMapping()
    last: dict[str, dict[str, Any]] = {}
    for event in session:
        feed(mapping, event, lines)
        thread = thread_of(event[1])
        if event[0] == "server" and thread is not None:
            last[thread] = event[1]
        for thread, message in last.items():
            ending = not message.get(MANGLED) and (
                message.get("method") == "turn/completed" or message == status(thread, "idle")
            )
            if ending:
                assert handles_of(mapping, thread) == [], (thread, message)


@settings(max_examples=examples(4))
@given(field_sessions(), st.permutations(THREADS), st.booleans(), st.booleans())
def test_a_stream_that_ends_with_every_thread_idle_shows_idle(
    session: list[Event], order: list[str], late_answers: bool, lines: bool
) -> None:
    mapping = CodexMapping()
    for event in session:
        feed(mapping, event, lines)
    # (junk may have named other threads: they end too)
    others = {thread_of(message) for _, message in session} - {None, *order}
    for thread in [*order, *sorted(t for t in others if t is not None)]:
        feed(mapping, ("server", status(thread, "idle")), lines)
    if late_answers:  # answers to requests the idle status already dropped
        for rid in range(len(THREADS) * len(TURNS)):
            feed(mapping, ("client", {"id": rid, "result": {}}), lines)
    assert mapping.state == "idle"
    assert all(mapping.signal.count(kind) == 0 for kind in HandleKind)


@settings(max_examples=examples(4))
@given(
    field_sessions(),
    st.sampled_from(THREADS),
    st.sampled_from(TURNS),
    st.sampled_from(ITEM_TYPES),
    st.lists(st.sampled_from(["delta", "usage", "other thread", "item completed"]), max_size=3),
    st.booleans(),
)
def test_an_item_started_after_a_normal_completion_always_shows_working(
    session: list[Event],
    thread: str,
    turn: str,
    kind: str,
    between: list[str],
    lines: bool,
) -> None:
    """Whatever came before (the turn interrupted, superseded or completed already):
    after its normal turn/completed, a new item of that turn shows working, also with
    events in between that do not end the thread's work."""
    other = next(t for t in THREADS if t != thread)
    fillers: dict[str, Event] = {
        "delta": (
            "server",
            note("item/agentMessage/delta", threadId=thread, turnId=turn, itemId="m", delta="x"),
        ),
        "usage": ("server", note("thread/tokenUsage/updated", threadId=thread, turnId=turn)),
        "other thread": ("server", status(other, "idle")),
        "item completed": ("server", item("completed", "commandExecution", "i1", thread, turn)),
    }
    mapping = CodexMapping()
    for event in [
        *session,
        ("server", turn_completed(thread, turn, "completed")),
        *(fillers[name] for name in between),
        ("server", item("started", kind, "new", thread, turn)),
    ]:
        feed(mapping, event, lines)
    assert mapping.signal.is_open(HandleKind.TURN, (thread, turn))
    assert mapping.state in ("working", "blocked")
