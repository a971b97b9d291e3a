"""The Gemini CLI mapping: the recordings of ``fixtures/gemini-cli-0.61.0/`` replay to their
hand-written timelines, and each rule of :mod:`codex_presence.core.gemini.mapping` opens what
it says and is closed by every event its table names.

The expectations (``<name>.expected.json``) were written by reading each recording and its
keys file and applying the rules by hand; nothing here generates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from codex_presence.core.activity import HandleKind, Waits
from codex_presence.core.gemini.mapping import GeminiMapping
from codex_presence.core.gemini.protocol import (
    CANCELLED,
    HOOK_EVENTS,
    HOOK_NAME,
    HOOK_TIMEOUT_MS,
    SOURCES,
    GeminiSource,
    hook_settings,
    is_cancelled,
    tool_key,
    with_hooks,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gemini-cli-0.61.0"
RECORDINGS = sorted(FIXTURES.glob("*.jsonl"))

Row = tuple[int | None, str, str]
Message = dict[str, Any]


def replay(path: Path) -> list[Row]:
    """``(line, state, cause)`` of every change of state, the end line's included."""
    mapping = GeminiMapping()
    rows: list[Row] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        line = orjson.loads(raw)
        if "end" in line:
            transition = mapping.close(line["end"])
            if transition is not None and transition.changes_state:
                rows.append((None, transition.state.value, transition.cause))
            continue
        for transition in mapping.feed(line["from"], line["msg"], line["t"]):
            if transition.changes_state:
                rows.append((number, transition.state.value, transition.cause))
    return rows


def expected(path: Path) -> list[Row]:
    doc = orjson.loads(path.with_name(f"{path.stem}.expected.json").read_bytes())
    assert doc["scenario"] == path.stem and doc["about"]
    return [(row["line"], row["state"], row["cause"]) for row in doc["timeline"]]


def test_the_fixtures_are_there_each_with_its_expectation_and_keys() -> None:
    assert {p.stem for p in RECORDINGS} == {
        "approval_allow",
        "approval_esc",
        "approval_no",
        "esc_while_waiting",
        "print_prompt",
        "print_tool",
        "prompt",
        "prompt_while_waiting",
        "quit_at_once",
    }
    assert {p.stem for p in RECORDINGS} == {
        p.name.removesuffix(".expected.json") for p in FIXTURES.glob("*.expected.json")
    }
    for path in RECORDINGS:
        keys = orjson.loads(path.with_suffix(".keys.json").read_bytes())
        assert keys and all(k.keys() == {"t", "action"} for k in keys)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_a_recording_is_well_formed(path: Path) -> None:
    lines = [orjson.loads(raw) for raw in path.read_bytes().splitlines()]
    *entries, end = lines
    assert end.keys() == {"t", "end"} and end["end"] == "eof"
    times = [line["t"] for line in lines]
    assert times == sorted(times) and times[0] >= 0
    sessions = set()
    for entry in entries:
        assert entry.keys() == {"t", "from", "msg"} and entry["from"] in SOURCES
        if entry["from"] == "event":
            assert entry["msg"]["hook_event_name"] in {*HOOK_EVENTS, *_OTHER_EVENTS}
            sessions.add(entry["msg"]["session_id"])
    assert len(sessions) == 1  # one gemini session each


_OTHER_EVENTS = {"BeforeModel", "BeforeToolSelection", "AfterModel", "PreCompress"}


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_a_recording_replays_to_its_timeline(path: Path) -> None:
    assert replay(path) == expected(path)


def test_the_expectations_cover_every_state_and_both_sources() -> None:
    rows = [row for path in RECORDINGS for row in expected(path)]
    assert {state for _, state, _ in rows} == {"idle", "working", "blocked"}
    assert {"AfterTool", "AfterAgent", "chat Request cancelled."} <= {c for _, _, c in rows}


# -- the rules, one by one -------------------------------------------------------------------


def hook(event: str, **fields: Any) -> Message:
    return {"session_id": "s1", "transcript_path": "/c.jsonl", "hook_event_name": event, **fields}


def shell(command: str = "echo hi") -> Message:
    return {"tool_name": "run_shell_command", "tool_input": {"command": command}}


ASK = hook("Notification", notification_type="ToolPermission", message="Tool Confirm")
CANCEL: Message = {"id": "x", "type": "info", "content": CANCELLED}


def run(*messages: tuple[GeminiSource, object]) -> tuple[GeminiMapping, list[str]]:
    """Feed the messages (``t`` is their index); the state after each."""
    mapping = GeminiMapping()
    states = []
    for t, (source, message) in enumerate(messages):
        mapping.feed(source, message, float(t))
        states.append(mapping.state)
    return mapping, states


