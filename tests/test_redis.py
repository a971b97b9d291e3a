"""Several brokers sharing one real redis-server (issue 18): one roster, the TTL, the fan-out,
dead brokers, restarts of a broker and of Redis itself.

Brokers run in this process (uvicorn in threads, each with its own link to Redis, as
separate processes would have) where a test needs to look inside, and as the real
``codex-presence broker --redis`` command where a process must die. The rules themselves,
bad input included, are tested against both stores in ``tests/test_broker.py`` and
``tests/test_web.py``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
import redis

from codex_presence.broker.redis.store import BOUND
from codex_presence.broker.team_file import render_team
from codex_presence.broker.web import COOKIE_NAME, KEY_HEADER, WebRoster
from tests.support.broker_harness import (
    broker_process,
    make_team,
    running_broker,
    shared_state,
    token_of,
)
from tests.support.redis_server import redis_server
from tests.support.shared_brokers import (
    TEAM,
    Stream,
    brokers,
    report,
    roster,
    team_file,
)
from tests.support.waiting import WAIT, eventually

# -- one roster ------------------------------------------------------------------------------


def test_two_brokers_show_one_roster(redis_url: str) -> None:
    with brokers(redis_url) as (a, b):
        streams = [Stream(a.url, "alice"), Stream(b.url, "builder"), Stream(a.url, "builder")]
        assert report(a.url, "builder", "working").status_code == 204
        assert report(b.url, "alice", "blocked").status_code == 204

        def same_roster() -> bool:
            first, second = roster(a.url), roster(b.url)
            return first == second and second["builder"]["connected"] == 2

        eventually(same_roster, 60, f"one roster: {roster(a.url)} {roster(b.url)}")
        shown = roster(b.url)
        assert shown["alice"]["connected"] == 1
        assert (shown["builder"]["activity"], shown["alice"]["activity"]) == ("working", "blocked")
        assert shown["scout"]["connected"] == 0 and "activity" not in shown["scout"]
        # createdAt and lastSeen are shared too: builder's report on A, alice's on B
        assert shown["builder"]["createdAt"] > 0 and shown["builder"]["lastSeen"] > 0
        assert shown["alice"]["lastSeen"] >= shown["alice"]["createdAt"] > 0
        assert [stream.status for stream in streams] == [200, 200, 200]


def test_a_report_reaches_the_streams_of_every_broker_once(redis_url: str) -> None:
    with brokers(redis_url) as (a, b):
        on_a, on_b = Stream(a.url, "alice"), Stream(b.url, "scout")
        for sent, state in enumerate(("working", "blocked", "idle"), 1):
            assert report(a.url, "builder", state).status_code == 204
            for stream in (on_a, on_b):  # each transition is seen before the next is sent
                eventually(lambda s=stream, n=sent: len(s.of("builder")) == n, 60)  # type: ignore[misc]
        assert report(a.url, "builder", "idle").status_code == 204  # no change: no event
        time.sleep(0.5)  # anything duplicated or late would be here by now
        for stream in (on_a, on_b):
            assert [p.get("activity") for p in stream.of("builder")] == ["working", "blocked", None]


def test_the_ttl_holds_across_brokers(redis_url: str) -> None:
    """A heartbeat to B renews what was reported to A, in Redis and in both mirrors; then
    silence lets it lapse everywhere, announced by each broker only once Redis's key is
    gone. Decided by Redis's expiry times and the order of events, never by a schedule:
    the 6 s TTL is far longer than any stall between the test's steps."""
    ttl = 6.0
    key = "codex-presence:{acme}:s::builder"  # the anonymous session's record
    store = redis.Redis.from_url(redis_url)
    with brokers(redis_url, activity_ttl=ttl) as (a, b):
        on_a, on_b = Stream(a.url, "scout"), Stream(b.url, "alice")
        assert report(a.url, "builder", "working").status_code == 204
        first_expiry = store.pexpiretime(key)
        assert first_expiry > 0
        # Two seconds of the TTL go by, then the heartbeat goes to B.
        eventually(lambda: 0 < store.pttl(key) < (ttl - 2) * 1000, ttl, "two seconds gone")
        assert report(b.url, "builder", "working").status_code == 204
        assert store.pexpiretime(key) >= first_expiry + 2000  # renewed, not set anew
        assert roster(a.url)["builder"]["activity"] == "working"
        # Then silence: each broker says the lapse, and not before Redis's key is gone (a
        # mirror that missed the renewal would say it two seconds early).
        for url, stream in ((a.url, on_a), (b.url, on_b)):
            eventually(lambda s=stream: "activity" not in s.of("builder")[-1], WAIT, "the lapse")  # type: ignore[misc]
            assert store.exists(key) == 0, f"{url} lapsed before Redis did"
            assert "activity" not in roster(url)["builder"]
        for stream in (on_a, on_b):
            assert [p.get("activity") for p in stream.of("builder")] == ["working", None]
        assert store.keys("*:s::builder") == []  # idle is the key's absence


