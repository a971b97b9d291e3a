"""The codex mapping, fed plain messages: every rule of the module docstring, and the traps
of the real protocol (late items after an interrupt, requests resolved after the turn,
subagent threads without thread/started, per-direction ids, the TUI's title threads);
names it does not know, and bugs in its handlers. The field rules (revival, one turn per
thread) are ``tests/unit/test_field_rules.py``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence import CodexMapping, Direction, Transition, read_entries
from codex_presence.core.codex.mapping import Unknown
from codex_presence.core.codex.protocol import (
    BLOCKING_REQUESTS,
    STATE_METHODS,
    TOOL_ITEM_TYPES,
    answer_ends_turn,
)
from tests.support.depth import examples
from tests.support.junk import HUGE, junk, or_junk


def note(method: str, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": params, "emittedAtMs": 1796044232571}


def request(method: str, rid: int | str, **params: Any) -> dict[str, Any]:
    return {"method": method, "id": rid, "params": params}


def turn_started(thread: str = "th", turn: str = "t1") -> dict[str, Any]:
    return note("turn/started", threadId=thread, turn={"id": turn, "status": "inProgress"})


def turn_completed(
    thread: str = "th", turn: str = "t1", status: str = "completed"
) -> dict[str, Any]:
    return note("turn/completed", threadId=thread, turn={"id": turn, "status": status})


def status(thread: str = "th", kind: str = "active", *flags: str) -> dict[str, Any]:
    body: dict[str, Any] = {"type": kind}
    if kind == "active":
        body["activeFlags"] = list(flags)
    return note("thread/status/changed", threadId=thread, status=body)


def item(
    event: str, kind: str, item_id: str, thread: str = "th", turn: str = "t1"
) -> dict[str, Any]:
    # In codex's key order: the pre-filter reads the item's type from the line's first bytes.
    return note(f"item/{event}", item={"type": kind, "id": item_id}, threadId=thread, turnId=turn)


class Session:
    """Feeds messages as lines (the wire path; or parsed, the replay path, with
    ``lines=False``) and collects (state, cause) changes of the state, and (count, cause)
    changes of the background count."""

    def __init__(self, *, lines: bool = True, mapping: CodexMapping | None = None) -> None:
        self.mapping = mapping if mapping is not None else CodexMapping()
        self.lines = lines
        self.transitions: list[tuple[str, str]] = []
        self.background: list[tuple[int, str]] = []

    def _note(self, transition: Transition | None) -> None:
        if transition is None:
            return
        if transition.changes_state:
            self.transitions.append((transition.state.value, transition.cause))
        if transition.changes_background:
            self.background.append((transition.background, transition.cause))

    def server(self, *messages: dict[str, Any]) -> Session:
        return self._feed("server", messages)

    def client(self, *messages: dict[str, Any]) -> Session:
        return self._feed("client", messages)

    def _feed(self, direction: Direction, messages: tuple[dict[str, Any], ...]) -> Session:
        for message in messages:
            if self.lines:
                transition = self.mapping.feed_line(direction, orjson.dumps(message) + b"\n")
            else:
                transition = self.mapping.feed_message(direction, message)
            self._note(transition)
        return self

    def eof(self) -> Session:
        self._note(self.mapping.close())
        return self

    @property
    def state(self) -> str:
        return self.mapping.state


def test_plain_turn_working_then_idle_on_thread_idle_before_turn_completed() -> None:
    s = Session().server(
        status("th", "active"),
        turn_started(),
        item("started", "agentMessage", "msg-1"),
        note("item/agentMessage/delta", threadId="th", turnId="t1", itemId="msg-1", delta="hi"),
        item("completed", "agentMessage", "msg-1"),
        status("th", "idle"),
        turn_completed(),
    )
    assert s.transitions == [("working", "turn/started"), ("idle", "thread/status/changed")]


@pytest.mark.parametrize("outcome", ["completed", "interrupted", "failed"])
def test_turn_completed_alone_closes_the_turn(outcome: str) -> None:
    s = Session().server(turn_started(), turn_completed(status=outcome))
    assert s.transitions == [("working", "turn/started"), ("idle", "turn/completed")]


def test_client_turn_start_on_busy_thread_steers_and_opens_nothing() -> None:
    s = Session().server(turn_started())
    s.client({"method": "turn/start", "id": 7, "params": {"threadId": "th", "input": []}})
    s.server({"id": 7, "result": {"turn": {"id": "t1", "status": "inProgress"}}})
    s.server(turn_completed())
    assert s.transitions == [("working", "turn/started"), ("idle", "turn/completed")]


@pytest.mark.parametrize("kind", sorted(TOOL_ITEM_TYPES))
def test_every_tool_item_type_is_working_even_without_a_turn_bracket(kind: str) -> None:
    s = Session().server(item("started", kind, "x"))
    assert s.state == "working"
    s.server(item("completed", kind, "x"))
    assert s.transitions == [("working", "item/started"), ("idle", "item/completed")]


@pytest.mark.parametrize(
    "kind", ["agentMessage", "reasoning", "userMessage", "plan", "contextCompaction", "hookPrompt"]
)
def test_non_tool_items_open_nothing(kind: str) -> None:
    s = Session().server(item("started", kind, "x"))
    assert s.state == "idle" and s.transitions == []


def test_late_item_events_after_the_turn_ended_do_not_pin_working() -> None:
    s = Session().server(
        turn_started(),
        item("started", "commandExecution", "call_sleep"),
        status("th", "idle"),
        turn_completed(status="interrupted"),
        note(
            "item/commandExecution/outputDelta",
            threadId="th",
            turnId="t1",
            itemId="call_sleep",
            delta="late\n",
        ),
        item("completed", "commandExecution", "call_sleep"),
        item("started", "commandExecution", "call_other"),
    )
    assert s.transitions == [("working", "turn/started"), ("idle", "thread/status/changed")]
    assert s.mapping.stats.late_events >= 1


def test_retried_stream_leaves_an_item_open_and_turn_end_closes_it() -> None:
    s = Session().server(
        turn_started(),
        item("started", "webSearch", "ws-dangling"),
        note("error", threadId="th", turnId="t1", willRetry=True, error={"message": "retry"}),
        turn_completed(),
    )
    assert s.transitions[-1] == ("idle", "turn/completed")


@pytest.mark.parametrize(
    "method", sorted(BLOCKING_REQUESTS - {"execCommandApproval", "applyPatchApproval"})
)
def test_human_requests_block_until_the_client_answers(method: str) -> None:
    s = Session().server(turn_started(), request(method, 0, threadId="th", turnId="t1", itemId="i"))
    assert s.state == "blocked"
    s.client({"id": 0, "result": {"decision": "accept"}})
    assert s.transitions == [
        ("working", "turn/started"),
        ("blocked", method),
        ("working", "response"),
    ]


@pytest.mark.parametrize("method", ["execCommandApproval", "applyPatchApproval"])
def test_legacy_approvals_block(method: str) -> None:
    s = Session().server(request(method, 3, conversationId="conv", callId="c"))
    assert s.state == "blocked"
    s.client({"id": 3, "result": {"decision": "approved"}})
    assert s.state == "idle"


def test_server_request_resolved_clears_blocked() -> None:
    s = Session().server(
        turn_started(),
        request("item/fileChange/requestApproval", 0, threadId="th", turnId="t1", itemId="p"),
        note("serverRequest/resolved", threadId="th", requestId=0),
    )
    assert s.transitions[-1] == ("working", "serverRequest/resolved")


def test_ids_are_per_direction_a_client_request_id_does_not_answer_a_server_request() -> None:
    s = Session().server(
        turn_started(),
        request("item/commandExecution/requestApproval", 0, threadId="th", turnId="t1", itemId="c"),
    )
    # The server answering the client's own request 0 says nothing about its request 0.
    s.server({"id": 0, "result": {"userAgent": "x"}})
    assert s.state == "blocked"
    s.client({"id": 0, "result": {"decision": "decline"}})
    assert s.state == "working"


def test_request_pending_at_interrupt_is_resolved_after_turn_completed() -> None:
    s = Session().server(
        turn_started(),
        status("th", "active", "waitingOnApproval"),
        item("started", "commandExecution", "call_touch"),
        request(
            "item/commandExecution/requestApproval",
            0,
            threadId="th",
            turnId="t1",
            itemId="call_touch",
        ),
    )
    s.client({"method": "turn/interrupt", "id": 5, "params": {"threadId": "th", "turnId": "t1"}})
    s.server(
        {"id": 5, "result": {}},
        status("th", "idle"),
        turn_completed(status="interrupted"),
        note("serverRequest/resolved", threadId="th", requestId=0),
    )
    s.client({"id": 0, "result": {"decision": "accept"}})  # a late answer: ignored
    assert s.transitions == [
        ("working", "turn/started"),
        ("blocked", "thread/status/changed"),
        ("idle", "thread/status/changed"),
    ]


def test_waiting_flags_agree_with_requests_both_must_clear() -> None:
    s = Session().server(
        turn_started(),
        status("th", "active", "waitingOnUserInput"),
        request(
            "item/tool/requestUserInput",
            0,
            threadId="th",
            turnId="t1",
            itemId="ask",
            questions=[],
            isBlocking=True,
        ),
    )
    s.client({"id": 0, "result": {"answers": {}}})
    assert s.state == "blocked"  # the server still says it is waiting
    s.server(note("serverRequest/resolved", threadId="th", requestId=0), status("th", "active"))
    assert s.transitions == [
        ("working", "turn/started"),
        ("blocked", "thread/status/changed"),
        ("working", "thread/status/changed"),
    ]


def test_turn_end_closes_its_pending_requests() -> None:
    s = Session().server(
        turn_started(),
        request(
            "mcpServer/elicitation/request",
            4,
            threadId="th",
            turnId="t1",
            serverName="x",
            mode="form",
            message="?",
            requestedSchema={},
        ),
        turn_completed(),
    )
    assert s.transitions[-1] == ("idle", "turn/completed")
    s.client({"id": 4, "result": {"action": "accept"}})  # too late: nothing is pending
    assert s.transitions[-1] == ("idle", "turn/completed") and s.state == "idle"


def test_elicitation_without_turn_id_belongs_to_its_thread() -> None:
    s = Session().server(
        request(
            "mcpServer/elicitation/request",
            1,
            threadId="th",
            turnId=None,
            serverName="x",
            mode="url",
            message="?",
            url="http://127.0.0.1/",
            elicitationId="e",
        ),
    )
    assert s.state == "blocked"
    s.server(status("th", "idle"))
    assert s.state == "idle"


@pytest.mark.parametrize(
    "method",
    [
        "item/tool/call",
        "account/chatgptAuthTokens/refresh",
        "attestation/generate",
        "currentTime/read",
    ],
)
def test_automatic_requests_never_block_and_their_answers_are_known(method: str) -> None:
    s = Session().server(turn_started(), request(method, 0, threadId="th", turnId="t1"))
    assert s.state == "working"
    s.client({"id": 0, "result": {}})
    assert s.mapping.stats.unknown_response == 0


@pytest.mark.parametrize("kind", ["idle", "systemError", "notLoaded"])
def test_thread_status_recovers_when_turn_completed_never_comes(kind: str) -> None:
    s = Session().server(
        turn_started(),
        item("started", "mcpToolCall", "m"),
        request("item/permissions/requestApproval", 2, threadId="th", turnId="t1", itemId="m"),
        status("th", kind),
    )
    assert s.transitions[-1] == ("idle", "thread/status/changed")
    s.server(item("completed", "mcpToolCall", "m"), turn_started())  # late: turn already ended
    assert s.state == "idle"


def test_thread_closed_recovers_too() -> None:
    s = Session().server(turn_started(), note("thread/closed", threadId="th"))
    assert s.state == "idle"


def test_many_threads_and_subagents_union() -> None:
    s = Session().server(
        turn_started("parent", "p1"),
        item("started", "collabAgentToolCall", "spawn", "parent", "p1"),
        status("child", "idle"),  # the child appears: no thread/started
        item("completed", "collabAgentToolCall", "spawn", "parent", "p1"),
        status("child", "active"),
        turn_started("child", "c1"),
        status("child", "active", "waitingOnApproval"),
    )
    assert s.state == "blocked"
    s.server(status("child", "idle"), turn_completed("child", "c1"))
    assert s.state == "working"  # the parent is still in its turn
    s.server(status("parent", "idle"), turn_completed("parent", "p1"))
    assert s.transitions == [
        ("working", "turn/started"),
        ("blocked", "thread/status/changed"),
        ("working", "thread/status/changed"),
        ("idle", "thread/status/changed"),
    ]


def test_end_of_stream_closes_everything() -> None:
    s = (
        Session()
        .server(
            turn_started(),
            request(
                "item/commandExecution/requestApproval", 0, threadId="th", turnId="t1", itemId="c"
            ),
        )
        .eof()
    )
    assert s.transitions[-1] == ("idle", "eof")
    assert Session().eof().transitions == []


@pytest.mark.parametrize("before", ["running", "completed"])
def test_after_a_hang_up_no_event_of_a_turn_reopens_it(before: str) -> None:
    """The TUI hung up (``close("hangup")``) while the app-server went on: a late item of
    a turn that ran, or of one that completed and could have been revived, opens nothing;
    a new turn counts as ever."""
    s = Session().server(turn_started(), item("started", "reasoning", "r"))
    if before == "completed":
        s.server(turn_completed())
    transition = s.mapping.close("hangup")
    assert s.state == "idle" and (transition is None) == (before == "completed")
    late = (
        item("started", "commandExecution", "c"),
        item("started", "agentMessage", "m"),
        request("item/commandExecution/requestApproval", 0, threadId="th", turnId="t1"),
    )
    s.server(*late)
    assert s.state == "idle"
    s.server(turn_started(turn="t2"))
    assert s.state == "working"


@pytest.mark.parametrize(
    "line",
    [
        b"not json at all\n",
        b"\xff\xfe\x00garbage\n",
        b"[1,2,3]\n",
        b'{"method":"turn/started"}\n',
        b'{"method":"turn/started","params":{"threadId":5,"turn":{"id":"t"}}}\n',
        b'{"method":"turn/started","params":[1,2]}\n',
        b'{"method":"item/started","params":{"threadId":"a","turnId":"b","item":"x"}}\n',
        b'{"method":"thread/status/changed","params":{"threadId":"a","status":{"type":1}}}\n',
        b'{"method":"item/commandExecution/requestApproval","id":[1],"params":{"threadId":"a"}}\n',
        b'{"method":"no/such/method","params":{}}\n',
        b'{"method":7}\n',
        b"{}\n",
        b"",
    ],
)
def test_malformed_input_is_ignored_and_counted(line: bytes) -> None:
    mapping = CodexMapping()
    assert mapping.feed_line("server", line) is None
    assert mapping.state == "idle"
    stats = mapping.stats
    assert stats.not_json + stats.wrong_shape + stats.skipped == 1


def test_non_canonical_server_lines_are_parsed_not_skipped() -> None:
    mapping = CodexMapping()
    line = b'{ "params": {"threadId": "th", "turn": {"id": "t"}}, "method": "turn/started" }'
    transition = mapping.feed_line("server", line)
    assert transition is not None and transition.state.value == "working"


def test_escaped_method_name_is_parsed_not_skipped() -> None:
    mapping = CodexMapping()
    line = b'{"method":"turn\\/started","params":{"threadId":"th","turn":{"id":"t"}}}'
    assert mapping.feed_line("server", line) is not None


# -- hostile input: whatever arrives, no exception, no negative count, idle at EOF ----------

ids = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=5),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
)
names = st.sampled_from(["th", "other", "", "x" * 50])
turns = st.sampled_from(["t1", "t2", "t3"])
methods = st.sampled_from(
    [
        *sorted(BLOCKING_REQUESTS),
        "turn/started",
        "turn/completed",
        "item/started",
        "item/completed",
        "thread/started",
        "thread/status/changed",
        "thread/closed",
        "serverRequest/resolved",
        "item/tool/call",
        "item/agentMessage/delta",
        "no/such/method",
    ]
)


@st.composite
def shuffled(draw: st.DrawFn, fields: dict[str, Any]) -> dict[str, Any]:
    """Most of ``fields``, in any order (codex's own order is what the byte checks read)."""
    keep = [key for key in sorted(fields) if draw(st.sampled_from([True] * 4 + [False]))]
    order = draw(st.permutations(keep))
    return {key: fields[key] for key in order}


@st.composite
def messages(draw: st.DrawFn) -> tuple[Direction, Any]:
    """A message of any method, with junk possible in every field the mapping reads."""
    shape = draw(st.sampled_from(["junk", "answer", *["message"] * 8]))
    if shape == "junk":
        return draw(st.sampled_from(["server", "client"])), draw(junk)
    if shape == "answer":  # an answer, mostly the client's to a request of the server's
        direction: Direction = draw(st.sampled_from(["client", "client", "server"]))
        return direction, {"id": draw(or_junk(ids)), "result": {}}
    direction = draw(st.sampled_from(["server"] * 9 + ["client"]))
    thread, turn = draw(names), draw(turns)
    item_fields = {
        "type": draw(or_junk(st.sampled_from([*sorted(TOOL_ITEM_TYPES), "reasoning", "plan"]))),
        "id": draw(or_junk(st.sampled_from(["i1", "i2"]))),
    }
    status_fields = {
        "type": draw(or_junk(st.sampled_from(["idle", "active", "systemError", "x"]))),
        "activeFlags": draw(
            or_junk(
                st.lists(
                    or_junk(st.sampled_from(["waitingOnApproval", "waitingOnUserInput", "o"])),
                    max_size=2,
                )
            )
        ),
    }
    turn_fields = {
        "id": draw(or_junk(st.just(turn))),
        "status": draw(or_junk(st.sampled_from(["completed", "interrupted", "inProgress"]))),
    }
    thread_fields = {
        "id": draw(or_junk(st.just(thread))),
        "threadSource": draw(or_junk(st.sampled_from(["thread_title", "user"]))),
    }
    params: dict[str, Any] = {
        "threadId": draw(or_junk(st.just(thread))),
        "turnId": draw(or_junk(st.just(turn))),
        "turn": draw(or_junk(shuffled(turn_fields))),
        "item": draw(or_junk(shuffled(item_fields))),
        "status": draw(or_junk(shuffled(status_fields))),
        "thread": draw(or_junk(shuffled(thread_fields))),
        "requestId": draw(or_junk(ids)),
        "conversationId": draw(or_junk(st.just(thread))),
    }
    message: dict[str, Any] = {
        "method": draw(or_junk(methods)),
        "params": draw(or_junk(shuffled(params))),
    }
    if draw(st.booleans()):
        message["id"] = draw(or_junk(ids))
    return direction, message


@settings(max_examples=examples(3))
@given(st.lists(messages(), min_size=5, max_size=40), st.booleans())
def test_any_message_sequence_is_survived_and_ends_idle(
    sequence: list[tuple[Direction, Any]], as_lines: bool
) -> None:
    """Junk in any field (a list for an item type, a number for a thread id, a huge string,
    null) is the message's fault: never an exception, never an "internal error"."""
    mapping = CodexMapping()
    state = "idle"
    blockers = (*BLOCKING_REQUESTS, "thread/status/changed")  # requests, or waiting flags
    openers = ("turn/started", "item/started")
    seen: set[str] = set()
    for direction, message in sequence:
        method = message.get("method") if isinstance(message, dict) else None
        if direction == "server" and isinstance(method, str):
            seen.add(method)
        if as_lines:
            try:
                line = orjson.dumps(message)
            except TypeError:  # integers past 64 bits: send them as raw text instead
                line = repr(message).encode()
            transition = mapping.feed_line(direction, line)
        else:
            transition = mapping.feed_message(direction, message)
        # Whatever the soup: every change is reported, chained, caused by a message that
        # can cause it; blocked needs a request or flags, working a turn or a tool. A
        # transition that changes only what waits, the agent's facts or the background count
        # keeps the state.
        if transition is not None and not transition.changes_state:
            assert transition.previous.value == state == transition.state.value
            assert transition.changes_agent or transition.changes_background
        elif transition is not None:
            assert transition.previous.value == state != transition.state.value
            assert transition.cause in STATE_METHODS or transition.cause == "response"
            state = transition.state.value
        assert mapping.state == state
        assert state != "blocked" or seen.intersection(blockers)
        assert state != "working" or seen.intersection(openers)
        assert mapping.stats.internal_errors == 0
    transition = mapping.close()
    assert (transition is None) == (state == "idle")
    assert mapping.state == "idle"


@pytest.mark.parametrize("value", [["x"], {"a": 1}, 7, None, HUGE], ids=repr)
@pytest.mark.parametrize(
    "where",
    ["item.type", "item.id", "status.type", "activeFlags[0]", "thread.threadSource", "turn.id"],
)
@pytest.mark.parametrize("lines", [True, False], ids=["lines", "messages"])
def test_a_wrong_shaped_field_never_stops_the_mapping(where: str, value: Any, lines: bool) -> None:
    """The review's case: turn/started, then an event with junk in one field, then
    turn/completed: idle, nothing raised, no handler "bug"."""
    events = {
        "item.type": item("started", "x", "i1"),
        "item.id": item("started", "commandExecution", "x"),
        "status.type": status("th", "x"),
        "activeFlags[0]": status("th", "active", "waitingOnApproval"),
        "thread.threadSource": note("thread/started", thread={"id": "th", "threadSource": "x"}),
        "turn.id": turn_started(turn="x"),
    }
    event = events[where]
    params = event["params"]
    if where == "activeFlags[0]":
        params["status"]["activeFlags"][0] = value
    else:
        outer, inner = where.split(".")
        params[outer][inner] = value
    s = Session(lines=lines).server(turn_started(), event, turn_completed())
    assert s.state == "idle" and s.transitions[-1] == ("idle", "turn/completed")
    assert s.mapping.stats.internal_errors == 0


# -- title threads: the TUI's side threads never count ----------------------------------------

TUI_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TITLE_RECORDINGS = sorted(TUI_FIXTURES.glob("codex-tui-*/title_thread_slow.jsonl"))


def title_thread_started(thread: str = "title") -> dict[str, Any]:
    return note(
        "thread/started",
        thread={"id": thread, "ephemeral": True, "threadSource": "thread_title", "path": None},
    )


def test_a_title_threads_turns_tools_and_requests_open_nothing() -> None:
    s = Session().server(
        title_thread_started(),
        status("title", "active", "waitingOnApproval"),
        turn_started("title", "tt"),
        item("started", "commandExecution", "c", "title", "tt"),
        request("item/commandExecution/requestApproval", 0, threadId="title", turnId="tt"),
    )
    assert s.state == "idle" and s.transitions == []
    assert not s.mapping.has_pending
    assert s.mapping.stats.title_thread_events == 4
    s.server(turn_started("main", "m1"), turn_completed("title", "tt"))
    assert s.state == "working"  # the title thread's end ends nothing of the main thread


def test_what_a_title_thread_opened_before_its_announcement_closes_with_it() -> None:
    s = Session().server(turn_started("title", "tt"), title_thread_started())
    assert s.transitions == [("working", "turn/started"), ("idle", "thread/started")]


def test_other_announced_threads_count() -> None:
    started = note(
        "thread/started", thread={"id": "th", "threadSource": "user", "ephemeral": False}
    )
    s = Session().server(started, turn_started())
    assert s.state == "working"


@pytest.mark.parametrize("path", TITLE_RECORDINGS, ids=[p.parent.name for p in TITLE_RECORDINGS])
def test_the_tuis_title_threads_never_keep_the_member_working(path: Path) -> None:
    """From the TUI recordings (docs/codex-tui.md §9.1): the title threads' own events
    change nothing, and from the main thread's idle status to its next turn the member is
    idle, though the first title turn runs seconds longer."""
    with path.open("rb") as f:
        entries = [e for e in read_entries(f) if e.message is not None]
    server = [e.message for e in entries if e.direction == "server"]
    titles = {
        m["params"]["thread"]["id"]
        for m in server
        if m.get("method") == "thread/started"
        and m["params"]["thread"]["threadSource"] == "thread_title"
    }
    assert titles  # the recording has title threads
    title_events = [m for m in server if m.get("params", {}).get("threadId") in titles]
    assert any(m["method"] == "turn/started" for m in title_events)
    announcements = [
        m
        for m in server
        if m.get("method") == "thread/started" and m["params"]["thread"]["id"] in titles
    ]
    quiet = Session(lines=False).server(*announcements, *title_events)
    assert quiet.transitions == []
    mapping = CodexMapping()
    for entry in entries:
        transition = mapping.feed_message(entry.direction, entry.message)
        if entry.direction != "server" or transition is None:
            continue
        thread = entry.message.get("params", {}).get("threadId")
        assert thread not in titles, (entry.line, transition)


# -- what the mapping does not know: reported once, never fatal ------------------------------


def test_unknown_names_are_reported_once_each() -> None:
    seen: list[Unknown] = []
    s = Session(mapping=CodexMapping(on_unknown=seen.append))
    new_request = request("item/teleport/requestApproval", 9, threadId="th", turnId="t1")
    s.server(
        turn_started(),
        new_request,
        new_request,
        item("started", "teleport", "x"),
        item("started", "teleport", "y"),
        status("th", "active", "waitingOnTeleport"),
        status("th", "paused"),
        note("item/teleport/progress", threadId="th"),  # a notification: not a classified set
    )
    assert seen == [
        Unknown("server request method", "item/teleport/requestApproval"),
        Unknown("item type", "teleport"),
        Unknown("active flag", "waitingOnTeleport"),
        Unknown("thread status", "paused"),
    ]
    assert s.state == "working"  # an unknown request does not block; an unknown item is passive


def test_a_huge_unknown_name_is_reported_cut_short() -> None:
    """An unknown name goes to the log: a 100 kB one must not make a 100 kB log line."""
    seen: list[Unknown] = []
    Session(mapping=CodexMapping(on_unknown=seen.append)).server(item("started", HUGE, "x"))
    (unknown,) = seen
    assert unknown.kind == "item type" and len(unknown.name) < 200
    assert HUGE.startswith(unknown.name.removesuffix("…"))


def test_an_unknown_item_type_counts_as_passive_it_may_revive_but_opens_no_tool() -> None:
    s = Session().server(item("started", "teleport", "x"))
    assert s.state == "idle"
    s.server(turn_started(), turn_completed(), item("started", "teleport", "y"))
    assert s.state == "working"


def test_a_failing_unknown_callback_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    def explode(_: Unknown) -> None:
        raise RuntimeError("report failed")

    s = Session(mapping=CodexMapping(on_unknown=explode))
    s.server(turn_started(), item("started", "teleport", "x"))
    assert s.state == "working"
    assert "report failed" in caplog.text


# -- a bug in a handler: logged with its traceback, counted, survived -------------------------


def test_a_handler_that_raises_is_logged_and_counted_and_the_next_message_is_handled(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import codex_presence.core.codex.handlers as codex_module

    def broken(m: CodexMapping, **params: Any) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(codex_module, "_on_turn_completed", broken)
    s = Session()
    with caplog.at_level("ERROR", logger="codex_presence"):
        s.server(turn_started(), turn_completed())
    assert s.state == "working"  # the completion was lost to the bug...
    stats = s.mapping.stats
    assert (stats.internal_errors, stats.wrong_shape) == (1, 0)
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.name.startswith("codex_presence.")
    assert "turn/completed" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert "Traceback" in caplog.text and "a bug" in caplog.text
    s.server(status("th", "idle"))  # ...and the next message is handled as usual
    assert s.transitions == [("working", "turn/started"), ("idle", "thread/status/changed")]


def test_a_param_named_like_the_handlers_own_argument_is_just_a_param() -> None:
    s = Session().server(note("turn/started", threadId="th", turn={"id": "t"}, m=1))
    assert s.state == "working" and s.mapping.stats.wrong_shape == 0


def test_params_that_do_not_fit_a_handler_are_wrong_shape_not_a_bug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = Session().server(note("turn/started", threadId="th"))  # no turn
    s.server(note("turn/started", threadId=5, turn={"id": "t"}))  # a number for a string
    assert (s.mapping.stats.wrong_shape, s.mapping.stats.internal_errors) == (2, 0)
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# -- a "no, stop": the working before the turn ends is passing --------------------------------


def passing_of(
    session: Session, *messages: tuple[Direction, dict[str, Any]]
) -> list[tuple[str, bool]]:
    """(state, passing) of each change of the state the messages cause (not of what a
    block waits on alone)."""
    out = []
    for direction, message in messages:
        transition = session.mapping.feed_line(direction, orjson.dumps(message) + b"\n")
        if transition is not None and transition.changes_state:
            out.append((transition.state.value, transition.passing))
    return out


def _approval_turn(thread: str = "th", rid: int = 0) -> list[tuple[Direction, dict[str, Any]]]:
    approval = "item/commandExecution/requestApproval"
    return [
        ("server", turn_started(thread)),
        ("server", item("started", "commandExecution", "c", thread)),
        ("server", status(thread, "active", "waitingOnApproval")),
        ("server", request(approval, rid, threadId=thread, turnId="t1", itemId="c")),
    ]


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("item/commandExecution/requestApproval", "cancel"),
        ("item/fileChange/requestApproval", "cancel"),
        ("execCommandApproval", "abort"),
        ("applyPatchApproval", "abort"),
    ],
)
def test_answer_ends_turn_knows_each_approvals_stop(method: str, answer: str) -> None:
    assert answer_ends_turn(method, {"decision": answer})
    assert not answer_ends_turn(method, {"decision": "accept"})
    assert not answer_ends_turn(method, "cancel")  # not a result of the right shape


