"""The field fixtures (``fixtures/field/``) are well-formed, whatever the mapping does.

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