@pytest.mark.parametrize("session", ["", "forgedSession0001"])
def test_a_forged_events_activity_lapses_within_the_brokers_ttl(
    redis_url: str, session: str
) -> None:
    """Anyone who may PUBLISH on the team's channel sent an event whose TTL was 600 s:
    its activity held past the broker's TTL (>= 42 s against 30 s). What a broker reads,
    from an event or a key, is held at most its own TTL: the forged state lapses, on the
    broker's own timer, as a report that was never renewed."""
    store = redis.Redis.from_url(redis_url)
    with brokers(redis_url, count=1, activity_ttl=2.0) as (a,):
        seq = int(store.get("codex-presence:{acme}:seq") or 0) + 1
        now = redis_ms(store)
        record = {"state": "blocked", "since": now, "background": 0, "agent": None}
        event = {"kind": "s", "seq": seq, "name": "builder", "session": session,
                 "ttl": 600_000, "createdAt": now, "lastSeen": now, "record": record}  # fmt: skip
        store.publish("codex-presence:{acme}:events", orjson.dumps(event))
        eventually(
            lambda: roster(a.url)["builder"].get("activity") == "blocked",
            30,
            "the forged event applied",
        )
        eventually(
            lambda: "activity" not in roster(a.url)["builder"],
            60,
            f"the lapse, which the broker's TTL (2 s) bounds: {roster(a.url)['builder']}",
        )


def test_teams_sharing_one_redis_stay_apart(redis_url: str) -> None:
    other = make_team("alice", "builder", "scout", team="globex")
    with (
        running_broker(team=TEAM, redis=redis_url) as acme,
        running_broker(team=other, redis=redis_url) as globex,
    ):
        Stream(acme.url, "alice")
        assert report(acme.url, "builder", "working").status_code == 204
        eventually(lambda: roster(acme.url)["alice"]["connected"] == 1)
        time.sleep(0.3)
        assert all(p["connected"] == 0 and "activity" not in p for p in roster(globex.url).values())


