"""Faults during a live session: the broker down, killed, failing, stalling or flapping;
the child or wrap itself dying; a client that hangs up early; a record target that fails.

Every test runs the real ``codex-presence wrap`` around the scripted app-server
(``bench/_fake_app_server.py``), behind ``tests/support/tee_child.py`` so that what
the child wrote is witnessed independently of wrap and compared with what the client
received. Broker
faults come from :class:`FaultProxy`, a small TCP proxy on loopback in front of a real
broker that can refuse connections, answer 500, or hold every request for 10 s before
passing it on. The roster is read from the real broker, around the proxy.

What each fault test shows:

* bytes: the client received exactly what the child wrote;
* latency: the session never waits on the broker — a turn runs to completion while every
  broker request is refused, failing or held unanswered (the proxy counts them), which is
  a causal check, not a timing one;
* convergence: once the broker is back, the roster shows the daemon's current state (by
  design within one heartbeat plus one capped backoff step: :data:`CONVERGE`); the test
  waits for it with a generous deadline (:data:`MUST`) and decides by cause: the broker's
  TTL and session grace are set far beyond the test (:data:`FAR`), so an idle the roster
  shows was reported, never a lapse;
* nothing lost but superseded states: the activity sequence the roster showed (read from an
  SSE subscriber) is a subsequence of the daemon's transitions, ending in the same state.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
import redis as redis_client
from httpx_sse import connect_sse

from codex_presence._wire import HEARTBEAT
from codex_presence.broker.team_file import render_team
from codex_presence.core.backoff import Backoff
from tests.support.broker_harness import (
    broker_process,
    make_team,
    not_a_broker,
    running_broker,
    token_of,
)
from tests.support.fault_proxy import FaultProxy
from tests.support.processes import alive
from tests.support.redis_server import redis_server
from tests.support.waiting import WAIT, eventually, exits
from tests.support.wrap_harness import FAKE_APP_SERVER, WrapProcess, is_note, is_request, wrap_env

SUPPORT = Path(__file__).resolve().parent / "support"
PY = sys.executable
TOKEN = {"CODEX_PRESENCE_TOKEN": token_of("alice")}
REQUEST_TIMEOUT = 2.0  # the reporter's per-POST timeout
CONVERGE = HEARTBEAT + Backoff().cap + REQUEST_TIMEOUT
"""After the broker's return the roster is right within this by design: the next heartbeat
(or the next retry, at most one capped backoff step away) plus one request. Not asserted as
a stopwatch (a loaded machine stretches it): :data:`MUST` is the deadline of the waits."""
MUST = 60.0
"""The deadline of a wait for what must happen: generous, since load only stretches it, and
never what tells two mechanisms apart (:data:`FAR` does that)."""
FAR = 600.0
"""A broker TTL and session grace far beyond any test: with them, what ends a member's
activity is a report, never a lapse (and the runner's heartbeat, a third of the TTL, is
minutes away: what reaches a restarted broker is a re-send or a retry)."""
LAPSE_FAR = {"activity_ttl": FAR, "session_grace": FAR}
LAPSE_FAR_ARGS = ("--activity-ttl", str(FAR), "--session-grace", str(FAR))


# -- a misbehaving network in front of the broker --------------------------------------------


class RosterWatch:
    """An SSE subscriber (bob) on the real broker that records alice's shown activity."""

    def __init__(self, url: str, name: str = "alice") -> None:
        self.url = url
        self.name = name
        self.shown: list[str] = ["idle"]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        eventually(lambda: self.ready, 60, "the watcher's first roster")

    ready = False

    def _note(self, presence: dict[str, Any]) -> None:
        if presence.get("name") == self.name:
            activity = presence.get("activity", "idle")
            if self.shown[-1] != activity:
                self.shown.append(activity)

    def _run(self) -> None:
        headers = {"authorization": f"Bearer {token_of('bob')}"}
        timeout = httpx.Timeout(5.0, read=None)
        with (
            httpx.Client(timeout=timeout) as client,
            connect_sse(client, "GET", self.url + "/subscribe?name=bob", headers=headers) as source,
        ):
            for event in source.iter_sse():
                if event.event == "roster":
                    for presence in orjson.loads(event.data)["members"]:
                        self._note(presence)
                    self.ready = True
                elif event.event == "presence":
                    self._note(orjson.loads(event.data))

    def join(self) -> None:
        self._thread.join(WAIT)  # the broker's shutdown ends the stream
        assert not self._thread.is_alive(), "the stream did not end with the broker"


