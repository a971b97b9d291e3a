"""Every real-codex recording replays to its hand-written timeline, in both file formats.

One directory per codex version, ``fixtures/codex-<version>/``, and the field recordings
(``fixtures/field/``); the expectations in
``<name>.expected.json`` were written by reading each recording and applying the mapping
rules by hand; nothing here generates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import timeline
from tests.support.scenarios import SCENARIOS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
VERSION_DIRS = sorted(FIXTURES.glob("codex-[0-9]*/"))
"""One directory of recordings per codex version: each holds every scenario."""
REPLAYED = [*VERSION_DIRS, FIXTURES / "field"]
"""The directories replayed below: every version's, and ``fixtures/field/`` (edited
recordings of what codex does in the field, by public reports; its README says which)."""
RECORDINGS = sorted(path for directory in REPLAYED for path in directory.glob("*.jsonl"))
IDS = [f"{path.parent.name}/{path.stem}" for path in RECORDINGS]

Row = tuple[int | None, str, str]


def expected(path: Path) -> list[Row]:
    """The hand-written timeline of the recording at ``path``."""
    doc = orjson.loads(path.with_name(f"{path.stem}.expected.json").read_bytes())
    assert doc["scenario"] == path.stem
    return [(row["line"], row["state"], row["cause"]) for row in doc["timeline"]]


def replay(path: Path) -> list[Row]:
    with path.open("rb") as lines:
        return [(row.line, row.state, row.cause) for row in timeline(read_entries(lines))]


def test_there_are_fixtures_of_more_than_one_version() -> None:
    assert len(VERSION_DIRS) >= 2, VERSION_DIRS


@pytest.mark.parametrize("directory", VERSION_DIRS, ids=[d.name for d in VERSION_DIRS])
def test_every_scenario_has_a_fixture_and_an_expectation(directory: Path) -> None:
    recorded = {p.stem for p in directory.glob("*.jsonl")}
    assert recorded == set(SCENARIOS)


@pytest.mark.parametrize("directory", REPLAYED, ids=[d.name for d in REPLAYED])
def test_every_recording_has_an_expectation_and_back(directory: Path) -> None:
    for path in directory.glob("*.jsonl"):
        assert (directory / f"{path.stem}.expected.json").is_file(), path.name
    for path in directory.glob("*.expected.json"):
        assert (directory / path.name.replace(".expected.json", ".jsonl")).is_file(), path.name


@pytest.mark.parametrize("directory", VERSION_DIRS, ids=[d.name for d in VERSION_DIRS])
def test_the_fixtures_cover_every_state(directory: Path) -> None:
    states = {state for path in directory.glob("*.jsonl") for _, state, _ in expected(path)}
    assert states == {"idle", "working", "blocked"}


@pytest.mark.parametrize("path", RECORDINGS, ids=IDS)
def test_recording_replays_to_expected_timeline(path: Path) -> None:
    assert replay(path) == expected(path)


def project_server_stdout(path: Path, out: Path) -> dict[int, int]:
    """Write what codex itself wrote (one message per line); map recording → output lines."""
    mapping: dict[int, int] = {}
    lines: list[bytes] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        entry: dict[str, Any] = orjson.loads(raw)
        if entry.get("from") != "server":  # client lines, and the end line
            continue
        assert "msg" in entry, f"{path.name}:{number}: server line that was not JSON"
        lines.append(orjson.dumps(entry["msg"]))
        mapping[number] = len(lines)
    out.write_bytes(b"".join(line + b"\n" for line in lines))
    return mapping


@pytest.mark.parametrize("path", RECORDINGS, ids=IDS)
def test_server_stdout_projection_replays_to_expected_timeline(path: Path, tmp_path: Path) -> None:
    projected = tmp_path / f"{path.stem}.stdout.jsonl"
    mapping = project_server_stdout(path, projected)
    with projected.open("rb") as lines:
        entries = list(read_entries(lines))
    assert entries, "empty projection"
    assert all(e.t is None and e.direction == "server" for e in entries), "not read as stdout"
    want: list[Row] = []
    for line, state, cause in expected(path):
        if line is not None:
            assert line in mapping, f"expected transition on a client line {line}"
            line = mapping[line]
        want.append((line, state, cause))
    got = [(row.line, row.state, row.cause) for row in timeline(entries)]
    assert got == want