def test_a_second_deployment_with_the_same_team_name_and_prefix_is_refused(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: a second deployment (its own team file, the same team name and prefix)
    silently merged into the first: each showed the other's reports. Now Redis holds a
    mark of each member's name and token; a broker whose team file has not one in common
    with it shares nothing (an outage that says why), and the first goes on."""
    other = tmp_path / "other.toml"
    names = ("alice", "builder", "scout")
    other.write_text(render_team("acme", [(n, None, f"cp_other-{n}-token") for n in names]))
    with (
        running_broker(team=TEAM, redis=redis_url) as first,
        broker_process("--team", str(other), redis=redis_url) as second,
    ):
        said = second.said()
        assert "another deployment's team of the same name" in said, said
        assert "--redis-prefix" in said
        assert httpx.get(second.url + "/healthz", timeout=5).status_code == 503
        refused = httpx.post(
            second.url + "/presence/activity",
            json={"state": "blocked"},
            headers={"authorization": "Bearer cp_other-builder-token"},
            timeout=5,
        )
        assert refused.status_code == 503
        assert report(first.url, "builder", "working").status_code == 204
        assert roster(first.url)["builder"]["activity"] == "working"


def test_a_team_file_changed_broker_by_broker_is_said_and_served(
    redis_url: str, tmp_path: Path
) -> None:
    """A rolling change of the team file (a member added) must keep serving: the brokers
    share the members they have in common, and the newer file's broker says so once."""
    grown = tmp_path / "grown.toml"
    names = ("alice", "builder", "scout", "dana")
    grown.write_text(render_team("acme", [(n, None, token_of(n)) for n in names]))
    with (
        running_broker(team=TEAM, redis=redis_url) as old,
        broker_process("--team", str(grown), redis=redis_url) as new,
    ):
        assert "this team file differs from the one the team's brokers registered" in new.said()
        assert "(1 members or tokens only here, 0 only there)" in new.said()
        assert report(new.url, "builder", "working").status_code == 204
        eventually(lambda: roster(old.url)["builder"].get("activity") == "working", 60)


def test_a_member_added_on_one_broker_first_is_read_from_redis_by_the_other(
    redis_url: str, tmp_path: Path
) -> None:
    """Before: a broker sharing Redis refused a team file that added or removed members
    (a restart was needed). Now each broker follows its own file: the one that sees carol
    first serves her (her reports go to Redis) while the other, whose file lacks her yet,
    neither shows her nor takes her token; once its file has her, it reads her state from
    Redis (what it ignored meanwhile), not from her next report. A member removed on one
    broker alone stays on the other until its file says so."""

    def write(path: Path, *names: str) -> None:
        path.write_text(render_team("acme", [(n, None, token_of(n)) for n in names]))

    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    write(first, "alice", "builder", "scout")
    write(second, "alice", "builder", "scout")
    with (
        broker_process("--team", str(first), redis=redis_url) as a,
        broker_process("--team", str(second), redis=redis_url) as b,
    ):
        assert report(b.url, "builder", "working").status_code == 204
        write(first, "alice", "builder", "scout", "carol")
        a.stderr.until("team file .* read again: 4 member", 60)
        assert report(a.url, "carol", "blocked").status_code == 204
        on_a = Stream(a.url, "carol")
        eventually(lambda: roster(a.url)["carol"]["connected"] == 1, 60, "carol's stream on a")
        assert "carol" not in roster(b.url)
        assert report(b.url, "carol", "working").status_code == 401  # b's file lacks her

        write(second, "alice", "builder", "scout", "carol")
        b.stderr.until("team file .* read again: 4 member", 60)
        eventually(
            lambda: (
                "carol" in roster(b.url) and roster(b.url)["carol"].get("activity") == "blocked"
            ),
            60,
            "carol's state read from Redis",
            seen=lambda: roster(b.url),
        )
        assert roster(b.url)["carol"]["connected"] == 1  # a's stream, counted there
        assert not on_a.ended.is_set()

        assert report(b.url, "builder", "working").status_code == 204  # the TTL anew
        write(first, "alice", "scout", "carol")
        a.stderr.until("team file .* read again: 3 member", 60)
        assert "builder" not in roster(a.url)
        assert report(a.url, "builder", "working").status_code == 401
        assert roster(b.url)["builder"].get("activity") == "working"  # b's file keeps him
        assert report(b.url, "carol", "working").status_code == 204
        eventually(lambda: roster(a.url)["carol"].get("activity") == "working", 60)


# -- a broker dies, a broker restarts --------------------------------------------------------

BROKERS = "codex-presence:{acme}:brokers"
"""The sorted set of live brokers, by the Redis time (ms) of each one's last heartbeat."""


def redis_ms(store: redis.Redis) -> int:
    """Redis's clock, in unix ms (the one the brokers' heartbeats are dated by)."""
    seconds, micros = store.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.mark.slow
def test_a_sigkilled_brokers_connections_leave_within_the_bound(
    redis_url: str, tmp_path: Path
) -> None:
    """The documented bound: 10 s without a heartbeat, found at the next heartbeat (2 s).
    Decided by cause, on Redis's clock: the count leaves with a ``g`` event naming the dead
    broker, and not before its last heartbeat is the bound old (the wait itself is only a
    generous deadline: no stopwatch, which a loaded machine would stretch)."""
    team = team_file(tmp_path)
    store = redis.Redis.from_url(redis_url)
    events = store.pubsub(ignore_subscribe_messages=True)
    events.subscribe("codex-presence:{acme}:events")
    with (
        broker_process("--team", team, redis=redis_url) as doomed,
        broker_process("--team", team, redis=redis_url) as survivor,
    ):
        Stream(doomed.url, "builder")
        eventually(lambda: roster(survivor.url)["builder"]["connected"] == 1, 60)
        beats = {m.decode(): score for m, score in store.zrange(BROKERS, 0, -1, withscores=True)}
        assert len(beats) == 2, beats
        doomed.proc.kill()
        doomed.proc.wait(WAIT)
        eventually(lambda: roster(survivor.url)["builder"]["connected"] == 0, 60)
        now_ms = redis_ms(store)
        assert roster(survivor.url)["builder"]["lastSeen"] > 0  # what it saw stays
        (dead,) = set(beats) - {m.decode() for m in store.zrange(BROKERS, 0, -1)}
        gone: list[str] = []

        def told() -> bool:
            while (message := events.get_message()) is not None:
                event = orjson.loads(message["data"])
                if event["kind"] == "g":
                    gone.append(event["broker"])
            return bool(gone)

        eventually(told, 60, "the g event")
        assert gone == [dead]  # the survivor's prune took it, once
    events.close()
    assert now_ms - beats[dead] >= BOUND * 1000  # not before the bound


def test_a_broker_that_stops_cleanly_takes_its_counts_along(redis_url: str) -> None:
    store = redis.Redis.from_url(redis_url)
    with running_broker(team=TEAM, redis=redis_url) as stays:
        with running_broker(team=TEAM, redis=redis_url) as stops:
            Stream(stops.url, "builder")
            eventually(lambda: roster(stays.url)["builder"]["connected"] == 1, 60)
            beats = store.zrange(BROKERS, 0, -1, withscores=True)
            assert len(beats) == 2
        eventually(lambda: roster(stays.url)["builder"]["connected"] == 0, WAIT)
        # Not the bound: the count left before any broker could take it for dead.
        assert redis_ms(store) - min(score for _, score in beats) < BOUND * 1000
        assert store.zcard(BROKERS) == 1  # it left


def test_a_broker_restart_keeps_sessions_and_activity(redis_url: str, tmp_path: Path) -> None:
    team = team_file(tmp_path)
    with broker_process("--team", team, redis=redis_url) as first:
        url, port = first.url, first.port
        signed_in = httpx.post(
            url + "/session",
            content=f"token={token_of('alice')}",
            headers={"content-type": "application/x-www-form-urlencoded"},
            timeout=5,
        )
        assert signed_in.status_code == 200
        cookie = {
            "cookie": f"{COOKIE_NAME}={signed_in.cookies[COOKIE_NAME]}",
            KEY_HEADER: signed_in.json()["key"],
        }
        assert report(url, "builder", "blocked").status_code == 204
        before = httpx.get(url + "/roster", headers=cookie, timeout=5).json()
        first.proc.kill()
        first.proc.wait(WAIT)
    with broker_process("--team", team, redis=redis_url, port=port) as second:
        who = httpx.get(second.url + "/whoami", headers=cookie, timeout=5)
        assert who.status_code == 200 and who.json()["name"] == "alice"  # still signed in
        after = httpx.get(second.url + "/roster", headers=cookie, timeout=5).json()
        assert after == before  # builder still blocked, with the same createdAt and lastSeen
        assert after[1]["activity"] == "blocked"
        logout = httpx.post(second.url + "/session/logout", headers=cookie, timeout=5)
        assert logout.status_code == 204
        assert httpx.get(second.url + "/whoami", headers=cookie, timeout=5).status_code == 401


def test_signing_out_on_one_broker_ends_the_stream_on_another(redis_url: str) -> None:
    shared = [shared_state(redis_url, TEAM) for _ in range(2)]
    webs = [WebRoster(team=TEAM, sign_ins=s.sign_ins) for s in shared]
    with (
        running_broker(team=TEAM, web=webs[0], store=shared[0].store) as a,
        running_broker(team=TEAM, web=webs[1], store=shared[1].store) as b,
    ):
        signed_in = httpx.post(
            a.url + "/session",
            content=f"token={token_of('alice')}",
            headers={"content-type": "application/x-www-form-urlencoded"},
            timeout=5,
        )
        cookie = {
            "cookie": f"{COOKIE_NAME}={signed_in.cookies[COOKIE_NAME]}",
            KEY_HEADER: signed_in.json()["key"],
        }
        on_b = Stream(b.url, "alice", headers=cookie)
        assert on_b.status == 200
        eventually(lambda: roster(a.url)["alice"]["connected"] == 1, 60)
        assert httpx.post(a.url + "/session/logout", headers=cookie, timeout=5).status_code == 204
        assert on_b.ended.wait(WAIT), "the stream on the other broker did not end"
        eventually(lambda: roster(a.url)["alice"]["connected"] == 0)


# -- Redis goes away -------------------------------------------------------------------------


def test_redis_restarted_mid_session(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="codex_presence")
    with redis_server() as server, brokers(server.url) as (a, b):
        on_b = Stream(b.url, "alice")
        assert report(a.url, "builder", "working").status_code == 204
        eventually(lambda: roster(b.url)["builder"].get("activity") == "working", 60)
        seen_before = roster(b.url)["builder"]["lastSeen"]

        server.stop(kill=True)
        eventually(lambda: "stale" in on_b.kinds(), 60, "the stream saying it is stale")
        answer = report(a.url, "builder", "blocked")
        assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")
        assert "Redis" in answer.json()["error"] and "not recorded" in answer.json()["error"]
        health = httpx.get(a.url + "/healthz", timeout=5)
        assert (health.status_code, health.json()["status"]) == (503, "unavailable")
        # what the brokers show is kept meanwhile, and the streams stay open
        assert roster(b.url)["builder"]["activity"] == "working"
        time.sleep(1.5)  # several reconnection attempts
        assert not on_b.ended.is_set()
        stale = on_b.events[on_b.kinds().index("stale")][1]
        assert stale["stale"] is True and stale["reason"]

        server.start()  # same port, empty: persistence is off
        for broker in (a, b):
            eventually(lambda u=broker.url: httpx.get(u + "/healthz").status_code == 200, 60)  # type: ignore[misc]
        eventually(lambda: "roster" in on_b.kinds()[on_b.kinds().index("stale") :], 60)
        # converged: alice's stream on B counted again everywhere; lastSeen merged back
        eventually(lambda: roster(a.url)["alice"]["connected"] == 1, 60)
        assert roster(a.url)["builder"]["lastSeen"] == seen_before
        # the empty Redis lost builder's activity: the next report (a heartbeat) restores it
        assert report(a.url, "builder", "blocked").status_code == 204
        eventually(lambda: roster(b.url)["builder"].get("activity") == "blocked", 60)
        assert not on_b.ended.is_set()
        assert on_b.of("builder")[-1]["activity"] == "blocked"

    said = [r.getMessage() for r in caplog.records if r.name == "codex_presence.broker"]
    assert sum(m.startswith("redis down") for m in said) == 2  # once per broker
    assert sum(m.startswith("redis back") for m in said) == 2


def test_a_broker_started_while_redis_is_away_catches_up(tmp_path: Path) -> None:
    with redis_server() as server:
        server.stop()
        with broker_process("--team", team_file(tmp_path), redis=server.url) as broker:
            assert "redis down" in broker.said()  # said before it listened
            assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 503
            assert report(broker.url, "builder", "working").status_code == 503
            server.start()
            broker.stderr.until("redis back")
            assert report(broker.url, "builder", "working").status_code == 204
            assert roster(broker.url)["builder"]["activity"] == "working"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--redis", "http://127.0.0.1:1"], "redis://"),
        (["--redis", "redis://127.0.0.1:1", "--redis-prefix", "a{b}"], "--redis-prefix"),
        (  # before: redis-py dropped it, and the broker used database 0 without a word
            ["--redis", "redis://127.0.0.1:1/abc"],
            "--redis: the database (the URL's path) must be a number, not 'abc'",
        ),
        (  # before: it started, and stayed in outage ("unexpected keyword argument")
            ["--redis", "redis://127.0.0.1:1/0?Password=s3cret-pass"],
            "--redis: the URL has an option Redis connections do not take: Password "
            "(did you mean password?)",
        ),
        # before: each of these started a broker that stayed in outage for good
        (
            ["--redis", "redis://127.0.0.1:1/0?socket_timeout=0"],
            "--redis: socket_timeout=0: must be seconds > 0",
        ),
        (
            ["--redis", "redis://127.0.0.1:1/0?decode_responses=true"],
            "--redis: decode_responses=true: the broker reads Redis's replies as bytes",
        ),
        (
            ["--redis", "redis://127.0.0.1:1/0?client_name=my%20broker"],
            "--redis: client_name=my broker: Redis takes a name of printable characters",
        ),
        (["--redis", "redis://127.0.0.1:1/0?db=99"], "--redis: db=99: Redis has databases 0 to 15"),
        (
            ["--redis", "redis://127.0.0.1:1/99"],
            "--redis: database 99: Redis has databases 0 to 15",
        ),
        (
            ["--redis", "redis://127.0.0.1:1/0?health_check_interval=-5"],
            "--redis: health_check_interval=-5: must be a whole number of seconds >= 0",
        ),
        (  # before: a traceback
            ["--redis", "rediss://127.0.0.1:1/0?ssl_cert_reqs=bogus"],
            "--redis: ssl_cert_reqs=bogus: must be one of none, optional, required",
        ),
        (
            ["--redis", "redis+sentinel://127.0.0.1:1/mymaster/16?socket_timeout=5"],
            "--redis: database 16: Redis has databases 0 to 15",
        ),
    ],
)
def test_a_bad_redis_option_is_a_usage_error(tmp_path: Path, args: list[str], said: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "codex_presence", "broker", "--team", team_file(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2, result.stderr
    assert said in result.stderr
    assert "s3cret-pass" not in result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "broker: " in line]
    assert said in line  # one line says it


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret-pass@127.0.0.1:1/0", "redis://:***@127.0.0.1:1/0"),
        ("redis://127.0.0.1:1/0?password=s3cret-pass", "redis://127.0.0.1:1/0?password=***"),
        (
            "rediss://u@127.0.0.1:1/0?db=0&ssl_password=s3cret-pass",
            "rediss://u@127.0.0.1:1/0?db=0&ssl_password=***",
        ),
    ],
)
def test_a_redis_password_is_never_logged(tmp_path: Path, url: str, shown: str) -> None:
    # nothing listens there: "redis down"
    with broker_process("--team", team_file(tmp_path), redis=url) as broker:
        assert f"redis down: {shown}:" in broker.said()
        assert "s3cret-pass" not in broker.said()
    with broker_process("--team", team_file(tmp_path), "--redis", url) as broker:
        assert "anyone on this machine can read" in broker.said()  # in argv: a warning
        assert "s3cret-pass" not in broker.said()


