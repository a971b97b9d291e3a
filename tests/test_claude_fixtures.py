"""The Claude Code recordings in ``fixtures/claude-code-2.1.332/`` are well formed, and each
replays to its hand-written timeline.

The format (docs/claude-code-hooks.md, the project's recording format with the sources
``hook``, ``transcript`` and ``session``): one JSON object a line, in time order, the end line
last, and a keys file of driver actions beside each. The expectations in
``<name>.expected.json`` were written by reading each recording (and its keys file) and
applying the rules of :mod:`codex_presence.core.claude.mapping` by hand; nothing here generates
them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from codex_presence.core.claude.mapping import ClaudeMapping
from codex_presence.core.recording import read_entries, read_relevant_entries
from codex_presence.core.timeline import TimelineBuilder, timeline
from tests.support.claude_scenarios import FIXTURES, RECORDED_TYPES, SCENARIOS

RECORDINGS = sorted(p for p in FIXTURES.glob("*.jsonl"))


def test_every_scenario_has_a_recording_and_every_recording_a_scenario() -> None:
    assert sorted(p.stem for p in RECORDINGS) == sorted(SCENARIOS)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_a_recording_is_well_formed(path: Path) -> None:
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    *entries, end = lines
    assert end.keys() == {"t", "end"} and end["end"] == "eof"
    times = [e["t"] for e in lines]
    assert times == sorted(times) and times[0] >= 0
    sources = set()
    for entry in entries:
        assert entry.keys() == {"t", "from", "msg"}
        msg = entry["msg"]
        sources.add(entry["from"])
        if entry["from"] == "hook":
            assert isinstance(msg["hook_event_name"], str) and msg["session_id"]
        elif entry["from"] == "transcript":
            assert msg["type"] in RECORDED_TYPES
        else:
            assert entry["from"] == "session" and "pid" in msg
    assert "hook" in sources and "session" in sources
    actions = orjson.loads(path.with_suffix(".keys.json").read_bytes())
    assert actions and all(a.keys() == {"t", "action"} for a in actions)


def test_the_sessions_are_all_of_one_claude_session_each() -> None:
    for path in RECORDINGS:
        entries = [orjson.loads(line) for line in path.read_bytes().splitlines()[:-1]]
        ids = {e["msg"]["session_id"] for e in entries if e["from"] == "hook"}
        ids |= {e["msg"]["sessionId"] for e in entries if e["from"] == "session"}
        assert len(ids) == 1, path.stem


Row = tuple[int | None, str, str]


def expected(path: Path) -> list[Row]:
    doc = orjson.loads(path.with_name(f"{path.stem}.expected.json").read_bytes())
    assert doc["scenario"] == path.stem
    return [(row["line"], row["state"], row["cause"]) for row in doc["timeline"]]


def test_every_recording_has_an_expectation_and_back() -> None:
    assert {p.stem for p in RECORDINGS} == {
        p.name.removesuffix(".expected.json") for p in FIXTURES.glob("*.expected.json")
    }


def test_the_expectations_cover_every_state() -> None:
    states = {state for path in RECORDINGS for _, state, _ in expected(path)}
    assert states == {"idle", "working", "blocked"}


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_recording_replays_to_expected_timeline(path: Path) -> None:
    with path.open("rb") as lines:
        rows = timeline(read_entries(lines))
    assert [(row.line, row.state, row.cause) for row in rows] == expected(path)
    fast = timeline(read_relevant_entries(path.read_bytes()))
    assert fast == rows, "replay's reader gives another timeline"


FILE_LED = sorted((FIXTURES.parent / f"{FIXTURES.name}-file-led").glob("*.jsonl"))
"""The runner's own recordings where the file leads, claude's prompt history in them."""


def test_there_are_file_led_recordings_with_the_prompt_history() -> None:
    assert FILE_LED
    for path in FILE_LED:
        sources = {orjson.loads(line).get("from") for line in path.read_bytes().splitlines()}
        assert {"hook", "session", "history"} <= sources, path.stem


@pytest.mark.parametrize("path", FILE_LED, ids=lambda p: p.stem)
def test_a_file_led_recording_replays_to_its_expected_timeline(path: Path) -> None:
    with path.open("rb") as lines:
        rows = timeline(read_entries(lines))
    assert [(row.line, row.state, row.cause) for row in rows] == expected(path)
    assert timeline(read_relevant_entries(path.read_bytes())) == rows


PRINTS = {
    "print_tool": "claude -p writes busy once and may leave without idle: its hooks lead",
    "print_tool_fails": "the same",
    "print_api_error": "the same",
}
"""Recordings of print mode: it keeps every hook (it draws no spinner to name them in)."""
INTERACTIVE = [p for p in RECORDINGS if p.stem not in PRINTS]


@pytest.mark.parametrize("path", INTERACTIVE, ids=lambda p: p.stem)
def test_the_session_file_alone_gives_the_same_states(path: Path) -> None:
    """Where the file leads (issue 27), claude sends no turn hook: the same recording with
    every hook taken out, through the mapping with ``file_led``, gives the hand-written
    timeline's states in the same order (when, differs: the file lags the hooks by up to
    ~0.13 s, and leads them on interrupts). Only print mode's are left out."""
    assert {p.stem for p in RECORDINGS if SCENARIOS[p.stem].drive is None} == set(PRINTS)
    builder = TimelineBuilder(ClaudeMapping(file_led=True))
    rows = []
    with path.open("rb") as lines:
        for entry in read_entries(lines):
            if entry.direction != "hook":
                rows += builder.feed(entry)
    if (last := builder.finish()) is not None:
        rows.append(last)
    assert [row.state for row in rows] == [state for _, state, _ in expected(path)]
    assert all(row.cause.startswith("session ") for row in rows)  # the file said each


def test_a_recording_with_a_session_start_replays_file_led() -> None:
    """SessionStart is registered only where the file leads: ``replay`` of such a session's
    recording (here one of the fixtures as it would have been recorded then: SessionStart
    first, no turn hook) adopts the file's views at once, as the live session did."""
    path = FIXTURES / "permission_yes.jsonl"
    entries = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    start = {"hook_event_name": "SessionStart", "session_id": "s", "source": "startup"}
    kept = [e for e in entries if e.get("from") != "hook"]
    lines = [{"t": 0.3, "from": "hook", "msg": start}, *kept]
    rows = timeline(read_relevant_entries(b"\n".join(map(orjson.dumps, lines)) + b"\n"))
    assert [row.state for row in rows] == ["working", "blocked", "working", "idle"]
    assert {row.cause for row in rows} == {"session busy", "session waiting", "session idle"}
    busy = next(e for e in kept if e.get("msg", {}).get("status") == "busy")
    assert rows[0].t == busy["t"]  # at once: no settling time


def test_the_replay_command_gives_a_claude_code_recordings_timeline() -> None:
    path = FIXTURES / "esc_during_stream.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "codex_presence", "replay", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and result.stderr == ""
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [(r["line"], r["state"], r["cause"]) for r in rows] == expected(path)
    # The file's idle (line 6, 2.838 s) was adopted when it had held 1 s with no hook.
    assert rows[-1]["t"] == pytest.approx(2.838265 + 1.0)
