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


def test_text_timeline_names_time_state_event_and_cause(recording: Path) -> None:
    """In words a person knows, with the line and the message's name in parentheses."""
    result = run(str(recording))
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "    0.100  working  turn started  (line 2, turn/started)",
        "    0.300  blocked  approval requested (a command)"
        "  (line 4, item/commandExecution/requestApproval)",
        "    0.900  working  approved  (line 5, response)",
        "    1.000  idle     session ended  (eof)",
    ]
    assert result.stderr == ""


def test_speed_replays_in_scaled_real_time(recording: Path) -> None:
    result = run("--speed", "10", "--json", str(recording))
    assert result.returncode == 0
    unpaced = run("--json", str(recording)).stdout
    assert result.stdout.splitlines() == unpaced.splitlines()  # the pace: see the next test


@pytest.mark.anyio
async def test_paced_waits_the_recorded_gaps_scaled_by_speed() -> None:
    from codex_presence.cli.replay import paced
    from codex_presence.core.recording import read_entries

    lines = [encode_entry(t, d, orjson.dumps(m)) for t, d, m in SESSION]  # type: ignore[arg-type]
    now = 100.0
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        nonlocal now
        slept.append(round(seconds, 6))
        now += seconds

    got = [e.t async for e in paced(read_entries(lines), 2.0, clock=lambda: now, sleep=sleep)]
    assert got == [0.0, 0.1, 0.2, 0.3, 0.9]
    assert slept == [0.05, 0.05, 0.05, 0.3]  # the gaps 0.1, 0.1, 0.1, 0.6, halved


def test_standard_input_and_a_reader_that_goes_away(recording: Path) -> None:
    piped = subprocess.run(
        [sys.executable, "-m", "codex_presence", "replay", "--json", "-"],
        input=recording.read_bytes(),
        capture_output=True,
        timeout=60,
    )
    assert piped.returncode == 0
    assert len(piped.stdout.splitlines()) == 4
    # | head -1 on a long output: the closed pipe ends the replay quietly, status 0
    with subprocess.Popen(
        [sys.executable, "-m", "codex_presence", "replay", *[str(recording)] * 3000],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        assert proc.wait(60) == 0
        assert proc.stderr.read() == b""


def test_what_a_replay_cannot_vouch_for_is_said_on_stderr(tmp_path: Path) -> None:
    gappy = tmp_path / "gappy.jsonl"
    gappy.write_bytes(
        encode_entry(0.1, "server", orjson.dumps(SESSION[1][2]))
        + b'{"t":0.500000,"from":"server","gap":65536}\n'
        + b'{"t":0.7,"from":"server","raw_b64":"not base64!"}\n'
        + b'{"t":0.900000,"end":"eof"}\n'
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\n\x00\x00\xff\n")
    result = run("--json", str(gappy), str(empty), str(binary))
    assert result.returncode == 1  # two of the three hold nothing to replay
    assert "Traceback" not in result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [(r["file"], r["t"], r["state"]) for r in rows] == [
        (str(gappy), 0.1, "working"),
        (str(gappy), 0.9, "idle"),  # dated by the end line
    ]
    said = result.stderr.splitlines()
    assert said == [
        f"codex-presence replay: {gappy}: a gap at 0.500 s (line 2): the recorder left out"
        " 65536 bytes from the server; the timeline after it may differ from the session's",
        f"codex-presence replay: {empty}: nothing to replay: the file is empty",
        f"codex-presence replay: {binary}: nothing to replay: no line is JSON: not a recording"
        " or app-server output?",
    ]


def test_json_without_app_server_traffic_is_nothing_to_replay(tmp_path: Path) -> None:
    for name, content in [
        ("objects.jsonl", b'{"a": 1}\n{"b": [2]}\n'),
        ("array.jsonl", b'[1, 2]\n"text"\n'),
        ("entries.jsonl", b'{"t": 0.1, "from": "server", "msg": {"hello": 1}}\n'),
    ]:
        path = tmp_path / name
        path.write_bytes(content)
        result = run(str(path))
        assert (result.returncode, result.stdout) == (1, ""), name
        assert result.stderr == (
            f"codex-presence replay: {path}: nothing to replay: JSON, but no app-server"
            " (JSON-RPC), Claude Code or Gemini CLI message\n"
        ), name
    # A session that never changed the state is a session: said, and not an error.
    quiet = tmp_path / "quiet.jsonl"
    quiet.write_bytes(encode_entry(0.0, "client", orjson.dumps(SESSION[0][2])))
    result = run(str(quiet))
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr.endswith("no message that could change the state\n")


def test_a_recording_cut_mid_line_is_said_and_replays_what_it_holds(
    recording: Path, tmp_path: Path
) -> None:
    whole = recording.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(whole[: whole.index(b"\n", whole.index(b"requestApproval")) + 30])
    result = run("--json", str(cut))
    assert result.returncode == 0  # what came before the cut replays
    assert [orjson.loads(line)["cause"] for line in result.stdout.splitlines()] == [
        "turn/started",
        "item/commandExecution/requestApproval",
        "eof",
    ]
    assert result.stderr == (
        f"codex-presence replay: {cut}: line 5 is cut short and there is no end line: the"
        " recording was cut off mid-line (the session killed, or the file copied while it was"
        " written)\n"
    )
    first = tmp_path / "first.jsonl"
    first.write_bytes(whole[:40])
    result = run(str(first))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines()[-1] == (
        f"codex-presence replay: {first}: nothing to replay: cut off within its first line"
    )


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