def test_a_redis_password_in_the_query_opens_redis_and_stays_out_of_the_log(
    tmp_path: Path,
) -> None:
    """The password of ``?password=``, which redis-py takes as well as the netloc's, at
    ``-vv`` into a log file, with Redis asking for it: it works, and shows nowhere. (A
    server of its own: the password stays set.)"""
    with redis_server() as server:
        redis_url = server.url
        redis.Redis.from_url(redis_url).config_set("requirepass", "hunter2secret")
        url = redis_url + "?password=hunter2secret"
        log = tmp_path / "broker.log"
        options = ("--team", team_file(tmp_path), "-vv", "--log-file", str(log))
        with broker_process(*options, redis=url) as broker:
            assert report(broker.url, "builder", "working").status_code == 204  # authenticated
            assert httpx.get(broker.url + "/healthz", timeout=5).json()["status"] == "ok"
        text = log.read_text()
        assert f"sharing state through {redis_url}?password=*** " in text
        assert "hunter2secret" not in text + broker.stderr.rest()


def test_roster_watch_marks_the_roster_stale_while_the_broker_lost_redis() -> None:
    """Before: ``roster --watch`` ignored the stream's ``stale`` event, so with Redis gone
    the terminal went on showing the roster as live (durations advancing, no word), where
    the page marks it stale."""
    from tests.support.waiting import Lines

    env = {
        **os.environ,
        "CODEX_PRESENCE_TOKEN": token_of("alice"),
    }
    with redis_server() as server, brokers(server.url, count=1) as (a,):
        assert report(a.url, "builder", "working").status_code == 204
        with subprocess.Popen(
            [sys.executable, "-m", "codex_presence", "roster", "--watch", "--broker", a.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as proc:
            try:
                out = Lines(proc.stdout)
                out.until(r"^- builder \[engineer\] offline  . working · \d+ s$")
                server.stop(kill=True)
                out.until(r"^\(stale as of \d\d:\d\d:\d\d: the broker lost its shared store: .+\)$")
                server.start()
                deadline = time.monotonic() + WAIT
                while time.monotonic() < deadline:  # a frame that ends with no stale line
                    out.until(r"^- scout \[scout\] \[operator\] offline$")
                    if out.queue.get(timeout=WAIT) == "\n":
                        break
                else:
                    raise AssertionError(f"still stale: {''.join(out.seen)!r}")
            finally:
                proc.kill()
                proc.wait(WAIT)


def test_a_one_shot_roster_says_when_the_broker_lost_redis() -> None:
    """Before: with Redis gone, ``roster`` printed the broker's last-known roster as if it
    were current, and exited 0 without a word. The roster stays on stdout; stderr says it
    may be out of date."""
    env = {**os.environ, "CODEX_PRESENCE_TOKEN": token_of("alice")}

    def run_roster(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "codex_presence", "roster", "--broker", url],
            capture_output=True,
            text=True,
            env=env,
            timeout=WAIT,
            check=False,
        )

    with redis_server() as server, brokers(server.url, count=1) as (a,):
        current = run_roster(a.url)
        assert (current.returncode, current.stderr) == (0, "")
        server.stop(kill=True)
        eventually(lambda: httpx.get(a.url + "/healthz").status_code == 503, WAIT)
        stale = run_roster(a.url)
        assert stale.returncode == 0
        assert stale.stdout == current.stdout
        assert stale.stderr.startswith(
            "codex-presence roster: the broker lost its shared store (Redis: "
        ), stale.stderr
        assert stale.stderr.endswith("): this roster may be out of date\n")
