"""What the mapping tells a live ``wrap``, end to end through the real command (``wrap --
cat``: what we write is what the "server" writes back): a request method or item type it
does not know is warned about once per session, a bug in a handler lands in ``--log-file``
with its traceback while the session and its analysis go on, and a bug anywhere else in the
analysis ends the member's state in idle at once, said once, while the bytes go on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.broker_harness import make_team, running_broker, token_of
from tests.support.roster_watch import roster_activity
from tests.support.waiting import eventually
from tests.support.wrap_harness import wrap_env


def line(method: str, **fields: Any) -> bytes:
    return orjson.dumps({"method": method, **fields}) + b"\n"


TURN = {"threadId": "th", "turn": {"id": "t1", "status": "inProgress"}}
STARTED = line("turn/started", params=TURN)
COMPLETED = line(
    "turn/completed", params={"threadId": "th", "turn": {"id": "t1", "status": "completed"}}
)
IDLE = line("thread/status/changed", params={"threadId": "th", "status": {"type": "idle"}})


def wrap_cat_argv(log: Path, *options: str, patch: str = "") -> list[str]:
    run = "import sys; from codex_presence.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", f"{patch}\n{run}", "wrap", "--log-file", str(log), *options]


def wrap_cat(data: bytes, log: Path, *, patch: str = "") -> subprocess.CompletedProcess[bytes]:
    command = [*wrap_cat_argv(log, patch=patch), "--", "cat"]
    return subprocess.run(command, input=data, capture_output=True, timeout=60, env=wrap_env())


def transitions_logged(log: Path) -> list[str]:
    """What wrap's observers got, as its log says it (``working (turn/started)``)."""
    text = log.read_text() if log.exists() else ""
    return [ln.split(": ", 1)[1] for ln in text.splitlines() if " INFO codex_presence.relay" in ln]


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
        "import codex_presence.core.codex.handlers as m\n"
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
    # ...so the turns after the bug are seen as usual.
    assert transitions_logged(log) == [
        "working (turn/started)",
        "idle (thread/status/changed)",
        "working (turn/started)",
        "idle (thread/status/changed)",
    ]


def test_a_bug_in_the_analysis_ends_in_idle_at_once_said_once_and_the_bytes_go_on(
    tmp_path: Path,
) -> None:
    """The mapping itself raises mid-turn (not a handler: the router would catch that): the
    member shown working is reported idle there and then (cause "analysis failed"), not
    heartbeated until wrap ends, and the analysis stops for the session (a later turn is not
    seen); every byte still crosses. The guard is the TUI's and claude's."""
    patch = (
        "import codex_presence.core.codex.mapping as m\n"
        "feed_line = m.CodexMapping.feed_line\n"
        "def buggy(self, direction, line):\n"
        "    if b'\"bug\"' in line: raise RuntimeError('a bug in the analysis')\n"
        "    return feed_line(self, direction, line)\n"
        "m.CodexMapping.feed_line = buggy"
    )
    bug = line(
        "item/started",
        params={
            "item": {"type": "commandExecution", "id": "bug"},
            "threadId": "th",
            "turnId": "t1",
        },
    )
    after = bug + COMPLETED + IDLE + STARTED.replace(b'"t1"', b'"t2"')
    log, token = tmp_path / "wrap.log", tmp_path / "alice.token"
    token.write_text(token_of("alice") + "\n")
    token.chmod(0o600)
    with running_broker(team=make_team("alice", "bob")) as broker:
        options = ["--broker", broker.url, "--name", "alice", "--token-file", str(token)]
        wrap = subprocess.Popen(
            [*wrap_cat_argv(log, *options, patch=patch), "--", "cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=wrap_env(),
        )
        try:
            assert wrap.stdin is not None
            wrap.stdin.write(STARTED)
            wrap.stdin.flush()
            eventually(lambda: roster_activity(broker) == "working", what="working")
            wrap.stdin.write(after)
            wrap.stdin.flush()
            eventually(lambda: roster_activity(broker) is None, what="idle on the roster")
            assert wrap.poll() is None  # at once, not at the session's end
            out, err = wrap.communicate(timeout=60)
        finally:
            if wrap.poll() is None:
                wrap.kill()
                wrap.wait()
    assert (wrap.returncode, out, err) == (0, STARTED + after, b"")
    assert transitions_logged(log) == ["working (turn/started)", "idle (analysis failed)"]
    text = log.read_text()
    errors = [ln for ln in text.splitlines() if " ERROR " in ln]
    assert len(errors) == 1 and "activity analysis failed (a bug)" in errors[0], errors
    assert "RuntimeError: a bug in the analysis" in text
