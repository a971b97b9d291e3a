"""Redis over TLS, for real (issue 26: "TLS and a password as for plain Redis"): a
redis-server, and a Sentinel setup, that listen for TLS only, with certificates made for the
test (``bench/_tls.py``), and brokers given ``rediss://`` and ``rediss+sentinel://``
addresses that trust them through ``ssl_ca_certs``. The options' parsing is tested in
``test_redis.py`` and ``test_redis_sentinel.py``; here, that they reach the connections:
the store's commands, its pub/sub, the sentinels' queries and a failover all over TLS.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from tests.support.broker_harness import broker_process
from tests.support.redis_server import redis_server, sentinel_setup
from tests.support.shared_brokers import Stream, brokers, report, roster, team_file
from tests.support.waiting import WAIT, eventually


def activities(url: str) -> dict[str, str]:
    return {name: row.get("activity", "idle") for name, row in roster(url).items()}


def healthy(url: str) -> bool:
    return httpx.get(url + "/healthz", timeout=2).status_code == 200


def test_brokers_share_one_roster_over_tls() -> None:
    with redis_server(tls=True) as redis, brokers(redis.url) as (a, b):
        assert redis.url.startswith("rediss://")
        on_b = Stream(b.url, "scout")
        assert report(a.url, "builder", "working").status_code == 204
        eventually(lambda: activities(b.url)["builder"] == "working", 60, "A's report on B")
        eventually(lambda: [p.get("activity") for p in on_b.of("builder")] == ["working"], 60)
        assert httpx.get(a.url + "/healthz").json()["store"] == "redis"


def test_a_broker_that_does_not_trust_redis_certificate_says_so(tmp_path: Path) -> None:
    """No ``ssl_ca_certs``: the system's authorities do not know the test's, so the
    handshake fails. The broker runs, answers 503 and says why, never a traceback."""
    with redis_server(tls=True) as redis:
        untrusting = redis.url.split("?")[0]
        with broker_process("--team", team_file(tmp_path), redis=untrusting) as broker:
            assert not healthy(broker.url)
            assert report(broker.url, "builder", "working").status_code == 503
            said = broker.said()  # said before it listened: it starts without Redis
        assert "redis down" in said and "certificate verify failed" in said, said
        assert "Traceback" not in said


def test_brokers_follow_a_failover_over_tls_with_a_password(tmp_path: Path) -> None:
    password = "tls-and-a-password-0815"
    with ExitStack() as stack:
        setup = stack.enter_context(sentinel_setup(password, tls=True))
        assert setup.url.startswith("rediss+sentinel://")
        args = ("--team", team_file(tmp_path), "--activity-ttl", "60")
        a = stack.enter_context(broker_process(*args, redis=setup.url))
        b = stack.enter_context(broker_process(*args, redis=setup.url))
        assert report(a.url, "builder", "working").status_code == 204
        eventually(lambda: activities(b.url)["builder"] == "working", 60, "A's report on B")

        replica = setup.replica
        assert replica is not None
        setup.kill_primary()
        eventually(lambda: not healthy(a.url) and not healthy(b.url), WAIT, "503 while down")
        deadline = time.monotonic() + WAIT
        while not (healthy(a.url) and healthy(b.url)):
            assert time.monotonic() < deadline, "the brokers did not come back"
            time.sleep(0.05)
        assert setup.primary_port() == replica.port  # the replica was promoted, over TLS
        assert activities(a.url)["builder"] == "working"  # nothing lost
        assert report(b.url, "alice", "blocked").status_code == 204
        eventually(lambda: activities(a.url)["alice"] == "blocked", 60, "B's report on A")
        for broker in (a, b):
            broker.stderr.until("redis back", 60)
            said = broker.said()
            assert "redis down" in said and password not in said
