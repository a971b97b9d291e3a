"""The Claude Code recordings in ``fixtures/claude-code-2.1.332/`` are well formed.

Their expected timelines are not written yet; this checks only the recording format that
docs/claude-code-hooks.md proposes, so that the mapping can be built on the files as they
are: one JSON object a line, hook / transcript / session entries in time order, the end line
last, and a keys file of driver actions beside each.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

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