def test_a_turn_opens_at_before_agent_and_closes_at_after_agent() -> None:
    mapping, states = run(
        ("event", hook("SessionStart", source="startup")),
        ("event", hook("BeforeAgent", prompt="hi")),
        ("event", hook("BeforeModel")),
        ("event", hook("AfterModel")),
        ("event", hook("AfterAgent", prompt="hi")),
    )
    assert states == ["idle", "working", "working", "working", "idle"]
    assert mapping.stats.hooks == 3 and mapping.stats.ignored == 2


def test_a_second_before_agent_is_the_same_turn() -> None:
    mapping, states = run(
        ("event", hook("BeforeAgent")),
        ("event", hook("BeforeAgent")),
        ("event", hook("AfterAgent")),
    )
    assert states == ["working", "working", "idle"]
    assert mapping.signal.anomalies.double_open == 0


def test_a_tool_is_working_from_before_tool_to_its_after_tool() -> None:
    _, states = run(
        ("event", hook("BeforeTool", **shell("a"))),
        ("event", hook("BeforeTool", **shell("b"))),
        ("event", hook("AfterTool", **shell("a"), tool_response="{}")),
        ("event", hook("AfterTool", **shell("b"), tool_response="{}")),
    )
    assert states == ["working", "working", "working", "idle"]


def test_an_approval_blocks_until_the_tool_has_run() -> None:
    _, states = run(
        ("event", hook("BeforeAgent")),
        ("event", hook("BeforeTool", **shell())),
        ("event", ASK),
        ("event", hook("AfterTool", **shell())),
        ("event", hook("AfterAgent")),
    )
    assert states == ["working", "working", "blocked", "working", "idle"]


@pytest.mark.parametrize(
    "closer",
    [
        ("event", hook("AfterTool", **shell("other"))),
        ("event", hook("BeforeTool", **shell("next"))),
        ("event", hook("BeforeAgent")),
    ],
    ids=["any AfterTool", "the next BeforeTool", "a new prompt"],
)
def test_what_else_ends_a_block_and_leaves_the_turn_working(
    closer: tuple[GeminiSource, Message],
) -> None:
    _, states = run(
        ("event", hook("BeforeAgent")),
        ("event", hook("BeforeTool", **shell())),
        ("event", ASK),
        closer,
    )
    assert states[-2:] == ["blocked", "working"]


@pytest.mark.parametrize(
    "closer",
    [
        ("event", hook("AfterAgent")),
        ("chat", CANCEL),
        ("event", hook("SessionEnd", reason="exit")),
    ],
    ids=["AfterAgent", "Request cancelled.", "SessionEnd"],
)
def test_the_turns_closers_end_its_tools_and_block_too(
    closer: tuple[GeminiSource, Message],
) -> None:
    mapping, states = run(
        ("event", hook("BeforeAgent")),
        ("event", hook("BeforeTool", **shell())),
        ("event", ASK),
        closer,
    )
    assert states[-2:] == ["blocked", "idle"]
    assert all(mapping.signal.count(kind) == 0 for kind in HandleKind)


def test_the_end_of_the_process_closes_everything() -> None:
    mapping, _ = run(("event", hook("BeforeAgent")), ("event", ASK))
    transition = mapping.close("eof")
    assert transition is not None and (transition.state.value, transition.cause) == ("idle", "eof")
    assert mapping.close("eof") is None


def test_a_late_notification_does_not_block_an_idle_member() -> None:
    mapping, states = run(("event", ASK))
    assert states == ["idle"] and mapping.stats.late == 1


def test_a_cancellation_line_when_idle_is_late_and_other_chat_lines_say_nothing() -> None:
    mapping, states = run(
        ("chat", CANCEL),
        ("event", hook("BeforeAgent")),
        ("chat", {"type": "gemini", "content": "Request cancelled."}),
        ("chat", {"type": "info", "content": "something else"}),
        ("chat", {"$set": {"lastUpdated": "now"}}),
    )
    assert states == ["idle", "working", "working", "working", "working"]
    assert mapping.stats.late == 1 and mapping.stats.cancels == 0


def test_an_after_tool_that_no_before_tool_opened_is_counted_late() -> None:
    mapping, states = run(("event", hook("AfterTool", **shell())))
    assert states == ["idle"] and mapping.stats.late == 1
    assert mapping.signal.anomalies.close_unknown == 0


@pytest.mark.parametrize(
    "message",
    [
        None,
        [],
        "BeforeAgent",
        {"hook_event_name": ["BeforeAgent"]},
        {"hook_event_name": "BeforeTool", "tool_name": 3},
        {"hook_event_name": "BeforeTool"},
        {"hook_event_name": "AfterTool", "tool_name": None},
        {"hook_event_name": "Notification", "notification_type": {"a": 1}},
        {"hook_event_name": "Unknown"},
        {"hook_event_name": "BeforeTool", "tool_name": "t", "tool_input": {"a": [1, {"b": None}]}},
    ],
)
def test_wrong_shapes_are_counted_never_fatal(message: object) -> None:
    mapping = GeminiMapping()
    for source in ("event", "chat"):
        mapping.feed(source, message, 0.0)  # type: ignore[arg-type]
    assert mapping.stats.lines == 2
    assert mapping.deadline is None and mapping.tick(1e9) is None


