"""Recordings say how they end (issue 23, part 4): a recording starts with the format's
version line and ends with the end line only when the session ended; ``replay`` of a
version 2 recording without it says that it stops mid-session (the runner killed, the disk
full), not "session ended (eof)"; recordings of version 1 (no version line: the fixtures)
replay as they always did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence.agent.recorder import Recorder
from codex_presence.core.recording import (
    VERSION,
    encode_end,
    encode_entry,
    encode_version,
    read_entries,
    read_relevant_entries,
)
from codex_presence.core.timeline import STOPPED, TimelineBuilder, timeline
from tests.support.waiting import WAIT, eventually, exits

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CLI = [sys.executable, "-m", "codex_presence"]

STARTED = b'{"method":"turn/started","params":{"threadId":"th","turn":{"id":"t1"}}}'
COMPLETED = orjson.dumps(
    {
        "method": "turn/completed",
        "params": {"threadId": "th", "turn": {"id": "t1", "status": "completed"}},
    }
)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}


def _recording(*lines: bytes, version: bool = True, end: float | None = None) -> bytes:
    body = b"".join(encode_entry(0.1 * (n + 1), "server", line) for n, line in enumerate(lines))
    return (encode_version() if version else b"") + body + (b"" if end is None else encode_end(end))


def _rows(data: bytes) -> list[tuple[int | None, str, str, str]]:
    return [(r.line, r.state, r.cause, r.event) for r in timeline(read_relevant_entries(data))]


# -- the timeline ----------------------------------------------------------------------------


def test_a_version_2_recording_without_its_end_stops_mid_session() -> None:
    rows = _rows(_recording(STARTED))
    assert rows == [
        (2, "working", "turn/started", "turn started"),
        (None, "idle", STOPPED, "the recording stops mid-session"),
    ]


def test_a_version_2_recording_with_its_end_ended() -> None:
    assert _rows(_recording(STARTED, end=0.5))[-1] == (None, "idle", "eof", "session ended")


def test_a_version_1_recording_without_an_end_replays_as_it_always_did() -> None:
    assert _rows(_recording(STARTED, version=False))[-1] == (None, "idle", "eof", "session ended")


def test_an_idle_end_without_the_end_line_is_still_told() -> None:
    builder = TimelineBuilder()
    for entry in read_relevant_entries(_recording(STARTED, COMPLETED)):
        builder.feed(entry)
    assert builder.finish() is None  # no row: the state was idle
    assert builder.stops_mid_session and builder.version == VERSION


@pytest.mark.parametrize(
    "path",
    sorted(FIXTURES.glob("*/*.jsonl")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_no_fixture_stops_mid_session(path: Path) -> None:
    builder = TimelineBuilder()
    for entry in read_relevant_entries(path.read_bytes()):
        builder.feed(entry)
    assert builder.version in (1, VERSION) and not builder.stops_mid_session


@pytest.mark.parametrize(
    "path",
    [
        FIXTURES / "codex-0.171.0" / "outlives_turn.jsonl",
        FIXTURES / "claude-code-2.1.332" / "subagent_background.jsonl",
        FIXTURES / "codex-tui-0.171.0" / "esc_during_command.jsonl",
    ],
    ids=lambda p: p.parent.name,
)
def test_a_version_line_changes_no_timeline_of_either_feeder(path: Path) -> None:
    data = path.read_bytes()
    versioned = encode_version() + data
    plain = [(r.line, r.state, r.cause) for r in timeline(read_relevant_entries(data))]
    shifted = [
        (None if r.line is None else r.line - 1, r.state, r.cause)
        for r in timeline(read_relevant_entries(versioned))
    ]
    assert shifted == plain
    assert timeline(read_entries(versioned.splitlines())) == timeline(
        read_relevant_entries(versioned)
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([STARTED, COMPLETED]), max_size=8), st.booleans(), st.booleans())
def test_only_a_versioned_recording_without_its_end_stops(
    lines: list[bytes], versioned: bool, ended: bool
) -> None:
    builder = TimelineBuilder()
    data = _recording(*lines, version=versioned, end=1.0 if ended else None)
    for entry in read_relevant_entries(data):
        builder.feed(entry)
    last = builder.finish()
    assert builder.stops_mid_session == (versioned and not ended)
    if last is not None:
        assert last.cause == (STOPPED if builder.stops_mid_session else "eof")


# -- the writer ------------------------------------------------------------------------------


def test_the_recorder_starts_with_the_version_and_ends_only_when_told(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path)
    assert recorder.open()
    recorder.start()
    recorder.add(0.1, "server", STARTED + b"\n")
    eventually(lambda: path.read_bytes().count(b"\n") == 2, 60, "the message on disk")
    killed_here = path.read_bytes()  # what a SIGKILL now would leave
    recorder.finish(0.2)
    assert recorder.join(WAIT), "the recorder did not finish"
    assert killed_here.splitlines()[0] == encode_version().strip()
    assert _rows(killed_here)[-1][2] == STOPPED
    assert path.read_bytes().splitlines()[-1] == encode_end(0.2).strip()
    assert _rows(path.read_bytes())[-1][2] == "eof"


def test_a_recorder_that_fails_writes_no_end(tmp_path: Path) -> None:
    """The disk fills: the writer stops, and the file has no end line (the session's end
    would not say what is missing)."""
    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path)
    assert recorder.open()
    recorder.start()
    recorder.add(0.1, "server", STARTED + b"\n")
    eventually(lambda: path.read_bytes().count(b"\n") == 2, 60, "the message on disk")
    file = recorder._file
    assert file is not None

    def full(_: object) -> None:
        raise OSError(28, "No space left on device")

    file.writelines = full  # type: ignore[method-assign]
    recorder.add(0.2, "server", COMPLETED + b"\n")
    recorder.finish(0.3)
    assert recorder.join(WAIT), "the recorder did not finish"
    assert b'"end"' not in path.read_bytes()
    assert _rows(path.read_bytes())[-1][2] == STOPPED


# -- replay of a runner killed mid-turn ------------------------------------------------------

CHILD = (
    "import sys, time\n"
    f"sys.stdout.buffer.write({STARTED!r} + b'\\n')\n"
    "sys.stdout.buffer.flush()\n"
    "time.sleep(60)\n"
)


def _wrap_recording(tmp_path: Path, *, kill: signal.Signals) -> Path:
    record = tmp_path / "rec.jsonl"
    proc = subprocess.Popen(
        [*CLI, "wrap", "--quiet", "--record", str(record), "--", sys.executable, "-c", CHILD],
        env=_clean_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b'{"method":"turn/started"')
        eventually(
            lambda: record.exists() and b"turn/started" in record.read_bytes(),
            WAIT,
            "the turn on disk",
        )
        time.sleep(0.2)
        proc.send_signal(kill)
        exits(proc, what="wrap")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
    return record


@pytest.mark.parametrize(
    ("kill", "cause", "said"),
    [(signal.SIGKILL, STOPPED, True), (signal.SIGTERM, "eof", False)],
    ids=["SIGKILL", "SIGTERM"],
)
def test_replay_of_a_killed_wrap_says_the_recording_stops_mid_session(
    tmp_path: Path, kill: signal.Signals, cause: str, said: bool
) -> None:
    record = _wrap_recording(tmp_path, kill=kill)
    out = subprocess.run(
        [*CLI, "replay", str(record)], env=_clean_env(), capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    last = out.stdout.splitlines()[-1]
    assert last.endswith(f"({cause})")
    assert ("session ended" in last) is not said
    assert ("the recording stops mid-session" in out.stderr) is said
    as_json = subprocess.run(
        [*CLI, "replay", "--json", str(record)], env=_clean_env(), capture_output=True, check=True
    )
    final = orjson.loads(as_json.stdout.splitlines()[-1])
    assert (final["state"], final["cause"], final["line"]) == ("idle", cause, None)
