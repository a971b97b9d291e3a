"""Every real-codex recording replays to its hand-written timeline, in both file formats.

The expectations in ``fixtures/codex-0.169.0/<name>.expected.json`` were written by reading
each recording and applying the mapping rules by hand; nothing here generates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import timeline
from tests.support.scenarios import SCENARIOS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "codex-0.169.0"
RECORDINGS = sorted(FIXTURES.glob("*.jsonl"))

Row = tuple[int | None, str, str]


def expected(name: str) -> list[Row]:
    doc = orjson.loads((FIXTURES / f"{name}.expected.json").read_bytes())
    assert doc["scenario"] == name
    return [(row["line"], row["state"], row["cause"]) for row in doc["timeline"]]


def replay(path: Path) -> list[Row]:
    with path.open("rb") as lines:
        return [(row.line, row.state, row.cause) for row in timeline(read_entries(lines))]


def test_every_scenario_has_a_fixture_and_an_expectation() -> None:
    recorded = {p.stem for p in RECORDINGS}
    assert recorded == set(SCENARIOS)
    for path in RECORDINGS:
        assert (FIXTURES / f"{path.stem}.expected.json").is_file(), path.name
    for path in FIXTURES.glob("*.expected.json"):
        assert (FIXTURES / path.name.replace(".expected.json", ".jsonl")).is_file(), path.name


def test_the_fixtures_cover_every_state() -> None:
    states = {state for path in RECORDINGS for _, state, _ in expected(path.stem)}
    assert states == {"idle", "working", "blocked"}


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_recording_replays_to_expected_timeline(path: Path) -> None:
    assert replay(path) == expected(path.stem)


def project_server_stdout(path: Path, out: Path) -> dict[int, int]:
    """Write what codex itself wrote (one message per line); map recording → output lines."""
    mapping: dict[int, int] = {}
    lines: list[bytes] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        entry: dict[str, Any] = orjson.loads(raw)
        if entry["from"] != "server":
            continue
        assert "msg" in entry, f"{path.name}:{number}: server line that was not JSON"
        lines.append(orjson.dumps(entry["msg"]))
        mapping[number] = len(lines)
    out.write_bytes(b"".join(line + b"\n" for line in lines))
    return mapping


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_server_stdout_projection_replays_to_expected_timeline(path: Path, tmp_path: Path) -> None:
    projected = tmp_path / f"{path.stem}.stdout.jsonl"
    mapping = project_server_stdout(path, projected)
    with projected.open("rb") as lines:
        entries = list(read_entries(lines))
    assert entries, "empty projection"
    assert all(e.t is None and e.direction == "server" for e in entries), "not read as stdout"
    want: list[Row] = []
    for line, state, cause in expected(path.stem):
        if line is not None:
            assert line in mapping, f"expected transition on a client line {line}"
            line = mapping[line]
        want.append((line, state, cause))
    got = [(row.line, row.state, row.cause) for row in timeline(entries)]
    assert got == want
