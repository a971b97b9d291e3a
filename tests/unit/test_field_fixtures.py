"""The field fixtures (``fixtures/field/``) are well-formed, whatever the mapping does; the
Claude Code field fixtures (``fixtures/field-claude-code/``) too, and they replay to their
hand-written timelines here, hooks alone as well.

They are edited copies of real recordings (see ``fixtures/field/README.md``), replayed by
``tests/unit/test_fixtures.py``. This checks what the hand edits could break: the recording
format, the README line of each file, and that each expected row names the message on its
line. The last check
also runs over every codex version's fixtures.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import TimelineBuilder, timeline

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FIELD = FIXTURES / "field"
FIELD_RECORDINGS = sorted(FIELD.glob("*.jsonl"))
EVERY_RECORDING = sorted(
    path
    for directory in [*sorted(FIXTURES.glob("codex-[0-9]*/")), FIELD]
    for path in directory.glob("*.jsonl")
)


def test_there_are_field_fixtures() -> None:
    assert len(FIELD_RECORDINGS) >= 4


@pytest.mark.parametrize("path", FIELD_RECORDINGS, ids=[p.stem for p in FIELD_RECORDINGS])
def test_a_field_recording_is_a_valid_recording(path: Path) -> None:
    with path.open("rb") as lines:
        entries = list(read_entries(lines))
    assert entries[-1].end, "no end line"
    assert not any(e.end for e in entries[:-1]), "an end line before the end"
    assert all(e.message is not None for e in entries[:-1]), "a line that is not a message"
    times = [e.t if e.t is not None else -1.0 for e in entries]
    assert min(times) >= 0, "a line without a time"
    assert times == sorted(times), "t goes back"
    assert (FIELD / f"{path.stem}.expected.json").is_file()
    readme = (FIELD / "README.md").read_text()
    assert f"- `{path.stem}`:" in readme, "no README line"


@pytest.mark.parametrize(
    "path", EVERY_RECORDING, ids=[f"{p.parent.name}/{p.stem}" for p in EVERY_RECORDING]
)
def test_each_expected_row_names_the_message_on_its_line(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    doc = orjson.loads(path.with_name(f"{path.stem}.expected.json").read_bytes())
    assert doc["scenario"] == path.stem
    assert doc["timeline"], "an empty timeline"
    for row in doc["timeline"]:
        assert row["state"] in {"idle", "working", "blocked"}
        assert row["why"]
        if row["line"] is None:
            assert row["cause"] == "eof"
            continue
        entry = orjson.loads(lines[row["line"] - 1])
        message = entry["msg"]
        if row["cause"] == "response":
            assert entry["from"] == "client" and "method" not in message, row
        else:
            assert entry["from"] == "server" and message.get("method") == row["cause"], row


# -- Claude Code in the field (fixtures/field-claude-code/) ----------------------------------

CLAUDE_FIELD = FIXTURES / "field-claude-code"
CLAUDE_FIELD_RECORDINGS = sorted(CLAUDE_FIELD.glob("*.jsonl"))


def _claude_expected(path: Path) -> list[tuple[int | None, str, str]]:
    doc = orjson.loads(path.with_name(f"{path.stem}.expected.json").read_bytes())
    assert doc["scenario"] == path.stem
    return [(row["line"], row["state"], row["cause"]) for row in doc["timeline"]]


def _replayed(lines: list[bytes]) -> list[tuple[int | None, str, str]]:
    return [(r.line, r.state, r.cause) for r in timeline(read_entries(lines))]


def test_there_are_claude_field_fixtures() -> None:
    assert {p.stem for p in CLAUDE_FIELD_RECORDINGS} >= {
        "orphan_subagent_stop",
        "subagent_permission_without_request",
    }


@pytest.mark.parametrize(
    "path", CLAUDE_FIELD_RECORDINGS, ids=[p.stem for p in CLAUDE_FIELD_RECORDINGS]
)
def test_a_claude_field_recording_is_valid_and_replays_to_its_timeline(path: Path) -> None:
    lines = path.read_bytes().splitlines()
    entries = list(read_entries(lines))
    assert entries[-1].end and not any(e.end for e in entries[:-1])
    assert all(e.message is not None for e in entries[:-1]), "a line that is not a message"
    assert {e.direction for e in entries[:-1]} <= {"hook", "transcript", "session"}
    times = [e.t if e.t is not None else -1.0 for e in entries]
    assert min(times) >= 0 and times == sorted(times), "t goes back"
    assert f"- `{path.stem}`:" in (CLAUDE_FIELD / "README.md").read_text(), "no README line"
    assert _replayed(lines) == _claude_expected(path)


def _hooks_only(path: Path) -> list[bytes]:
    """The recording as the mapping sees it when it cannot find claude's session file."""
    return [line for line in path.read_bytes().splitlines() if b'"from":"session"' not in line]


def test_a_subagents_dialog_known_only_by_its_notification_blocks_until_a_tool_moves() -> None:
    # anthropics/claude-code #79177, hooks only: the Notification (no agent_id, no main turn
    # open) blocks; the subagent's PostToolUse after Yes is the dialog's end.
    path = CLAUDE_FIELD / "subagent_permission_without_request.jsonl"
    lines = _hooks_only(path)
    rows = _replayed(lines)
    events = {n: orjson.loads(lines[n - 1])["msg"].get("hook_event_name") for n, _, _ in rows}
    assert [(events[n], state) for n, state, _ in rows] == [
        ("UserPromptSubmit", "working"),
        ("Notification", "blocked"),
        ("PostToolUse", "working"),
        ("SubagentStop", "idle"),
        ("UserPromptSubmit", "working"),
        ("Stop", "idle"),
    ]


def test_an_orphan_subagent_stop_ends_nothing_and_leaks_nothing() -> None:
    # anthropics/claude-code #89555: the orphan stop (19) ends no subagent that runs; the
    # one that never got its stop counts as background work from the Stop that lists it
    # (13) to its <task-notification> (20), and nothing is left open, with or without the
    # session file.
    path = CLAUDE_FIELD / "orphan_subagent_stop.jsonl"
    for lines in (path.read_bytes().splitlines(), _hooks_only(path)):
        builder = TimelineBuilder()
        rows = [row for entry in read_entries(lines) for row in builder.feed(entry)]
        assert builder.finish() is None
        assert [row.state for row in rows] == ["working", "idle"]
        changes = [
            (orjson.loads(lines[b.line - 1])["msg"]["hook_event_name"], b.count)
            for b in builder.background
            if b.line is not None
        ]
        assert changes == [("Stop", 1), ("UserPromptSubmit", 0)]
        assert builder.mapping.background == 0