_TRANSITION = re.compile(rb"codex-presence: (idle|working|blocked) \(")


def truth(wrap: WrapProcess) -> list[str]:
    """The daemon's transitions, in order, from its log (starting idle)."""
    states = ["idle"]
    for state in _TRANSITION.findall(bytes(wrap.stderr)):
        if states[-1] != state.decode():
            states.append(state.decode())
    return states


def is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def activity(url: str, name: str = "alice") -> str:
    roster = httpx.get(url + "/roster", headers={"authorization": f"Bearer {token_of('bob')}"})
    (me,) = [p for p in roster.json() if p["name"] == name]
    return str(me.get("activity", "idle"))


def connected(url: str, name: str = "alice") -> int:
    roster = httpx.get(url + "/roster", headers={"authorization": f"Bearer {token_of('bob')}"})
    (me,) = [p for p in roster.json() if p["name"] == name]
    return int(me["connected"])


@contextmanager
def teed_wrap(tmp_path: Path, broker_url: str, *extra: str) -> Iterator[WrapProcess]:
    child = [PY, str(SUPPORT / "tee_child.py"), str(tmp_path / "child.out"), *FAKE_APP_SERVER]
    options = ["--broker", broker_url, "--name", "alice", *extra]
    with WrapProcess(options, child, env=TOKEN) as wrap:
        yield wrap


def child_wrote(tmp_path: Path) -> bytes:
    return (tmp_path / "child.out").read_bytes()


def child_pid(wrap: WrapProcess) -> int:
    """The fake app-server's pid, as tee_child announced it on (wrap's) stderr."""
    eventually(lambda: b"tee_child child=" in wrap.stderr, 60, "tee_child's announcement")
    match = re.search(rb"tee_child child=(\d+)", bytes(wrap.stderr))
    assert match is not None
    return int(match.group(1))


def approve(wrap: WrapProcess, request: dict[str, Any]) -> None:
    wrap.send({"id": request["id"], "result": {"decision": "accept"}})


def blocked_turn(wrap: WrapProcess, turn: int) -> dict[str, Any]:
    wrap.start_turn(turn, approval=True, deltas=3, delay_ms=5)
    request: dict[str, Any] = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
    return request


def recover(proxy: FaultProxy, broker_url: str, wrap: WrapProcess, request: dict[str, Any]) -> None:
    """The broker is back while the member is blocked: the roster must catch up, the
    subscription come back, and — once the client approves — the turn's end show as idle
    (reported: the broker's TTL is :data:`FAR`)."""
    proxy.set_mode("pass")
    eventually(lambda: activity(broker_url) == "blocked", MUST, "blocked caught up")
    eventually(lambda: connected(broker_url) == 1, MUST, "resubscribed")
    approve(wrap, request)
    wrap.wait_for(is_note("turn/completed"))
    eventually(lambda: activity(broker_url) == "idle", MUST, "idle reported")


# -- broker faults during a live turn ---------------------------------------------------------


def test_a_url_that_is_not_a_broker_never_touches_the_session(tmp_path: Path) -> None:
    started = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'
    go = tmp_path / "go"  # the child lives until wrap has said what the URL is, however slow
    child = (
        "import os, sys, time; out = sys.stdout.buffer"
        f"; out.write({started!r} + sys.stdin.buffer.read()); out.flush()"
        f"; [time.sleep(0.02) for _ in range(3000) if not os.path.exists({str(go)!r})]"
        "; out.write(b'child-done\\n')"
    )
    said = b"/whoami answered 200 without a member name (text/html)"
    given = tmp_path / "stdin"
    given.write_bytes(b"hello\n")
    with not_a_broker() as url, given.open("rb") as stdin:
        proc = subprocess.Popen(
            [PY, "-m", "codex_presence", "wrap", "--broker", url, "--", PY, "-c", child],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=wrap_env(TOKEN),
        )
        assert proc.stderr is not None
        stderr = b""
        for line in proc.stderr:  # ends when wrap ends: then the assertion below says why
            stderr += line
            if said in line:
                break
        go.touch()
        out, rest = proc.communicate(timeout=60)
    stderr += rest
    assert out == started + b"hello\nchild-done\n"
    assert proc.returncode == 0
    assert said in stderr
    assert b"Traceback" not in stderr


