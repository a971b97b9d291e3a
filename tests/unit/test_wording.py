"""The words for what a session does (issue 15): transition causes as events a person
knows, and the demo's running account, from real recordings and from any input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codex_presence.core.codex.words import Narrator
from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import timeline
from codex_presence.core.wording import event_words

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEMO = FIXTURES / "codex-0.169.0" / "demo_session.jsonl"


def entries(path: Path) -> list[Any]:
    return list(read_entries(path.read_bytes().splitlines()))


def test_the_demo_sessions_timeline_in_words() -> None:
    rows = timeline(entries(DEMO))
    assert [(row.state, row.event, row.cause) for row in rows] == [
        ("working", "turn started", "turn/started"),
        ("blocked", "approval requested", "thread/status/changed"),
        ("working", "answered: working again", "thread/status/changed"),
        ("idle", "turn over", "thread/status/changed"),
        ("working", "turn started", "turn/started"),
        ("idle", "turn over", "thread/status/changed"),
    ]


def test_the_demo_session_told_step_by_step() -> None:
    narrator = Narrator()
    told = [
        (entry.line, said)
        for entry in entries(DEMO)
        if (said := narrator.feed(entry.direction, entry.message)) is not None
    ]
    build = "`for i in 1 2 3; do echo step $i; sleep 1; done`"
    assert told == [
        (8, "the user asks: “please run the build”"),
        (13, "codex works on “please run the build”"),
        (20, "codex says: “Let me check the build.”"),
        (23, f"codex asks to run {build} — waiting for approval"),
        (24, "the command approved"),
        (29, "the command finished (exit 0)"),
        (37, "codex says: “The build passed all three steps.”"),
        (42, "turn completed"),
        (43, "the user asks: “thanks”"),
        (47, "codex works on “thanks”"),
        (53, "codex says: “You're welcome!”"),
        (58, "turn completed"),
    ]


@pytest.mark.parametrize(
    ("cause", "message", "previous", "words"),
    [
        (
            "turn/completed",
            {"params": {"turn": {"status": "completed"}}},
            "working",
            "turn completed",
        ),
        (
            "turn/completed",
            {"params": {"turn": {"status": "interrupted"}}},
            "working",
            "turn interrupted",
        ),
        ("turn/completed", {"params": {"turn": {"status": "failed"}}}, "blocked", "turn failed"),
        (
            "thread/status/changed",
            {"params": {"status": {"type": "active", "activeFlags": ["waitingOnUserInput"]}}},
            "working",
            "input requested",
        ),
        (
            "thread/status/changed",
            {"params": {"status": {"type": "systemError"}}},
            "working",
            "turn over: thread error",
        ),
        (
            "item/started",
            {"params": {"item": {"type": "commandExecution"}}},
            "idle",
            "command started: working again",
        ),
        (
            "item/completed",
            {"params": {"item": {"type": "fileChange"}}},
            "working",
            "file change finished",
        ),
        ("item/fileChange/requestApproval", None, "working", "approval requested (a file change)"),
        ("mcpServer/elicitation/request", None, "working", "an MCP server asks for input"),
        ("response", {"id": 1, "result": {"decision": "decline"}}, "blocked", "declined"),
        (
            "response",
            {"id": 1, "result": {"decision": {"acceptWithExecpolicyAmendment": {}}}},
            "blocked",
            "approved",
        ),
        ("response", {"id": 1, "result": {"action": "cancel"}}, "blocked", "cancelled"),
        ("response", {"id": 1, "result": {"answers": {}}}, "blocked", "answered"),
        ("hangup", None, "blocked", "the client hung up"),
        (
            "PermissionRequest",
            {"hook_event_name": "PermissionRequest"},
            "working",
            "permission requested",
        ),
        ("Stop", None, "working", "turn completed"),
        ("transcript interrupt", None, "working", "interrupted"),
        ("a/new/method", None, "working", "a/new/method"),  # no words for it: said as it is
        ("Notification x\x1b[2J", None, "working", "Notification x\\x1b[2J"),  # escaped
        ("item/started", {"params": {"item": {"type": "new\x07"}}}, "working", "new\\x07 started"),
    ],
)
def test_event_words(cause: str, message: Any, previous: str, words: str) -> None:
    assert event_words(cause, message, previous=previous) == words


def test_requests_and_their_answers_are_told_as_a_pair() -> None:
    narrator = Narrator(width=20)
    ask = {
        "method": "item/commandExecution/requestApproval",
        "id": "r1",
        "params": {"command": "/bin/bash -lc 'rm -rf build && make everything \x1b[2J'"},
    }
    assert narrator.feed("server", ask) == (
        "codex asks to run `rm -rf build && mak…` — waiting for approval"
    )
    question = {"method": "item/tool/requestUserInput", "id": 7, "params": {}}
    assert narrator.feed("server", question) == "codex asks a question — waiting for an answer"
    assert narrator.feed("client", {"id": 7, "result": {"answers": {}}}) == "the question answered"
    assert narrator.feed("client", {"id": "r1", "result": {"decision": "cancel"}}) == (
        "the command cancelled"
    )
    assert narrator.feed("client", {"id": "r1", "result": {}}) is None  # answered already
    elicit = {"method": "mcpServer/elicitation/request", "id": 3, "params": {"serverName": "x\x07"}}
    assert (
        narrator.feed("server", elicit)
        == "codex asks for input (for x\\x07) — waiting for an answer"
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
METHODS = st.sampled_from(
    [
        "turn/start",
        "turn/started",
        "turn/completed",
        "thread/status/changed",
        "item/started",
        "item/completed",
        "item/commandExecution/requestApproval",
        "mcpServer/elicitation/request",
        "item/tool/requestUserInput",
    ]
)
MESSAGES = st.fixed_dictionaries(
    {},
    optional={"method": METHODS | JSON, "id": JSON, "params": JSON, "result": JSON},
)


@given(st.lists(st.tuples(st.sampled_from(["client", "server"]), MESSAGES | JSON), max_size=20))
def test_any_messages_are_told_without_raising(feed: list[tuple[str, Any]]) -> None:
    narrator = Narrator()
    for direction, message in feed:
        said = narrator.feed(direction, message)
        assert said is None or (isinstance(said, str) and said)
        method = message.get("method") if isinstance(message, dict) else None
        cause = method if isinstance(method, str) else "response"
        assert isinstance(event_words(cause, message, previous="blocked"), str)
