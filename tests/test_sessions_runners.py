"""Sessions with real runners (issue 23, parts 1 to 3): ``codex-presence wrap`` processes
(a scripted app-server as the child) against a real broker on loopback, in memory and on a
real redis-server (``store_url``).

Two wraps with one token are two sessions of one member: the roster shows the strongest.
A wrap killed mid-turn (SIGKILL: no idle report, ever) reads offline at once and idle
after the broker's session grace, not after the 30 s TTL. A command the fake app-server
leaves running after its turn (part 3) is counted on the roster (``background``) while it
runs, heartbeated while the session is idle, and gone when it ends or its wrap is killed
(after the grace). The times are measured and
printed (``-s`` shows them), never bounded from above: the grace is told from the TTL by
cause, a broker TTL (:data:`FAR`) that no wait in the test comes near, so only the grace
can end what a killed runner left; the lower bound is the grace's own.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codex_presence._wire import SESSION_GRACE
from tests.support.broker_harness import (
    broker_process,
    make_team,
    running_broker,
    token_of,
)
from tests.support.shared_brokers import roster, team_file
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess, is_note, is_request

TOKEN = {"CODEX_PRESENCE_TOKEN": token_of("builder")}
LONG_TURN = {"deltas": 300, "delay_ms": 50}
"""A turn that works for about 15 s: longer than every step that needs it working."""
FAR = 600.0
"""A broker TTL far beyond any wait here: what ends a killed runner's state is the grace."""
MUST = 60.0
"""The deadline of a wait for what must happen (load only stretches it)."""


def builder(url: str) -> dict[str, object]:
    return roster(url)["builder"]


def options(url: str) -> list[str]:
    return ["--broker", url, "--name", "builder"]


def test_two_wraps_of_one_member_show_the_strongest(store_url: str | None) -> None:
    with (
        running_broker(team=make_team("alice", "builder", "scout"), redis=store_url) as broker,
        WrapProcess(options(broker.url), env=TOKEN) as first,
        WrapProcess(options(broker.url), env=TOKEN) as second,
    ):
        url = broker.url
        eventually(lambda: builder(url)["connected"] == 2, 60, "both wraps subscribed")
        first.start_turn(1, **LONG_TURN)
        first.wait_for(is_note("turn/started"))
        eventually(lambda: builder(url).get("activity") == "working", what="first working")
        assert "sessions" not in builder(url)  # one busy session: nothing more to say

        second.start_turn(1, deltas=2)  # the other session runs a turn and ends it
        second.wait_for(is_note("turn/completed"))
        eventually(lambda: b": idle (" in second.stderr, what="second idle")
        time.sleep(0.5)  # time for its idle report: on main it made the member idle
        assert builder(url).get("activity") == "working"

        second.start_turn(2, approval=True, deltas=1)
        request = second.wait_for(is_request("item/commandExecution/requestApproval"))
        eventually(lambda: builder(url).get("activity") == "blocked", what="blocked shown")
        assert builder(url)["sessions"] == {"working": 1, "blocked": 1}
        second.send({"id": request["id"], "result": {"decision": "accept"}})
        second.wait_for(is_note("turn/completed"))
        eventually(lambda: builder(url).get("activity") == "working", what="back to working")
        eventually(lambda: "sessions" not in builder(url), what="one busy session again")

        first.wait_for(is_note("turn/completed"), timeout=WAIT)  # both idle now
        eventually(lambda: "activity" not in builder(url), what="idle")
        assert first.close() == 0
        assert second.close() == 0
        eventually(lambda: builder(url)["connected"] == 0)


def test_a_wrap_killed_mid_turn_is_offline_and_idle_within_the_grace(
    store_url: str | None,
) -> None:
    """SIGKILL: no idle report will ever come. On main the roster said "offline · working"
    for the rest of the TTL (26.6-26.8 s measured, issue 23). The TTL is FAR: idle is the
    grace's doing."""
    team = make_team("alice", "builder", "scout")
    with (
        running_broker(team=team, redis=store_url, activity_ttl=FAR) as broker,
        WrapProcess(options(broker.url), env=TOKEN) as wrap,
    ):
        url = broker.url
        eventually(lambda: builder(url)["connected"] == 1, 60, "the wrap subscribed")
        wrap.start_turn(1, **LONG_TURN)
        wrap.wait_for(is_note("turn/started"))
        eventually(lambda: builder(url).get("activity") == "working", what="working")
        wrap.proc.kill()
        wrap.proc.wait(WAIT)
        offline = eventually(lambda: builder(url)["connected"] == 0, MUST)
        idle = eventually(lambda: "activity" not in builder(url), MUST, "idle") + offline
        store = "redis" if store_url else "memory"
        print(
            f"\n[{store}] SIGKILL of wrap: offline after {offline:.3f} s, idle after {idle:.3f} s"
        )
        assert idle >= SESSION_GRACE * 0.9  # the grace was given: a blip would change nothing


