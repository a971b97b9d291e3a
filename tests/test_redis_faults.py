"""What brokers sharing Redis survive besides an outage: values they cannot read (another
version's), a failure of their own, keys flushed behind their backs, a Redis that stalls;
and what they never say (a password in the URL, Redis's words to a stranger).

Each test starts its own real ``redis-server`` and writes to it directly (``redis-py``,
synchronous) what a newer broker, an operator or a bug could have left there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import redis

from codex_presence.broker.redis.link import MAX_CONNECTIONS, RedisLink
from codex_presence.broker.redis.sign_ins import RedisSignIns
from codex_presence.broker.sign_ins import SignIn
from codex_presence.core.backoff import Backoff
from tests.support.broker_harness import FakeClock, broker_process, running_broker, shared_state
from tests.support.redis_server import redis_server
from tests.support.shared_brokers import (
    TEAM,
    Stream,
    auth,
    brokers,
    report,
    roster,
    team_file,
)
from tests.support.waiting import WAIT, eventually, eventually_async

KEYS = "codex-presence:{acme}:"
"""What the keys of TEAM (team ``acme``) start with."""


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("codex_presence")]


# -- values it cannot read, failures of its own ------------------------------------------------


def test_a_value_of_another_version_never_stops_a_broker(redis_url: str, tmp_path: Path) -> None:
    """Before: a broker starting with such a value in Redis exited 3 (``KeyError``); one
    forced to reconnect lived on answering 503 for ever; a value without a space made
    that member's reports 503."""
    direct = redis.Redis.from_url(redis_url)

    def plant(name: str, value: str) -> None:
        direct.set(KEYS + f"s::{name}", value, px=600_000)
        direct.zadd(KEYS + f"S:{name}", {"": 1e15})

    plant("alice", "garbage 1")
    plant("builder", "garbage")  # not even a space
    with broker_process("--team", team_file(tmp_path), redis=redis_url) as broker:
        shown = roster(broker.url)
        assert "activity" not in shown["alice"] and "activity" not in shown["builder"]  # idle
        for name in ("alice", "builder"):
            assert f"dropped what no broker writes in {KEYS}s::{name}" in broker.said()
        # the next report replaces what could not be read
        assert report(broker.url, "alice", "working").status_code == 204
        assert report(broker.url, "builder", "blocked").status_code == 204
        shown = roster(broker.url)
        assert (shown["alice"]["activity"], shown["builder"]["activity"]) == ("working", "blocked")

        # read again on a reconnection: still no more than an idle member
        plant("alice", "garbage 1")
        direct.client_kill_filter(_type="pubsub")
        broker.stderr.until("redis down")
        broker.stderr.until("redis back")
        assert "activity" not in roster(broker.url)["alice"]
        assert roster(broker.url)["builder"]["activity"] == "blocked"
        assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 200
        assert report(broker.url, "alice", "blocked").status_code == 204
        said = broker.said()
        assert said.count(f"{KEYS}s::alice:") == 1  # the same value: said once
        assert "Traceback" not in said


class _Faulty:
    """A listener of the link with a bug: its first ``resyncs`` resyncs raise, and so does
    its first ``keep`` after it succeeded."""

    def __init__(self, resyncs: int) -> None:
        self.resyncs = resyncs
        self.kept = 0

    async def resync(self) -> None:
        if self.resyncs > 0:
            self.resyncs -= 1
            raise RuntimeError("a bug in resync")

    async def keep(self) -> None:
        self.kept += 1
        if self.kept == 1:
            raise KeyError("a bug in keep")
        await anyio.sleep_forever()

    def on_event(self, event: dict[str, Any]) -> None:
        pass

    def on_down(self, reason: str) -> None:
        pass

    def on_back(self) -> None:
        pass

    async def leave(self) -> None:
        pass