def test_after_a_cancel_the_working_until_the_turn_ends_is_passing() -> None:
    # As the codex TUI's Esc at an approval (fixtures/codex-tui-0.171.0/approval_denied).
    flow = passing_of(
        Session(),
        *_approval_turn(),
        ("client", {"id": 0, "result": {"decision": "cancel"}}),
        ("server", note("serverRequest/resolved", threadId="th", requestId=0)),
        ("server", item("completed", "commandExecution", "c")),
        ("server", status("th", "active")),
        ("server", status("th", "idle")),
        ("server", turn_completed(status="interrupted")),
    )
    assert flow == [("working", False), ("blocked", False), ("working", True), ("idle", False)]


@pytest.mark.parametrize("decision", ["accept", "decline", "acceptForSession"])
def test_an_answer_that_lets_the_turn_go_on_is_working_for_real(decision: str) -> None:
    flow = passing_of(
        Session(),
        *_approval_turn(),
        ("client", {"id": 0, "result": {"decision": decision}}),
        ("server", status("th", "active")),
    )
    assert flow == [("working", False), ("blocked", False), ("working", False)]


def test_a_turn_that_goes_on_after_a_cancel_is_no_longer_passing() -> None:
    s = Session()
    passing_of(s, *_approval_turn(), ("client", {"id": 0, "result": {"decision": "cancel"}}))
    flow = passing_of(
        s,
        ("server", item("started", "commandExecution", "c2")),  # new work: it goes on
        ("server", status("th", "active")),
    )
    assert flow == [("working", False)]


def test_another_thread_at_work_makes_the_working_real() -> None:
    s = Session()
    passing_of(s, ("server", turn_started("other")))
    flow = passing_of(
        s,
        *_approval_turn(),
        ("client", {"id": 0, "result": {"decision": "cancel"}}),
        ("server", status("th", "active")),
    )
    assert flow == [("blocked", False), ("working", False)]


def test_a_cancel_is_forgotten_once_its_thread_has_ended() -> None:
    s = Session()
    passing_of(
        s,
        *_approval_turn(),
        ("client", {"id": 0, "result": {"decision": "cancel"}}),
        ("server", status("th", "idle")),
    )
    flow = passing_of(s, ("server", note("turn/started", threadId="th", turn={"id": "t2"})))
    assert flow == [("working", False)]  # the next turn is work like any other
