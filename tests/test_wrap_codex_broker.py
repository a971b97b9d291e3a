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

With two app-servers of one member behind two wraps, the broker's notifier tells a
``json://`` receiver on loopback (through apprise) of the member's wait: one "needs input"
and one "answered" for one continuous wait, however its agents take turns (issue 34).
"""

from __future__ import annotations

import math
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from bench._fake_model import FakeModel, exec_command, message, reply
from codex_presence.broker.notify.apprise_sender import AppriseSender
from codex_presence.broker.notify.config import Target
from codex_presence.broker.notify.notifier import Notifier
from codex_presence.core.notify_policy import NotifyEvent, Rule
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.codex_driver import Config, session
from tests.support.receivers import receiver
from tests.support.roster_watch import RosterWatch, roster_activity, roster_row
from tests.support.waiting import eventually

pytestmark = pytest.mark.codex

APPROVALS = Config(approval_policy="on-request", sandbox_mode="read-only")
HOLD = 1.0
"""How long the client holds the approval back while the roster must show blocked."""


def wrapped(codex: Path, tmp_path: Path, broker: RunningBroker, *options: str) -> Path:
    """An executable the driver starts as its "codex": wrap, reporting as alice (with
    wrap's ``options``), in front of the real one. The token goes in a file (the driver
    passes no CODEX_* variables)."""
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
        *options,
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
                ),
                hold=(model_answers := threading.Event()),
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
            # The model's answer (the command that asks for approval) is held until the
            # roster shows the turn: working is shown by order, not by how fast the relay,
            # the runner's analysis and the broker were (CI: the approval's blocked came in
            # the same read as turn/started, and working was never a state to report).
            watch.wait_seen("working")
            model_answers.set()

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
    straight to idle: the working in between is no state anyone saw (issue 27). The
    reporter holds such a passing working back (0.3 s by default); on a loaded machine
    codex took longer than that to end its turn (CI: the roster showed blocked, working,
    idle), so the hold here is one no load outlasts: what is tested is that the passing
    working is held and then replaced unsent, not codex's speed."""
    model_answers = threading.Event()  # held until the roster shows the turn (as above)
    model = FakeModel(
        [
            reply(
                exec_command("touch made.txt", call_id="call_no", escalate=True),
                hold=model_answers,
            )
        ]
    )
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
                codex=wrapped(codex, tmp_path, broker, "--passing-hold", "60"),
            ) as s,
        ):
            watch.wait_connected(1)
            s.initialize()
            thread = s.start_thread()
            s.start_turn(thread, "make a file")
            watch.wait_seen("working")
            model_answers.set()
            request = s.wait_for(is_server_request("item/commandExecution/requestApproval"))
            watch.wait("blocked")
            s.answer(request, {"decision": "cancel"})
            s.turn_completed(thread)
            watch.wait(None)
            time.sleep(0.5)  # the passing working was replaced: nothing more may come
            assert roster_activity(broker) is None
            assert not (root / "work" / "made.txt").exists()
        watch.wait_connected(0)
    watch.join()
    assert watch.sequence() == [None, "working", "blocked", None]


# -- two agents of one member: one wait, one notice, one answer (issue 34) ----------------

NOTIFY_AFTER = 2.0
"""The notify target's delay (``--notify-after``): short, so that the test is quick."""


def _seconds(words: str) -> int:
    """``1 h 2 min`` / ``3 min 4 s`` / ``5 s`` (the notices' durations) in seconds."""
    units = {"h": 3600, "min": 60, "s": 1}
    return sum(int(n) * units[unit] for n, unit in re.findall(r"(\d+) (h|min|s)\b", words))


