"""wrap reporting to a real broker: transitions, no-trace, no broker, a refused token,
idle on exit — with a scripted app-server as the child (the real codex binary is in
test_wrap_codex_broker.py)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.roster_watch import RosterWatch
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess, is_note, is_request


def member(broker: RunningBroker, name: str = "alice") -> dict[str, object]:
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob")).json()
    (me,) = [p for p in roster if p["name"] == name]
    return me  # type: ignore[no-any-return]


def options(broker: RunningBroker, *extra: str) -> list[str]:
    return ["--broker", broker.url, "--name", "alice", *extra]


TOKEN = {"CODEX_PRESENCE_TOKEN": token_of("alice")}


def test_roster_follows_a_turn_with_an_approval() -> None:
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        WrapProcess(options(broker), env=TOKEN) as wrap,
    ):
        eventually(lambda: member(broker)["connected"] == 1)
        assert "activity" not in member(broker)
        wrap.start_turn(1, approval=True, deltas=3, delay_ms=1)
        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
        eventually(lambda: member(broker).get("activity") == "blocked")
        assert "busy" not in member(broker) or member(broker)["busy"] is False
        wrap.send({"id": request["id"], "result": {"decision": "accept"}})
        wrap.wait_for(is_note("turn/completed"))
        eventually(lambda: "activity" not in member(broker))
        assert wrap.close() == 0
        eventually(lambda: member(broker)["connected"] == 0)
    log = wrap.stderr.decode()
    assert "blocked (thread/status/changed)" in log
    assert token_of("alice") not in log


@pytest.mark.parametrize("stop_ms", [20, 80])
def test_a_cancelled_approval_goes_from_blocked_to_idle_on_the_roster(stop_ms: int) -> None:
    """The person says no and stop (``cancel``): the app-server clears its waiting flag,
    then ends the turn ``stop_ms`` later (codex: 12-50 ms; 80 as on a loaded machine). The
    roster's stream shows no working in between, while an accepted approval's working
    still follows blocked at once (issue 27).

    The hold is set far beyond the test's life (``--passing-hold 600``) and the accepted
    turn ends only when the test says so, once working shows: what the test sees is decided
    by order, never by how fast this machine is. A passing working is replaced by the idle
    that ends its turn; a working held by mistake would never show."""
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        WrapProcess(options(broker, "--passing-hold", "600"), env=TOKEN) as wrap,
    ):
        watch = RosterWatch(broker, watcher="bob", member="alice")
        watch.wait_connected(1)
        wrap.start_turn(1, approval=True, stop_ms=stop_ms)
        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
        watch.wait("blocked")
        wrap.send({"id": request["id"], "result": {"decision": "cancel"}})
        wrap.wait_for(is_note("turn/completed"))
        watch.wait(None)

        wrap.start_turn(2, approval=True, deltas=1, finish="when_told")
        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
        watch.wait("blocked")
        wrap.send({"id": request["id"], "result": {"decision": "accept"}})
        watch.wait("working")  # the turn runs until told: a held working would not show
        wrap.send({"method": "fake/finish"})
        wrap.wait_for(is_note("turn/completed"))
        watch.wait(None)
        assert wrap.close() == 0
        watch.wait_connected(0)
    watch.join()
    assert watch.error is None
    shown = watch.sequence()
    from_first_blocked = shown[shown.index("blocked") :]
    # The second turn's start may show as working before its approval does, or not (the
    # two reports can land together); the rest is fixed, nothing after the last idle.
    assert from_first_blocked in (
        ["blocked", None, "blocked", "working", None],
        ["blocked", None, "working", "blocked", "working", None],
    ), watch.seen


def test_no_trace_keeps_activity_absent_but_counts_the_connection() -> None:
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        WrapProcess(options(broker, "--no-trace"), env=TOKEN) as wrap,
    ):
        eventually(lambda: member(broker)["connected"] == 1)
        wrap.start_turn(1, approval=True, deltas=3)
        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
        time.sleep(0.3)  # time enough for a report, had there been a reporter
        assert "activity" not in member(broker)
        wrap.send({"id": request["id"], "result": {"decision": "accept"}})
        wrap.wait_for(is_note("turn/completed"))
        assert "activity" not in member(broker)
        assert wrap.close() == 0
    assert "--no-trace" in wrap.stderr.decode()


def test_without_a_broker_wrap_relays_and_says_so_once() -> None:
    with WrapProcess([]) as wrap:
        wrap.start_turn(1, deltas=2)
        wrap.wait_for(is_note("turn/completed"))
        assert wrap.close() == 0
    log = wrap.stderr.decode()
    assert log.count("not reporting") == 1
    assert "working (turn/started)" in log


def test_a_refused_token_is_logged_once_and_the_session_goes_on() -> None:
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        WrapProcess(options(broker), env={"CODEX_PRESENCE_TOKEN": "cp_not-a-member"}) as wrap,
    ):
        # The broker link attaches once its imports are done (the child starts first):
        # turns run before that would only be reported as their outcome (idle), not at all.
        # Before: 10 s deadlines, which a load of ~12 broke (16 of 16 runs, 8 at once), a
        # failure that did not show what wrap had said, and short turns: a reporter starved
        # until a turn was over had nothing left to send (working then idle is no news), so
        # the refusal was never met (seen at a load of 12 with the 60 s deadline, 2 of 8).
        # The first turn now runs until told, after the reporter met the refusal.
        log = wrap.stderr.decode
        eventually(lambda: b"refused the token (401)" in wrap.stderr, what="the 401", seen=log)
        wrap.start_turn(1, deltas=2, finish="when_told")
        eventually(lambda: b"refused our token" in wrap.stderr, what="the refusal", seen=log)
        wrap.send({"method": "fake/finish"})
        wrap.wait_for(is_note("turn/completed"))
        wrap.start_turn(2, deltas=2)  # the reporter stopped: nothing more is sent, or said
        wrap.wait_for(is_note("turn/completed"))
        assert wrap.close() == 0
        assert "activity" not in member(broker)
    log = wrap.stderr.decode()
    assert log.count("refused our token") == 1  # the reporter, once
    # Connection presence, once, naming the broker and where the token came from (before:
    # "the broker refused the subscription (HTTP 401 from /whoami)", which named neither).
    assert (
        log.count(
            f"offline: the broker at {broker.url} refused the token (401): no member of its team"
            " has it (check --token-file or $CODEX_PRESENCE_TOKEN, and --broker)"
        )
        == 1
    )
    assert "cp_not-a-member" not in log


def test_missing_token_is_not_fatal(tmp_path: Path) -> None:
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        WrapProcess(options(broker)) as wrap,
    ):
        wrap.start_turn(1, deltas=1)
        wrap.wait_for(is_note("turn/completed"))
        assert wrap.close() == 0
    assert "no token" in wrap.stderr.decode()


def test_child_exit_mid_turn_reports_idle_and_keeps_the_exit_status() -> None:
    """The idle is wrap's report: the broker's TTL and session grace are far beyond the
    test (600 s), so no lapse can show it; the wait for it is only a generous deadline."""
    with (
        running_broker(
            team=make_team("alice", "bob"), activity_ttl=600, session_grace=600
        ) as broker,
        WrapProcess(options(broker, "--exit-grace", "30"), env=TOKEN) as wrap,
    ):
        wrap.start_turn(1, deltas=3, crash="when_told")
        wrap.wait_for(is_note("turn/started"))
        eventually(lambda: member(broker).get("activity") == "working")
        wrap.send({"method": "fake/crash"})  # the turn still runs: the child dies in it
        assert wrap.proc.wait(WAIT) == 3  # the child's status
        eventually(lambda: "activity" not in member(broker), 60, "idle reported")
        wrap.close()


@pytest.mark.parametrize("flag", ["--token-file", None])
def test_token_file_and_env_both_work(tmp_path: Path, flag: str | None) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token_of("alice") + "\n")
    token_file.chmod(0o600)
    extra = [flag, str(token_file)] if flag else []
    env = {} if flag else TOKEN
    with (
        running_broker(team=make_team("alice", "bob")) as broker,
        WrapProcess(options(broker, *extra), env=env) as wrap,
    ):
        wrap.wait_online()  # else the turn may be over before the link could report it
        wrap.start_turn(1, deltas=200, delay_ms=5)
        eventually(lambda: member(broker).get("activity") == "working")
        wrap.wait_for(is_note("turn/completed"))
        assert wrap.close() == 0
