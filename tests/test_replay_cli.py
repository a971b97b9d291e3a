"""``codex-presence replay``: the timeline printed for a recording, its exit statuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from codex_presence import encode_entry

SESSION = [
    (0.0, "client", {"method": "turn/start", "id": 2, "params": {"threadId": "a", "input": []}}),
    (0.1, "server", {"method": "turn/started", "params": {"threadId": "a", "turn": {"id": "t"}}}),
    (0.2, "server", {"method": "item/agentMessage/delta", "params": {"delta": "x"}}),
    (
        0.3,
        "server",
        {
            "method": "item/commandExecution/requestApproval",
            "id": 0,
            "params": {"threadId": "a", "turnId": "t", "itemId": "c"},
        },
    ),
    (0.9, "client", {"id": 0, "result": {"decision": "accept"}}),
]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "codex_presence", "replay", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    with path.open("wb") as out:
        for t, direction, message in SESSION:
            out.write(encode_entry(t, direction, orjson.dumps(message)))  # type: ignore[arg-type]
        out.write(encode_entry(1.0, "server", b"not json"))
    return path


def test_json_timeline(recording: Path) -> None:
    result = run("--json", str(recording))
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert rows == [
        {"t": 0.1, "line": 2, "state": "working", "cause": "turn/started"},
        {"t": 0.3, "line": 4, "state": "blocked", "cause": "item/commandExecution/requestApproval"},
        {"t": 0.9, "line": 5, "state": "working", "cause": "response"},
        {"t": 1.0, "line": None, "state": "idle", "cause": "eof"},
    ]


def test_text_timeline_names_time_state_and_cause(recording: Path) -> None:
    result = run(str(recording))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    assert "0.100" in lines[0] and "working" in lines[0] and "turn/started" in lines[0]
    assert "idle" in lines[-1] and "eof" in lines[-1]
    assert result.stderr == ""


def test_speed_replays_in_scaled_real_time(recording: Path) -> None:
    result = run("--speed", "10", "--json", str(recording))
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 4


def test_server_stdout_file(tmp_path: Path) -> None:
    path = tmp_path / "stdout.jsonl"
    path.write_bytes(b"".join(orjson.dumps(m) + b"\n" for _, d, m in SESSION if d == "server"))
    rows = [orjson.loads(line) for line in run("--json", str(path)).stdout.splitlines()]
    assert [(r["t"], r["line"], r["state"]) for r in rows] == [
        (None, 1, "working"),
        (None, 3, "blocked"),
        (None, None, "idle"),
    ]


@pytest.mark.parametrize("bad", ["missing.jsonl", "."])
def test_unreadable_file_is_a_one_line_error_with_status_2(tmp_path: Path, bad: str) -> None:
    result = run(str(tmp_path / bad))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot read" in result.stderr


def test_bad_speed_is_a_usage_error(recording: Path) -> None:
    result = run("--speed", "0", str(recording))
    assert result.returncode == 2 and "--speed" in result.stderr
