"""Re-record every scenario live against the real codex binary and check its timeline.

The states and causes must equal the fixture's hand-written expectation (line numbers may
differ from run to run: messages of different tasks interleave). Runs once per codex
version with fixtures (``fixtures/codex-<version>/``, the binaries ``tests/run.sh``
installs); without a binary these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import timeline
from tests.support.scenarios import SCENARIOS, record

pytestmark = [pytest.mark.codex, pytest.mark.slow]


def expected(fixtures: Path, name: str) -> list[tuple[str, str]]:
    doc = orjson.loads((fixtures / f"{name}.expected.json").read_bytes())
    return [(row["state"], row["cause"]) for row in doc["timeline"]]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_live_timeline_matches_fixture(
    name: str, codex: Path, codex_fixtures: Path, tmp_path: Path
) -> None:
    out = tmp_path / f"{name}.jsonl"
    record(name, out, root=tmp_path / "run", codex=codex)
    with out.open("rb") as lines:
        got = [(row.state, row.cause) for row in timeline(read_entries(lines))]
    assert got == expected(codex_fixtures, name), f"live recording kept at {out}"
