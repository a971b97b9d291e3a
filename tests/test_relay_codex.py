"""The real codex app-server behind ``wrap``, driven by a client through a turn (once per
codex version with fixtures, against that version's expectations).

The client (``tests/support/codex_driver.py``) records what it wrote and what it read; ``wrap``
records (``--record``) what it read from each side. The two must agree message for
message in both directions, and the transitions wrap logged on stderr must be the
scenario's expected timeline. Needs the codex binaries (``tests/run.sh`` installs them):
without one these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import orjson
import pytest

from codex_presence.core.recording import read_entries
from tests.support.scenarios import record

pytestmark = pytest.mark.codex


def wrapped(codex: Path, tmp_path: Path, record_to: Path) -> Path:
    """An executable that the driver starts as its "codex": wrap in front of the real one."""
    script = tmp_path / "codex-behind-wrap"
    command = [sys.executable, "-m", "codex_presence", "wrap", "--record", str(record_to), "--"]
    script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} {shlex.quote(str(codex))} "$@"\n')
    script.chmod(0o755)
    return script


def messages(path: Path, direction: str) -> list[object]:
    with path.open("rb") as lines:
        return [
            e.message if e.message is not None else e.raw
            for e in read_entries(lines)
            # wrap's recording starts with its version line and ends with its end line
            if e.direction == direction and not e.end and e.version is None
        ]


def expected(fixtures: Path, name: str) -> list[tuple[str, str]]:
    doc = orjson.loads((fixtures / f"{name}.expected.json").read_bytes())
    return [(row["state"], row["cause"]) for row in doc["timeline"]]


@pytest.mark.parametrize("name", ["command", "approval_accepted"])
def test_real_codex_through_wrap(
    name: str, codex: Path, codex_fixtures: Path, tmp_path: Path
) -> None:
    client_side = tmp_path / "client.jsonl"
    wrap_side = tmp_path / "wrap.jsonl"
    root = tmp_path / "run"
    record(name, client_side, root=root, codex=wrapped(codex, tmp_path, wrap_side))

    # What the client read is exactly what codex wrote, and the other way round.
    from_codex = messages(wrap_side, "server")
    assert len(from_codex) > 10
    assert messages(client_side, "server") == from_codex
    assert messages(client_side, "client") == messages(wrap_side, "client")

    # wrap's stderr went where the driver puts codex's stderr; its timeline is right.
    log = (root / "codex-stderr.log").read_text(errors="replace").splitlines()
    transition = re.compile(r"codex-presence: (idle|working|blocked) \((.+)\)$")
    timeline = [match.groups() for line in log if (match := transition.match(line))]
    assert timeline == expected(codex_fixtures, name)