@pytest.mark.anyio
async def test_anything_that_fails_in_the_link_is_an_outage_that_ends(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: only what an unreachable Redis raises was an outage; anything else ended the
    link's loop for good (and with it the broker's state)."""
    caplog.set_level(logging.INFO, logger="codex_presence")
    link = RedisLink(redis_url, team="acme", backoff=Backoff(base=0.05, cap=0.1))
    faulty = _Faulty(resyncs=3)
    link.add_listener(faulty)
    async with anyio.create_task_group() as tg:
        await tg.start(link.run)
        await eventually_async(lambda: link.up and faulty.kept == 2, 60, "the link up again")
        tg.cancel_scope.cancel()
    said = logged(caplog)
    assert sum(m.startswith("redis down") for m in said) == 2  # two outages: each said once
    assert sum(m.startswith("redis back") for m in said) == 2
    traced = [repr(r.exc_info[1]) for r in caplog.records if r.exc_info]
    assert traced == [
        "RuntimeError('a bug in resync')",  # once for three failures in a row
        "KeyError('a bug in keep')",
    ]


def test_a_broker_whose_background_work_fails_stops_and_says_so(tmp_path: Path) -> None:
    """Before: uvicorn went on serving after the app's lifespan task died, so the broker
    stayed up with nothing keeping its state. A bug has to be planted for this: the fan-out
    raises."""
    plant = (
        "import sys\n"
        "from codex_presence.broker.state import Broker\n"
        "async def broken(self): raise RuntimeError('the fan-out broke')\n"
        "Broker.run_fanout = broken\n"
        "from codex_presence.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    result = subprocess.run(
        [sys.executable, "-c", plant, "broker", "--team", team_file(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 1, result.stderr
    assert "the broker's background work failed: stopping" in result.stderr
    assert "the fan-out broke" in result.stderr


def test_an_error_redis_answers_is_a_503_that_says_so(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: 503 "the shared store (Redis) is unreachable (WRONGTYPE …)", though Redis
    had answered. (A value of the wrong type no longer makes Redis answer an error: see
    the test below; a Redis out of memory does. No heartbeat in the test, which would
    make it an outage.)"""
    caplog.set_level(logging.WARNING, logger="codex_presence")
    store = shared_state(redis_url, TEAM, beat=600).store
    with running_broker(team=TEAM, store=store) as broker:
        direct = redis.Redis.from_url(redis_url)
        direct.config_set("maxmemory", "1")
        try:
            answer = report(broker.url, "alice", "working")
        finally:
            direct.config_set("maxmemory", "0")
        assert answer.status_code == 503, (answer.status_code, answer.text)
        assert answer.headers["retry-after"] == "1"
        error = answer.json()["error"]
        assert error == (
            "the shared store (Redis) refused the command: the report was not recorded; "
            "send it again"
        )
        assert any("maxmemory" in m for m in logged(caplog))  # Redis's words: in the log
        assert report(broker.url, "alice", "working").status_code == 204


