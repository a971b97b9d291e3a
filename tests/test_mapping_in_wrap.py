"""What the mapping tells a live ``wrap``, end to end through the real command (``wrap --
cat``: what we write is what the "server" writes back): a request method or item type it
does not know is warned about once per session, and a bug in a handler lands in
``--log-file`` with its traceback while the session and its analysis go on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.wrap_harness import wrap_env


def line(method: str, **fields: Any) -> bytes:
    return orjson.dumps({"method": method, **fields}) + b"\n"


TURN = {"threadId": "th", "turn": {"id": "t1", "status": "inProgress"}}
STARTED = line("turn/started", params=TURN)
COMPLETED = line(
    "turn/completed", params={"threadId": "th", "turn": {"id": "t1", "status": "completed"}}
)
IDLE = line("thread/status/changed", params={"threadId": "th", "status": {"type": "idle"}})


def wrap_cat(data: bytes, log: Path, *, patch: str = "") -> subprocess.CompletedProcess[bytes]:
    run = "import sys; from codex_presence.cli.main import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", f"{patch}\n{run}", "wrap", "--log-file", str(log), "--", "cat"]
    return subprocess.run(command, input=data, capture_output=True, timeout=60, env=wrap_env())


def test_unknown_names_seen_live_are_warned_about_once_per_session(tmp_path: Path) -> None:
    teleport = line(
        "item/teleport/requestApproval", id=7, params={"threadId": "th", "turnId": "t1"}
    )
    new_item = line(
        "item/started",
        params={"item": {"type": "teleport", "id": "x"}, "threadId": "th", "turnId": "t1"},
    )
    data = STARTED + teleport + new_item + teleport + new_item + IDLE
    log = tmp_path / "wrap.log"
    done = wrap_cat(data, log)
    assert (done.returncode, done.stdout, done.stderr) == (0, data, b"")
    warnings = [ln for ln in log.read_text().splitlines() if " WARNING " in ln]
    assert len(warnings) == 2, warnings
    assert (
        "codex sent a server request method" in warnings[0]
        and "item/teleport/requestApproval" in warnings[0]
    )
    assert "codex sent an item type " in warnings[1] and "'teleport'" in warnings[1]
    assert all("codex-presence doctor" in ln for ln in warnings)


def test_a_bug_in_a_handler_is_logged_with_its_traceback_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    patch = (
        "import codex_presence.core.codex as m\n"
        "def broken(*args, **kwargs): raise KeyError('a bug in the handler')\n"
        "m._on_turn_completed = broken"
    )
    data = STARTED + COMPLETED + IDLE + STARTED.replace(b'"t1"', b'"t2"') + IDLE
    log = tmp_path / "wrap.log"
    done = wrap_cat(data, log, patch=patch)
    assert (done.returncode, done.stdout) == (0, data)
    assert done.stderr == b""  # nothing on Python's last-resort handler
    text = log.read_text()
    assert "ERROR codex_presence.router: a bug in the turn/completed handler: the state may" in text
    assert "Traceback (most recent call last)" in text
    assert "KeyError: 'a bug in the handler'" in text
    assert "analysis failed" not in text  # the analysis was not switched off...
    transitions = [
        ln.split(": ", 1)[1] for ln in text.splitlines() if " INFO codex_presence.relay" in ln
    ]
    # ...so the turns after the bug are seen as usual.
    assert transitions == [
        "working (turn/started)",
        "idle (thread/status/changed)",
        "working (turn/started)",
        "idle (thread/status/changed)",
    ]