@pytest.mark.anyio
async def test_a_bug_in_a_broker_task_never_touches_the_session(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The session runs inside the broker link's task group; a task that raised would
    cancel it. A reporter that blows up is logged, and the session goes on."""
    import codex_presence.client.link as daemon
    from codex_presence.agent.wrap.session import WrapSession

    class Broken(daemon.ActivityReporter):
        async def run(self) -> None:
            raise RuntimeError("a bug")

    monkeypatch.setattr(daemon, "ActivityReporter", Broken)
    with running_broker(team=make_team("alice")) as broker:
        link = daemon.BrokerLink(
            daemon.BrokerSettings(url=broker.url, token=token_of("alice"), name="alice")
        )
        in_r, in_w = os.pipe()
        os.close(in_w)
        out_r, out_w = os.pipe()
        relay = WrapSession(
            stdin=in_r, stdout=out_w, observers=[link.observe], companions=[link.session]
        )
        child = "import sys, time; time.sleep(0.5); sys.stdout.write('child-done')"
        with anyio.fail_after(WAIT):
            status = await relay.run([PY, "-c", child])
        os.close(out_w)
        assert os.read(out_r, 100) == b"child-done"
        for fd in (in_r, out_r):
            os.close(fd)
    assert status == 0
    assert "activity reporting failed; the session goes on without it" in caplog.text


def test_broker_down_at_start_then_back(tmp_path: Path) -> None:
    with running_broker(team=make_team("alice", "bob"), **LAPSE_FAR) as broker:
        proxy = FaultProxy(int(broker.url.rsplit(":", 1)[1]), mode="refuse")
        watch = RosterWatch(broker.url)
        try:
            with teed_wrap(tmp_path, proxy.url) as wrap:
                wrap.start_turn(1, deltas=20, delay_ms=5)  # the relay works with no broker
                wrap.wait_for(is_note("turn/completed"))
                request = blocked_turn(wrap, 2)
                assert activity(broker.url) == "idle"  # nothing got through
                recover(proxy, broker.url, wrap, request)
                assert wrap.close() == 0
                assert wrap.stdout == child_wrote(tmp_path)
        finally:
            proxy.close()
    watch.join()
    assert is_subsequence(watch.shown, truth(wrap)), (watch.shown, truth(wrap))
    assert watch.shown[-1] == truth(wrap)[-1] == "idle"
    assert "blocked" in watch.shown


@pytest.mark.parametrize("fault", ["500", pytest.param("stall", marks=pytest.mark.slow), "refuse"])
def test_a_broker_fault_mid_turn_never_touches_the_session(tmp_path: Path, fault: str) -> None:
    """The broker fails while the member is blocked; the client approves, the turn runs to
    its end and a second turn blocks, all during the fault; then the broker comes back."""
    with running_broker(team=make_team("alice", "bob"), **LAPSE_FAR) as broker:
        proxy = FaultProxy(int(broker.url.rsplit(":", 1)[1]), stall=10.0)
        watch = RosterWatch(broker.url)
        try:
            with teed_wrap(tmp_path, proxy.url) as wrap:
                eventually(lambda: connected(broker.url) == 1, 60, "subscribed")
                request = blocked_turn(wrap, 1)
                eventually(lambda: activity(broker.url) == "blocked", 60)
                proxy.set_mode(fault)
                approve(wrap, request)  # working, then idle: the broker hears none of it
                wrap.wait_for(is_note("turn/completed"))
                request = blocked_turn(wrap, 2)
                if fault != "refuse":
                    eventually(lambda: proxy.counts[fault] > 0, 60, "a request met the fault")
                if fault == "stall":
                    # Both turns ran while no broker request had been answered.
                    assert proxy.counts["answered_after_stall"] == 0
                    # Hold the fault past the stall so held requests are answered late.
                    eventually(
                        lambda: proxy.counts["answered_after_stall"] > 0, 15, "a late answer"
                    )
                recover(proxy, broker.url, wrap, request)
                assert wrap.close() == 0
                assert wrap.stdout == child_wrote(tmp_path)
                assert wrap.stdout.count(b'"turn/completed"') == 2
        finally:
            proxy.close()
    watch.join()
    shown, held = watch.shown, truth(wrap)
    assert is_subsequence(shown, held), (shown, held)
    assert shown[-1] == held[-1] == "idle"
    # The broker held "blocked" through the fault (its TTL had not run out) and the daemon's
    # working/idle/blocked in between were superseded: the roster went on showing blocked.
    assert "blocked" in shown


def test_the_fault_proxy_refuses_and_comes_back_on_its_port_at_once() -> None:
    """The flapping test's outage ends right after it began (the flapper's last "refuse", then
    recover()'s "pass"): the port must be free again at once, and refused in between."""
    proxy = FaultProxy(upstream_port=9)  # nothing is forwarded: only the listener matters
    try:
        for _ in range(20):
            proxy.set_mode("refuse")
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
            proxy.set_mode("pass")
            socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
    finally:
        proxy.close()


def test_a_flapping_broker(tmp_path: Path) -> None:
    """Connections refused and accepted in turn every 0.2-0.5 s while turns run."""
    with running_broker(team=make_team("alice", "bob"), **LAPSE_FAR) as broker:
        proxy = FaultProxy(int(broker.url.rsplit(":", 1)[1]))
        watch = RosterWatch(broker.url)
        stop = threading.Event()

        def flap() -> None:
            for k in range(40):  # bounded: at most ~14 s
                if stop.wait(0.2 + 0.3 * (k % 2)):
                    return
                proxy.set_mode("refuse" if k % 2 == 0 else "pass")

        try:
            with teed_wrap(tmp_path, proxy.url) as wrap:
                flapper = threading.Thread(target=flap, daemon=True)
                flapper.start()
                for turn in range(1, 7):
                    wrap.start_turn(turn, approval=turn % 2 == 0, deltas=10, delay_ms=20)
                    if turn % 2 == 0:
                        request = wrap.wait_for(is_request("item/commandExecution/requestApproval"))
                        time.sleep(0.3)
                        approve(wrap, request)
                    wrap.wait_for(is_note("turn/completed"))
                request = blocked_turn(wrap, 7)
                stop.set()
                flapper.join(WAIT)
                recover(proxy, broker.url, wrap, request)
                assert wrap.close() == 0
                assert wrap.stdout == child_wrote(tmp_path)
        finally:
            proxy.close()
    watch.join()
    assert is_subsequence(watch.shown, truth(wrap)), (watch.shown, truth(wrap))
    assert watch.shown[-1] == "idle"


@pytest.mark.slow
def test_broker_sigkilled_mid_turn_and_restarted(tmp_path: Path) -> None:
    """A restarted broker knows nothing; the daemon's next heartbeat (or retry) tells it."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [(n, None, token_of(n)) for n in ("alice", "bob")]))
    with (
        broker_process("--team", str(team), *LAPSE_FAR_ARGS) as first,
        teed_wrap(tmp_path, first.url) as wrap,
    ):
        url = first.url
        eventually(lambda: connected(url) == 1, 60, "subscribed")
        request = blocked_turn(wrap, 1)
        eventually(lambda: activity(url) == "blocked", 60)
        first.proc.kill()
        first.proc.wait(WAIT)
        approve(wrap, request)  # the turn goes on with no broker at all
        wrap.wait_for(is_note("turn/completed"))
        request = blocked_turn(wrap, 2)
        with broker_process("--team", str(team), *LAPSE_FAR_ARGS, port=first.port):  # knows nothing
            eventually(lambda: activity(url) == "blocked", MUST, "blocked again")
            eventually(lambda: connected(url) == 1, MUST, "resubscribed")
            approve(wrap, request)
            wrap.wait_for(is_note("turn/completed"))
            eventually(lambda: activity(url) == "idle", MUST, "idle reported")
            assert wrap.close() == 0
    assert wrap.stdout == child_wrote(tmp_path)


@pytest.mark.slow
def test_a_broker_sharing_redis_sigkilled_mid_turn_comes_back_knowing(tmp_path: Path) -> None:
    """With ``--redis`` (issue 18), the restarted broker shows what the killed one knew at
    once, before any heartbeat could tell it; the session goes on as ever."""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [(n, None, token_of(n)) for n in ("alice", "bob")]))
    with (
        redis_server() as redis,
        broker_process("--team", str(team), *LAPSE_FAR_ARGS, redis=redis.url) as first,
        teed_wrap(tmp_path, first.url) as wrap,
    ):
        url = first.url
        eventually(lambda: connected(url) == 1, 60, "subscribed")
        request = blocked_turn(wrap, 1)
        eventually(lambda: activity(url) == "blocked", 60)
        first.proc.kill()
        first.proc.wait(WAIT)
        with broker_process("--team", str(team), *LAPSE_FAR_ARGS, redis=redis.url, port=first.port):
            assert activity(url) == "blocked"  # its first answer: no report since the kill
            approve(wrap, request)
            wrap.wait_for(is_note("turn/completed"))
            eventually(lambda: activity(url) == "idle", MUST, "idle reported")
            # the killed broker and its count leave (by the bound); wrap's new stream counts
            brokers = redis_client.Redis.from_url(redis.url)

            def only_the_new_one() -> bool:
                return brokers.zcard("codex-presence:{acme}:brokers") == 1 and connected(url) == 1

            eventually(only_the_new_one, MUST, "the killed broker gone, wrap's stream on")
            assert wrap.close() == 0
    assert wrap.stdout == child_wrote(tmp_path)


def test_a_restarted_broker_is_told_the_state_at_once_not_at_the_next_heartbeat(
    tmp_path: Path,
) -> None:
    """Blocked across a broker restart, with no transition to report: the daemon re-sends
    its state as soon as its subscription is back. (Before, only the next heartbeat did,
    up to 10 s later: the roster showed idle for ~9 s.)"""
    team = tmp_path / "team.toml"
    team.write_text(render_team("acme", [(n, None, token_of(n)) for n in ("alice", "bob")]))
    with (
        broker_process("--team", str(team), *LAPSE_FAR_ARGS) as first,
        teed_wrap(tmp_path, first.url) as wrap,
    ):
        url = first.url
        eventually(lambda: connected(url) == 1, 60, "subscribed")
        request = blocked_turn(wrap, 1)
        eventually(lambda: activity(url) == "blocked", 60)
        first.proc.kill()
        first.proc.wait(WAIT)
        with broker_process("--team", str(team), *LAPSE_FAR_ARGS, port=first.port):  # knows nothing
            eventually(lambda: connected(url) == 1, MUST, "resubscribed")
            # The heartbeat is a third of the FAR TTL away: only the re-send can do it.
            eventually(lambda: activity(url) == "blocked", MUST, "blocked again")
            approve(wrap, request)
            wrap.wait_for(is_note("turn/completed"))
            eventually(lambda: activity(url) == "idle", MUST, "idle reported")
            assert wrap.close() == 0
    assert wrap.stdout == child_wrote(tmp_path)


def test_the_heartbeat_follows_the_brokers_ttl(tmp_path: Path) -> None:
    """The broker states its TTL in /whoami and wrap heartbeats at a third of it: with a
    5 s TTL, a member blocked for two TTLs is shown blocked all along. (Before, wrap
    heartbeat every 10 s whatever the TTL, and the member showed idle from 5 s on.) The TTL
    is long enough that only a stall of over 3 s between two heartbeats could lapse it (a
    2 s TTL lapsed on a 1.4 s one); past 10 s, a 10 s heartbeat could not have held it."""
    ttl = 5.0
    with (
        running_broker(team=make_team("alice", "bob"), activity_ttl=ttl) as broker,
        teed_wrap(tmp_path, broker.url) as wrap,
    ):
        url = broker.url
        eventually(lambda: connected(url) == 1, 60, "subscribed")
        watch = RosterWatch(url)
        request = blocked_turn(wrap, 1)
        eventually(lambda: activity(url) == "blocked", 60)
        time.sleep(2 * ttl)
        assert activity(url) == "blocked"
        shown = watch.shown  # the turn's working may show before its approval (a loaded run)
        assert shown[0] == "idle" and "blocked" in shown, shown
        assert shown[shown.index("blocked") :] == ["blocked"], shown  # never lapsed at all
        approve(wrap, request)
        wrap.wait_for(is_note("turn/completed"))
        eventually(lambda: activity(url) == "idle", 60)
        assert wrap.close() == 0
    watch.join()


# -- process faults -------------------------------------------------------------------------


def test_child_sigkilled_mid_turn_reports_idle_and_wrap_exits_137(tmp_path: Path) -> None:
    """The idle is wrap's report: the broker's TTL and grace are FAR, so no lapse shows it
    (and wrap's exit grace is long, so a loaded machine's slow answer still lands it)."""
    with (
        running_broker(team=make_team("alice", "bob"), **LAPSE_FAR) as broker,
        teed_wrap(tmp_path, broker.url, "--exit-grace", "30") as wrap,
    ):
        wrap.wait_online()
        wrap.start_turn(1, deltas=500, delay_ms=20)
        wrap.wait_for(is_note("turn/started"))
        eventually(lambda: activity(broker.url) == "working", 60)
        os.kill(child_pid(wrap), signal.SIGKILL)
        assert (
            exits(wrap.proc, what="wrap", seen=wrap.stderr.decode) == 128 + signal.SIGKILL
        )  # tee_child passes it on
        eventually(lambda: activity(broker.url) == "idle", MUST, "idle reported")
        wrap.close()
    assert wrap.stdout == child_wrote(tmp_path)
    assert b"idle (eof)" in wrap.stderr or b"idle (" in wrap.stderr


def test_client_closes_stdin_while_blocked(tmp_path: Path) -> None:
    """The client hangs up during an approval: the child sees EOF and exits 0 with its turn
    in flight; wrap keeps that status and reports idle (the broker's TTL and grace are FAR:
    no lapse can show it; wrap's exit grace is long, so a loaded machine's slow answer
    still lands the report)."""
    with (
        running_broker(team=make_team("alice", "bob"), **LAPSE_FAR) as broker,
        teed_wrap(tmp_path, broker.url, "--exit-grace", "30") as wrap,
    ):
        wrap.wait_online()
        blocked_turn(wrap, 1)
        eventually(lambda: activity(broker.url) == "blocked", 60)
        assert wrap.proc.stdin is not None
        wrap.proc.stdin.close()
        assert exits(wrap.proc, what="wrap", seen=wrap.stderr.decode) == 0
        eventually(lambda: activity(broker.url) == "idle", MUST, "idle reported")
        wrap.close()
    assert wrap.stdout == child_wrote(tmp_path)


def test_wrap_sigkilled_mid_turn_child_dies_and_the_ttl_clears_the_roster(
    tmp_path: Path,
) -> None:
    """Nothing can report idle: the TTL (2 s) clears the roster. The session grace is FAR,
    so the TTL is the only thing that can (decided by cause, not by how long it took)."""
    ttl = 2.0
    with (
        running_broker(
            team=make_team("alice", "bob"), activity_ttl=ttl, session_grace=FAR
        ) as broker,
        teed_wrap(tmp_path, broker.url) as wrap,
    ):
        wrap.wait_online()
        wrap.start_turn(1, deltas=1000, delay_ms=20)
        wrap.wait_for(is_note("turn/started"))
        eventually(lambda: activity(broker.url) == "working", 60)
        eventually(lambda: connected(broker.url) == 1, 60)
        child = child_pid(wrap)
        wrap.proc.kill()  # no chance to report idle
        wrap.proc.wait(WAIT)
        eventually(lambda: not alive(child), 60, "the child died with wrap")
        eventually(lambda: activity(broker.url) == "idle", MUST, "the TTL lapse")
        eventually(lambda: connected(broker.url) == 0, WAIT, "the stream uncounted")


# -- --record on a failing target, through the real command ---------------------------------

_READ_ONLY = "/sys/kernel/notes"  # a read-only sysfs attribute: EACCES even for root


@pytest.mark.parametrize("target", ["/dev/full", _READ_ONLY])
def test_record_on_a_full_or_read_only_target(tmp_path: Path, target: str) -> None:
    """In-process variants (ENOSPC, ENOENT, EACCES) are in test_relay.py; this one runs the
    command, as root too (a read-only directory does not stop root, sysfs does)."""
    assert Path(target).exists(), f"{target} is needed for this test"
    with WrapProcess(
        ["--record", target],
        [PY, str(SUPPORT / "tee_child.py"), str(tmp_path / "child.out"), *FAKE_APP_SERVER],
    ) as wrap:
        for turn in range(1, 4):
            wrap.start_turn(turn, deltas=200)
            wrap.wait_for(is_note("turn/completed"))
        assert wrap.close() == 0
    assert wrap.stdout == child_wrote(tmp_path)
    assert wrap.stdout.count(b'"turn/completed"') == 3
    assert wrap.stderr.count(b"stopped") == 1  # said once that recording failed
    assert f"recording to {target} stopped".encode() in wrap.stderr