@pytest.mark.slow
def test_a_dead_brokers_sessions_go_with_its_counts(redis_url: str, tmp_path: Path) -> None:
    """The broker holding a working session's subscription is SIGKILLed: its counts leave
    the roster at the bound (10 s + a 2 s heartbeat), and the session with them (after the
    grace), not at the TTL (FAR: only the counts' going can end it)."""
    team = team_file(tmp_path)
    far = ("--activity-ttl", str(FAR))
    with (
        broker_process("--team", team, *far, redis=redis_url) as doomed,
        broker_process("--team", team, *far, redis=redis_url) as survivor,
        WrapProcess(options(doomed.url), env=TOKEN) as wrap,
    ):
        eventually(lambda: builder(survivor.url)["connected"] == 1, 60, "subscribed")
        wrap.start_turn(1, deltas=2000, delay_ms=50)
        wrap.wait_for(is_note("turn/started"))
        eventually(lambda: builder(survivor.url).get("activity") == "working", what="working")
        doomed.proc.kill()
        doomed.proc.wait(WAIT)
        gone = eventually(lambda: builder(survivor.url)["connected"] == 0, MUST)
        idle = eventually(lambda: "activity" not in builder(survivor.url), MUST, "idle") + gone
        print(f"\n[redis] SIGKILL of the broker: counts gone {gone:.1f} s, idle {idle:.1f} s")
        wrap.proc.kill()


# -- work left running (issue 23, part 3) ----------------------------------------------------


def _left_running(url: str, wrap: WrapProcess) -> None:
    """Start a turn that ends (as an Esc does) with its command still running, and wait
    until the roster counts that command."""
    eventually(lambda: builder(url)["connected"] == 1, 60, "the wrap subscribed")
    wrap.start_turn(1, deltas=2, leave_running=True)
    wrap.wait_for(is_note("turn/completed"))
    eventually(lambda: builder(url).get("background") == 1, what="the command counted")
    me = builder(url)
    assert "activity" not in me and "busy" not in me  # it never makes the member working
    assert isinstance(me["backgroundSince"], int)


def test_a_command_left_running_after_its_turn_is_counted_until_it_ends(
    store_url: str | None,
) -> None:
    with (
        running_broker(team=make_team("alice", "builder", "scout"), redis=store_url) as broker,
        WrapProcess(options(broker.url), env=TOKEN) as wrap,
    ):
        url = broker.url
        _left_running(url, wrap)
        wrap.send({"method": "fake/endCommands"})
        wrap.wait_for(is_note("item/completed"))
        eventually(lambda: "background" not in builder(url), what="the count gone")
        assert "backgroundSince" not in builder(url)
        assert wrap.close() == 0


def test_an_idle_session_heartbeats_its_count_past_the_ttl(store_url: str | None) -> None:
    """An idle session with a command running is not silent: the wrap re-reports the count
    at a third of the broker's TTL (it learns a 3 s TTL from /whoami), so the count holds
    for two TTLs, and goes once the command ends. (A 1.5 s TTL could lapse if one heartbeat was
    a second late; now it takes a 2 s stall, and a wrap that did not heartbeat would
    still lose the count at 3 s.)"""
    team = make_team("alice", "builder", "scout")
    ttl = 3.0
    with (
        running_broker(team=team, redis=store_url, activity_ttl=ttl) as broker,
        WrapProcess(options(broker.url), env=TOKEN) as wrap,
    ):
        url = broker.url
        _left_running(url, wrap)
        for _ in range(12):  # 6 s: twice the TTL
            time.sleep(0.5)
            assert builder(url).get("background") == 1
        wrap.send({"method": "fake/endCommands"})
        eventually(lambda: "background" not in builder(url), what="the count gone")
        assert wrap.close() == 0


def test_a_no_trace_wrap_shows_no_background(store_url: str | None) -> None:
    with (
        running_broker(team=make_team("alice", "builder", "scout"), redis=store_url) as broker,
        WrapProcess([*options(broker.url), "--no-trace"], env=TOKEN) as wrap,
    ):
        url = broker.url
        eventually(lambda: builder(url)["connected"] == 1, 60, "the wrap subscribed")
        wrap.start_turn(1, deltas=2, leave_running=True)
        wrap.wait_for(is_note("turn/completed"))
        time.sleep(1)  # time for a report that must not come
        me = builder(url)
        assert "background" not in me and "activity" not in me
        assert wrap.close() == 0


def test_a_wrap_killed_with_a_command_running_takes_its_count_within_the_grace(
    store_url: str | None,
) -> None:
    """SIGKILL of a runner whose session left a command running: no report will come; the
    count goes with the session's grace, not the TTL (FAR: only the grace can end it)."""
    team = make_team("alice", "builder", "scout")
    with (
        running_broker(team=team, redis=store_url, activity_ttl=FAR) as broker,
        WrapProcess(options(broker.url), env=TOKEN) as wrap,
    ):
        url = broker.url
        _left_running(url, wrap)
        wrap.proc.kill()
        wrap.proc.wait(WAIT)
        offline = eventually(lambda: builder(url)["connected"] == 0, MUST)
        gone = (
            eventually(lambda: "background" not in builder(url), MUST, "the count gone") + offline
        )
        store = "redis" if store_url else "memory"
        print(f"\n[{store}] SIGKILL of wrap: offline after {offline:.3f} s, gone {gone:.3f} s")
        assert gone >= SESSION_GRACE * 0.9  # the grace was given