def test_the_chat_file_matters_only_while_not_idle() -> None:
    mapping = GeminiMapping()
    assert not mapping.wants_follow
    mapping.feed("event", hook("BeforeAgent"), 0.0)
    assert mapping.wants_follow and mapping.background == 0


def test_the_vocabulary() -> None:
    assert is_cancelled(CANCEL) and not is_cancelled({"type": "user", "content": CANCELLED})
    assert tool_key(shell("a")) == ("run_shell_command", '{"command":"a"}')
    assert tool_key({"tool_name": "t", "tool_input": {"b": 1, "a": 2}}) == (
        "t",
        '{"a":2,"b":1}',
    )
    assert tool_key({"tool_name": ""}) is None
    assert HOOK_EVENTS[1] == "BeforeAgent" and "AfterModel" not in HOOK_EVENTS


def test_hook_settings_register_one_named_command_hook_per_event() -> None:
    doc = hook_settings("poster", events=("BeforeAgent", "AfterAgent"))
    assert doc == {
        "hooks": {
            event: [
                {
                    "matcher": "*",
                    "hooks": [
                        {
                            "name": HOOK_NAME,
                            "type": "command",
                            "command": "poster",
                            "timeout": HOOK_TIMEOUT_MS,
                        }
                    ],
                }
            ]
            for event in ("BeforeAgent", "AfterAgent")
        }
    }
    assert set(hook_settings("p")["hooks"]) == set(HOOK_EVENTS)


def test_with_hooks_keeps_the_users_settings_and_hooks_first() -> None:
    mine = {"matcher": "*", "hooks": [{"type": "command", "command": "mine"}]}
    user = {"ui": {"theme": "x"}, "hooks": {"BeforeAgent": [mine], "Custom": [mine]}}
    ours = hook_settings("poster", events=("BeforeAgent", "AfterAgent"))
    merged = with_hooks(user, ours)
    assert merged["ui"] == {"theme": "x"} and merged["hooks"]["Custom"] == [mine]
    assert merged["hooks"]["BeforeAgent"] == [mine, *ours["hooks"]["BeforeAgent"]]
    assert merged["hooks"]["AfterAgent"] == ours["hooks"]["AfterAgent"]
    assert user["hooks"]["BeforeAgent"] == [mine]  # the user's document is not changed
    assert with_hooks({}, ours) == ours


def test_with_hooks_keeps_what_gemini_cannot_read_as_it_is() -> None:
    ours = hook_settings("poster", events=("BeforeAgent",))
    assert with_hooks({"hooks": "junk"}, ours) == {"hooks": "junk"}
    assert with_hooks({"hooks": {"BeforeAgent": 3}}, ours) == {"hooks": {"BeforeAgent": 3}}


def test_an_approval_says_what_it_waits_on_and_every_event_where_the_agent_works() -> None:
    """The recorded approval of a shell command: the blocked transition carries the command
    its Notification's ``details`` name (the runner cuts it to its program at the default
    share level), and the agent's directory is every event's ``cwd``."""
    mapping = GeminiMapping()
    blocked = []
    for raw in (FIXTURES / "approval_allow.jsonl").read_bytes().splitlines():
        line = orjson.loads(raw)
        if "end" in line:
            continue
        for transition in mapping.feed(line["from"], line["msg"], line["t"]):
            if transition.changes_state and transition.state.value == "blocked":
                blocked.append(transition)
    assert [t.waits for t in blocked] == [
        Waits("command", "Confirm Shell Command", "echo hi > made.txt")
    ]
    assert blocked[0].facts.cwd == "/tmp/codex-presence-gemini/approval_allow/work"


@pytest.mark.parametrize(
    ("details", "waits"),
    [
        (
            {"type": "edit", "title": "Confirm Edit", "fileName": "a.py"},
            Waits("file_change", "Confirm Edit", "a.py"),
        ),
        ({"type": "mcp", "title": "Confirm MCP Tool"}, Waits("permission", "Confirm MCP Tool")),
        ("not an object", Waits("permission")),
        (None, Waits("permission")),
    ],
)  # fmt: skip
def test_what_an_approval_waits_on_by_its_kind(details: object, waits: Waits) -> None:
    mapping, _ = run(("event", hook("BeforeAgent", prompt="p")))
    out = mapping.feed(
        "event", hook("Notification", notification_type="ToolPermission", details=details), 1.0
    )
    assert [t.waits for t in out] == [waits]