def test_the_log_and_healthz_say_the_real_cause_of_an_outage(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: a dropped subscription followed by resyncs that Redis refused was logged
    (and shown to members on ``/healthz``) as "Connection closed by server." for as long
    as it lasted."""
    direct = redis.Redis.from_url(redis_url)
    with broker_process("--team", team_file(tmp_path), redis=redis_url) as broker:
        direct.config_set("maxmemory", "1")
        try:
            direct.client_kill_filter(_type="pubsub")
            broker.stderr.until("redis down: .*Connection closed")
            assert "maxmemory" in broker.stderr.until("redis still down", 60)
            member = httpx.get(broker.url + "/healthz", headers=auth("scout"), timeout=5)
            assert member.status_code == 503 and "maxmemory" in member.json()["reason"]
        finally:
            direct.config_set("maxmemory", "0")
        broker.stderr.until("redis back", 60)
        assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 200


# -- keys flushed behind the brokers' backs ----------------------------------------------------


@pytest.mark.parametrize("lost", ["FLUSHDB", "DEL seq"])
def test_reports_show_again_after_the_keys_are_flushed(redis_url: str, lost: str) -> None:
    """Before: with ``seq`` gone, every later event was taken for one already applied:
    reports got 204 and changed nothing on any roster. Now the first event numbered at or
    below the one before it makes each broker read everything again."""
    with brokers(redis_url) as (a, b):
        on_a, on_b = Stream(a.url, "alice"), Stream(b.url, "scout")
        for sent, state in enumerate(("working", "blocked", "working"), 1):
            assert report(a.url, "builder", state).status_code == 204
            eventually(lambda n=sent: len(on_b.of("builder")) == n, 60, "B seeing it")  # type: ignore[misc]
        direct = redis.Redis.from_url(redis_url)
        if lost == "FLUSHDB":
            direct.flushdb()
        else:
            direct.delete(KEYS + "seq")
        # The first report after it may find the broker reading everything again (a 503, as
        # in any outage: a runner sends it again); one is taken within the retries.
        eventually(
            lambda: report(a.url, "builder", "blocked").status_code == 204,
            60,
            "a report taken after the keys were lost",
        )

        def shown_on_both() -> bool:
            return all(
                roster(x.url)["builder"].get("activity") == "blocked"
                and roster(x.url)["alice"]["connected"] == 1
                and roster(x.url)["scout"]["connected"] == 1
                for x in (a, b)
            )

        eventually(shown_on_both, 60, "the report on both brokers")
        assert report(b.url, "builder", "idle").status_code == 204  # and the next ones too
        eventually(lambda: all("activity" not in roster(x.url)["builder"] for x in (a, b)), 60)
        for stream in (on_a, on_b):  # stale, the whole roster again, then as usual
            eventually(lambda s=stream: _builder_after_stale(s) == ["blocked", None], WAIT)  # type: ignore[misc]
            assert not stream.ended.is_set()


def _builder_after_stale(stream: Stream) -> list[str | None]:
    """Builder's activity as ``stream`` showed it since its last ``stale`` event."""
    shown: list[str | None] = []
    for kind, data in stream.events:
        if kind == "stale":
            shown = []
        elif kind == "roster":
            shown += [p.get("activity") for p in data["members"] if p["name"] == "builder"]
        elif kind == "presence" and data["name"] == "builder":
            shown.append(data.get("activity"))
    return shown


# -- a Redis that stalls -------------------------------------------------------------------------


def _connections_to(port: int) -> int:
    """Open TCP connections of this process (the broker runs in it) to ``port``. Only
    sockets this process holds count: on a machine running other tests, another process's
    socket whose peer happens to use the same port number must not."""
    ours = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                ours.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if (
                    fields[3] == "01"
                    and int(fields[2].rsplit(":", 1)[1], 16) == port
                    and fields[9] in ours
                ):
                    count += 1
    return count


def test_a_stalled_redis_costs_a_bounded_number_of_connections() -> None:
    """Before: each report in flight opened a connection of its own (up to redis-py's 100,
    then an error)."""
    answers: list[int] = []

    def send() -> None:
        answers.append(report(broker.url, "builder", "working").status_code)

    with redis_server() as server, running_broker(team=TEAM, redis=server.url) as broker:
        assert report(broker.url, "builder", "working").status_code == 204
        server.pause()
        try:
            senders = [threading.Thread(target=send) for _ in range(48)]
            for sender in senders:
                sender.start()
            most = 0
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                most = max(most, _connections_to(server.port))
                time.sleep(0.02)
        finally:
            server.resume()
        for sender in senders:
            sender.join(15)
        # The pool's bound (16: the subscription, the heartbeat, the reports), and one more
        # at the moment a failed batch's connection is replaced: asyncio closes its socket
        # at the loop's next turn, and on loopback the new one may be connected by then
        # (CI saw 17 once in many runs). Before the bound, every report in flight had one.
        assert most <= MAX_CONNECTIONS + 1, most
        assert sorted(set(answers)) in ([503], [204, 503], [204])
        assert len(answers) == 48  # every one answered
        eventually(lambda: report(broker.url, "builder", "blocked").status_code == 204, 60)


# -- what a stranger is told ---------------------------------------------------------------------


def test_healthz_tells_a_stranger_unavailable_and_a_member_why(tmp_path: Path) -> None:
    """Before: ``/healthz``, which needs no token, said Redis's own words to anyone."""
    with redis_server() as server, running_broker(team=TEAM, redis=server.url) as broker:
        server.stop(kill=True)
        eventually(lambda: httpx.get(broker.url + "/healthz").status_code == 503, WAIT)
        stranger = httpx.get(broker.url + "/healthz", timeout=5).json()
        assert stranger.pop("startedAt") > 0
        assert stranger == {"status": "unavailable", "store": "redis"}
        member = httpx.get(broker.url + "/healthz", headers=auth("scout"), timeout=5).json()
        assert member["status"] == "unavailable" and member["reason"]


# -- the session cache -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_session_cache_forgets_expired_sessions_and_is_bounded(redis_url: str) -> None:
    """Before: a session that expired unseen stayed cached for the broker's life."""
    clock = FakeClock()
    link = RedisLink(redis_url, team="acme")
    sessions = RedisSignIns(link, ttl=60, max_cached=3, clock=clock)
    cache = sessions._cache
    async with anyio.create_task_group() as tg:
        await tg.start(link.run)
        for _ in range(3):
            await sessions.create(SignIn("alice", key="k"))
        clock.advance(61)  # all three expired (here: Redis keeps them for 60 real seconds)
        kept = await sessions.create(SignIn("builder", key="k"))
        assert list(cache) == [kept]
        made = [await sessions.create(SignIn("scout", key="k")) for _ in range(5)]
        assert list(cache) == made[-3:]  # the newest three
        for session_id in made:  # the others are still sessions: read from Redis again
            assert await sessions.get(session_id) == SignIn("scout", key="k")
        assert len(cache) == 3
        tg.cancel_scope.cancel()


# -- one value the brokers cannot read -------------------------------------------------------------

_POISONS = {
    "m:builder": lambda r: r.hset(KEYS + "m:builder", "c", "garbage"),
    "seq": lambda r: r.set(KEYS + "seq", "abc"),
    "s::builder": lambda r: (r.delete(KEYS + "s::builder"), r.hset(KEYS + "s::builder", "s", "1")),
    "brokers": lambda r: r.set(KEYS + "brokers", "not a sorted set"),
}


@pytest.mark.parametrize("poisoned", list(_POISONS))
def test_a_value_the_brokers_cannot_read_never_fails_a_report(
    redis_url: str, poisoned: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: builder's reports got 503 at once ("compare number with nil", WRONGTYPE),
    and with ``seq`` = ``abc`` or ``brokers`` a string, everyone's (the heartbeat failed:
    an outage, no disconnect needed)."""
    caplog.set_level(logging.WARNING, logger="codex_presence")
    direct = redis.Redis.from_url(redis_url)
    with running_broker(team=TEAM, redis=redis_url) as broker:
        assert report(broker.url, "builder", "blocked").status_code == 204
        _POISONS[poisoned](direct)
        time.sleep(2.5)  # a heartbeat meets it first, for the keys it touches
        for name in ("builder", "alice"):  # seq starting again: a resync first, of a moment
            eventually(lambda n=name: report(broker.url, n, "working").status_code == 204, 60)  # type: ignore[misc]
        assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 200
        eventually(lambda: roster(broker.url)["builder"].get("activity") == "working", 60)
    said = [m for m in logged(caplog) if "holds a value this broker cannot read" in m]
    assert len(said) == 1 and f"{KEYS}{poisoned} " in said[0], said
    assert not any("team file differs" in m for m in logged(caplog))


@pytest.mark.parametrize("poisoned", list(_POISONS))
def test_a_value_the_brokers_cannot_read_never_takes_the_team_down(
    redis_url: str, tmp_path: Path, poisoned: str
) -> None:
    """Before: after a pub/sub disconnect every broker of the team stayed in outage
    (``/healthz`` 503, every report 503) for as long as the key stayed, logging only
    "Connection closed by server."; builder's own reports got 503 at once ("compare number
    with nil", WRONGTYPE). Now the value costs at most that member (shown idle), and the
    log names the key, once."""
    direct = redis.Redis.from_url(redis_url)
    with broker_process("--team", team_file(tmp_path), redis=redis_url) as broker:
        assert report(broker.url, "builder", "blocked").status_code == 204
        _POISONS[poisoned](direct)
        direct.client_kill_filter(_type="pubsub")
        broker.stderr.until("redis down")
        broker.stderr.until("redis back", 60)
        assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 200
        for name in ("alice", "builder", "scout"):
            assert report(broker.url, name, "working").status_code == 204, name
        shown = roster(broker.url)
        assert [shown[n].get("activity") for n in ("alice", "builder", "scout")] == ["working"] * 3
        direct.client_kill_filter(_type="pubsub")  # and again: the value was replaced
        broker.stderr.until("redis back", 60)
        assert report(broker.url, "builder", "idle").status_code == 204
        said = broker.said()
        assert said.count(f"{KEYS}{poisoned} holds a value this broker cannot read") == 1, said
        assert "Traceback" not in said and "team file differs" not in said


@pytest.mark.anyio
async def test_a_session_value_the_brokers_cannot_read_costs_that_session_only(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: alice's session set stored as a string made every sign-in of alice fail
    (WRONGTYPE), and a record that is not JSON failed the request that checked it (and
    signing it out)."""
    caplog.set_level(logging.WARNING, logger="codex_presence")
    direct = redis.Redis.from_url(redis_url)
    direct.set(KEYS + "sm:alice", "not a sorted set")
    direct.set(KEYS + "s:forged", "not json", px=600_000)
    link = RedisLink(redis_url, team="acme")
    sessions = RedisSignIns(link)
    async with anyio.create_task_group() as tg:
        await tg.start(link.run)
        made = await sessions.create(SignIn("alice", key="k"))
        assert await sessions.get(made) == SignIn("alice", key="k")
        assert await sessions.get("forged") is None
        await sessions.end("forged")
        assert not direct.exists(KEYS + "s:forged")
        tg.cancel_scope.cancel()
    assert any("holds a browser session this broker cannot read" in m for m in logged(caplog))


# -- credentials ------------------------------------------------------------------------------


def run_broker(team: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    return subprocess.run(
        [*BROKER, "--team", team, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "CODEX_PRESENCE_REDIS": url},
    )


BROKER = (sys.executable, "-m", "codex_presence", "broker")


def test_wrong_or_missing_redis_credentials_stop_the_broker_on_one_line(tmp_path: Path) -> None:
    """Before: Redis's own words ("HELLO must be called with the client already
    authenticated", WRONGPASS), logged as an outage, and the broker listened and retried for
    ever. Now a configuration error, exit 2, one line, no password in it."""
    team = team_file(tmp_path)
    with redis_server() as server:
        redis.Redis.from_url(server.url).config_set("requirepass", "s3cret-right")
        port = server.port
        for url, said in [
            (f"redis://127.0.0.1:{port}/0", "refused the credentials"),
            (f"redis://:s3cret-wrong@127.0.0.1:{port}/0", "refused the credentials"),
            (f"redis://nobody:s3cret-wrong@127.0.0.1:{port}/0", "refused the credentials"),
        ]:
            result = run_broker(team, url)
            assert result.returncode == 2, (url, result.stderr)
            lines = result.stderr.splitlines()
            assert len(lines) == 1 and said in lines[0], (url, result.stderr)
            assert "CODEX_PRESENCE_REDIS" in lines[0] and "s3cret" not in result.stderr
            assert "listening on" not in result.stderr


def test_a_password_changed_under_a_running_broker_is_an_outage_it_rides_out(
    tmp_path: Path,
) -> None:
    """After the start, a refusal of the credentials is retried like any outage (the
    password may be changing on both sides): the broker stays up and comes back."""
    with redis_server() as server:
        direct = redis.Redis.from_url(server.url)
        direct.config_set("requirepass", "first")
        url = f"redis://:first@127.0.0.1:{server.port}/0"
        with broker_process("--team", team_file(tmp_path), redis=url) as broker:
            admin = redis.Redis.from_url(url)
            admin.config_set("requirepass", "second")
            admin.client_kill_filter(_type="pubsub")
            admin.client_kill_filter(_type="normal", skipme=True)
            broker.stderr.until("redis down: ", 60)
            assert broker.proc.poll() is None, broker.said()
            again = redis.Redis.from_url(f"redis://:second@127.0.0.1:{server.port}/0")
            again.config_set("requirepass", "first")
            broker.stderr.until("redis back", 60)
            assert httpx.get(broker.url + "/healthz", timeout=60).status_code == 200
