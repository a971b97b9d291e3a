"""The whole pipeline for real: codex behind ``wrap --broker``, a real broker on loopback,
and a teammate watching the roster's SSE stream through an approval turn; once per codex
version with fixtures.

The driver (``tests/support/codex_driver.py``) starts wrap in front of the real binary, with the
fake Responses-API model scripting one escalated command. The teammate ``bob`` holds
``GET /subscribe`` and records every activity the broker shows for ``alice``; the test
checks that stream at the moments that matter — while the approval is held back, while
the approved command runs, after the turn — and then the whole sequence. Needs the codex
binaries (``tests/run.sh`` installs them): without one this skips, except under ``CI=true``,
where it fails.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench._fake_model import FakeModel, exec_command, message, reply
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.codex_driver import Config, session
from tests.support.roster_watch import RosterWatch, roster_activity

pytestmark = pytest.mark.codex

APPROVALS = Config(approval_policy="on-request", sandbox_mode="read-only")
HOLD = 1.0
"""How long the client holds the approval back while the roster must show blocked."""


def wrapped(codex: Path, tmp_path: Path, broker: RunningBroker) -> Path:
    """An executable the driver starts as its "codex": wrap, reporting as alice, in front
    of the real one. The token goes in a file (the driver passes no CODEX_* variables)."""
    token_file = tmp_path / "alice.token"
    token_file.write_text(token_of("alice") + "\n")
    token_file.chmod(0o600)
    command = [
        sys.executable,
        "-m",
        "codex_presence",
        "wrap",
        "--broker",
        broker.url,
        "--name",
        "alice",
        "--token-file",
        str(token_file),
        "--",
        str(codex),
    ]
    script = tmp_path / "codex-behind-wrap"
    script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
    script.chmod(0o755)
    return script


def is_server_request(method: str) -> Any:
    return lambda msg: msg.get("method") == method and "id" in msg


def test_roster_follows_a_real_approval_turn(codex: Path, tmp_path: Path) -> None:
    root = tmp_path / "run"
    go = root / "work" / "go"
    model = FakeModel(
        [
            # The command runs until the test says so (a file), so "working while it runs"
            # is decided by order: the roster shows working before the test says go.
            reply(
                exec_command(
                    f"touch made.txt && i=0 && while [ ! -e {go} ] && [ $i -lt 1200 ]; "
                    "do sleep 0.05; i=$((i + 1)); done && echo done",  # a minute at most
                    call_id="call_touch",
                    escalate=True,
                    yield_time_ms=30000,  # the test's word comes well before codex stops waiting
                )
            ),
            message("Finished."),
        ]
    )
    with running_broker(team=make_team("alice", "bob")) as broker:
        watch = RosterWatch(broker, watcher="bob", member="alice")
        with (
            model.serve(),
            session(
                root,
                base_url=model.base_url,
                config=APPROVALS,
                recording=tmp_path / "client.jsonl",
                codex=wrapped(codex, tmp_path, broker),
            ) as s,
        ):
            watch.wait_connected(1)  # wrap holds alice's subscription
            assert watch.current is None
            s.initialize()
            thread = s.start_thread()
            assert watch.current is None  # a thread alone is no work

            s.start_turn(thread, "make a file")
            s.wait_method("turn/started", threadId=thread)
            watch.wait_seen("working")  # codex asks for approval ~0.1 s later: it moves on

            request = s.wait_for(is_server_request("item/commandExecution/requestApproval"))
            watch.wait("blocked")
            held_from = time.monotonic()
            time.sleep(HOLD)  # the client holds the answer back; nobody else moves
            assert watch.current == "blocked"
            assert roster_activity(broker) == "blocked"
            assert all(a == "blocked" for t, a in watch.seen if t >= held_from)

            s.answer(request, {"decision": "accept"})
            # (codex announced the command item before asking; it runs once answered)
            s.wait_method("serverRequest/resolved", requestId=request["id"])
            try:
                watch.wait("working")  # while the command waits for "go"
                assert roster_activity(broker) == "working"
                assert not go.exists()
            finally:
                go.touch()
            s.wait_item("completed", "commandExecution")

            s.turn_completed(thread)
            watch.wait(None)
            assert roster_activity(broker) is None
            assert (root / "work" / "made.txt").exists()
        # The session is over (stdin closed, codex and wrap exited): alice left.
        watch.wait_connected(0)
        assert watch.current is None
    watch.join()

    assert watch.sequence() == [None, "working", "blocked", "working", None]
    assert not model.pending and not model.unscripted
    log = (root / "codex-stderr.log").read_text(errors="replace")
    assert "online: subscribed to the broker as alice" in log
    assert token_of("alice") not in log


def test_a_cancelled_approval_never_shows_working(codex: Path, tmp_path: Path) -> None:
    """The person says no (``cancel``, the codex TUI's only no): codex clears its waiting
    flag, then ends the turn tens of milliseconds later. The roster goes from blocked
    straight to idle: the working in between is no state anyone saw (issue 27)."""
    model = FakeModel([reply(exec_command("touch made.txt", call_id="call_no", escalate=True))])
    root = tmp_path / "run"
    with running_broker(team=make_team("alice", "bob")) as broker:
        watch = RosterWatch(broker, watcher="bob", member="alice")
        with (
            model.serve(),
            session(
                root,
                base_url=model.base_url,
                config=APPROVALS,
                recording=tmp_path / "client.jsonl",
                codex=wrapped(codex, tmp_path, broker),
            ) as s,
        ):
            watch.wait_connected(1)
            s.initialize()
            thread = s.start_thread()
            s.start_turn(thread, "make a file")
            watch.wait_seen("working")  # codex asks for approval ~0.1 s later: it moves on
            request = s.wait_for(is_server_request("item/commandExecution/requestApproval"))
            watch.wait("blocked")
            s.answer(request, {"decision": "cancel"})
            s.turn_completed(thread)
            watch.wait(None)
            time.sleep(0.5)  # past the reporter's hold: nothing more may come
            assert roster_activity(broker) is None
            assert not (root / "work" / "made.txt").exists()
        watch.wait_connected(0)
    watch.join()
    assert watch.sequence() == [None, "working", "blocked", None]