def test_two_agents_of_one_member_waiting_are_one_wait_with_one_notice_and_one_answer(
    codex: Path, tmp_path: Path
) -> None:
    """Issue 34, through real clients: alice runs two codex app-servers behind wrap. A asks
    for an approval; once the target heard "needs input", B asks for one too; A is answered
    while B still waits (no "answered", no second "needs input": the member never stopped
    waiting, though the broker's since moved to B's); then B is answered: one "answered",
    naming B's agent and the whole wait's length (from A's request, not B's)."""
    rule = Rule(after=NOTIFY_AFTER, on=frozenset({NotifyEvent.BLOCKED, NotifyEvent.ANSWERED}))
    commands = {"a": "touch alpha.txt", "b": "mkdir beta"}
    models = {
        side: FakeModel(
            [reply(exec_command(command, call_id=f"call_{side}", escalate=True)), message("Done.")]
        )
        for side, command in commands.items()
    }
    with receiver() as hook, ExitStack() as stack:
        notifier = Notifier(
            [Target(url=f"json://{hook.host}/hook", rule=rule)], team="acme", sender=AppriseSender()
        )
        broker = stack.enter_context(
            running_broker(team=make_team("alice", "bob"), watcher=notifier)
        )
        sessions = {}
        for side, model in models.items():
            stack.enter_context(model.serve())
            (tmp_path / side).mkdir()
            sessions[side] = stack.enter_context(
                session(
                    tmp_path / side / "run",
                    base_url=model.base_url,
                    config=APPROVALS,
                    recording=tmp_path / side / "client.jsonl",
                    codex=wrapped(codex, tmp_path / side, broker),
                )
            )
        a, b = sessions["a"], sessions["b"]
        eventually(lambda: roster_row(broker)["connected"] == 2, what="both wraps subscribed")
        threads = {}
        for side, s in sessions.items():
            s.initialize()
            threads[side] = s.start_thread()

        def sees(what: Callable[[dict[str, Any]], bool], said: str) -> dict[str, Any]:
            eventually(lambda: what(roster_row(broker)), what=said, seen=lambda: roster_row(broker))
            return roster_row(broker)

        a.start_turn(threads["a"], "make a file")
        request_a = a.wait_for(is_server_request("item/commandExecution/requestApproval"))
        sees(lambda row: row.get("activity") == "blocked", "alice blocked (A)")
        waited_from = time.monotonic()  # the wait began before (when A's request crossed)
        eventually(lambda: hook.requests, what="needs input", seen=lambda: notifier.stats)

        b.start_turn(threads["b"], "make a directory")
        request_b = b.wait_for(is_server_request("item/commandExecution/requestApproval"))
        sees(lambda row: row.get("sessions") == {"blocked": 2}, "both waiting")

        a.answer(request_a, {"decision": "accept"})
        a.turn_completed(threads["a"])
        row = sees(
            lambda row: row.get("activity") == "blocked" and "sessions" not in row,
            "A done, B waiting",
        )
        # The broker's since is B's now: a policy that took that for a new wait would have
        # said "answered" at once and "needs input" once B's since is NOTIFY_AFTER old.
        # Both would be queued before anything B's answer makes: the target's queue keeps
        # the order, so the notices seen after B's answer tell.
        b_since = row["activitySince"] / 1000
        eventually(
            lambda: notifier.looked_at >= b_since + NOTIFY_AFTER,
            what="the notifier's look past B's own delay",
        )
        held = time.monotonic() - waited_from
        b.answer(request_b, {"decision": "accept"})
        b.turn_completed(threads["b"])
        eventually(lambda: len(hook.requests) >= 2, what="answered", seen=lambda: hook.requests)
        sees(lambda row: "activity" not in row, "alice idle")
        now = time.time()
        eventually(
            lambda: notifier.looked_at >= now and notifier.pending == 0, what="the notifier idle"
        )

    sent = [r.json() for r in hook.requests]
    assert len(sent) == 2, [s["title"] for s in sent]
    needs, answered = sent
    assert needs["title"] == "alice · codex-app-server in work: approve `touch`", needs
    assert answered["title"] in ("alice: back to work", "alice: no longer needs input"), answered
    said = answered["message"]
    # B's wait, the last one: "...; codex-app-server in work: approve `mkdir` - team acme"
    assert said.endswith("; codex-app-server in work: approve `mkdir` - team acme"), said
    waited = re.search(r"\(waited ([^)]*)\)", said)
    assert waited is not None, said
    assert _seconds(waited.group(1)) >= math.floor(held), (said, held)
    for model in models.values():
        assert not model.pending and not model.unscripted
