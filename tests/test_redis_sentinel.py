"""Brokers on Redis behind Sentinel (issue 26): the ``redis+sentinel://`` address, and a real
failover — a primary, a replica and three sentinels (``bench/_sentinel.py``), two real
``codex-presence broker`` commands (the CLI's URL handling is part of what is tested, and a
broker is a process of its own as in production), live wraps heartbeating through a fake
app-server. The primary is SIGKILLed; the roster is checked before, during and after.

How fast the brokers serve again is measured by ``bench/failover.py``; here the bound is
only that they do (well within the activity TTL, or presence would be lost).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from codex_presence.broker.redis.link import redacted
from codex_presence.broker.redis.sentinel import parse_sentinel_url
from tests.support.broker_harness import BrokerProcess, broker_process, token_of
from tests.support.redis_server import sentinel_setup
from tests.support.shared_brokers import Stream, report, roster, team_file
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess, is_request

TTL = "20"
"""Heartbeats every 6.7 s: some fall into the failover, and a runner's retries (backoff up to
10 s) still land before a report made just before the kill expires."""


# -- the address ---------------------------------------------------------------------------


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_options() -> None:
    address = parse_sentinel_url(
        "rediss+sentinel://:s3cret@10.0.0.1:5000,[::1],sentinel-c:26380/my%20primary/2"
        "?sentinel_password=other&ssl_cert_reqs=none"
    )
    assert address.sentinels == [("10.0.0.1", 5000), ("::1", 26379), ("sentinel-c", 26380)]
    assert address.service == "my primary"
    assert address.tls
    assert address.redis_options == {"password": "s3cret", "db": 2, "ssl_cert_reqs": "none"}
    assert address.sentinel_options == {"ssl": True, "ssl_cert_reqs": "none", "password": "other"}
    plain = parse_sentinel_url("redis+sentinel://127.0.0.1:26379/presence")
    assert not plain.tls and plain.redis_options == {"db": 0} and plain.sentinel_options == {}


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel:///presence", "no sentinel"),
        ("redis+sentinel://h:1", "no service"),
        ("redis+sentinel://h:port/presence", "not a port"),
        ("redis+sentinel://h:1/presence/zero", "not a number"),
        ("redis+sentinel://:1/presence", "without a host"),
    ],
)
def test_a_bad_sentinel_url_is_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_sentinel_url(url)


def test_the_logs_never_show_a_sentinel_urls_secrets() -> None:
    url = "redis+sentinel://user:pw1@a:1,b:2/presence?sentinel_password=pw2&db=1"
    shown = redacted(url)
    assert "pw1" not in shown and "pw2" not in shown
    assert shown == "redis+sentinel://user:***@a:1,b:2/presence?sentinel_password=***&db=1"


def test_the_broker_command_refuses_a_bad_sentinel_url(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "codex_presence", "broker", "--team", team_file(tmp_path)],
        env={"CODEX_PRESENCE_REDIS": "redis+sentinel://:pw@h:1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode != 0
    assert "no service name" in done.stderr and "pw" not in done.stderr.replace("pwd", "")


def test_a_password_reaches_redis_behind_sentinel_and_never_the_log(tmp_path: Path) -> None:
    password = "pw-of-the-primary-4711"
    with sentinel_setup(password=password) as setup:
        args = ("--team", team_file(tmp_path))
        with broker_process(*args, redis=setup.url) as broker:
            assert report(broker.url, "builder", "working").status_code == 204
            assert shown(broker.url)["builder"] == ("working", 0)
            assert httpx.get(broker.url + "/healthz").json()["store"] == "redis"
            said = broker.said()
        # A wrong password at the start stops the broker on one line, exit 2 (a
        # configuration error, not an outage to retry for ever), the URL's password masked.
        wrong = setup.url.replace(password, "not-the-password")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
        refused = subprocess.run(
            [sys.executable, "-m", "codex_presence", "broker", *args, "--port", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "CODEX_PRESENCE_REDIS": wrong},
        )
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.splitlines()) == 1, refused.stderr
        said += refused.stderr
    assert "refused the credentials (invalid username-password pair" in said
    assert ":***@127.0.0.1:" in said
    assert password not in said and "not-the-password" not in said


# -- a failover ----------------------------------------------------------------------------


def healthy(url: str) -> bool:
    return httpx.get(url + "/healthz", timeout=2).status_code == 200


def shown(url: str) -> dict[str, tuple[str, int]]:
    """Each member's activity and subscriptions, as ``url``'s roster shows them."""
    return {n: (p.get("activity", "idle"), p["connected"]) for n, p in roster(url).items()}


@contextmanager
def reporting(url: str, name: str) -> Iterator[WrapProcess]:
    options = ["--broker", url, "--name", name]
    with WrapProcess(options, env={"CODEX_PRESENCE_TOKEN": token_of(name)}) as wrap:
        yield wrap


def last_word(stream: Stream) -> str:
    """The stream's last ``roster`` or ``stale`` event: what it says the roster is."""
    kinds = [k for k in stream.kinds() if k in ("roster", "stale")]
    return kinds[-1]


def test_brokers_follow_a_failover_without_losing_anyones_presence(tmp_path: Path) -> None:
    with ExitStack() as stack:
        setup = stack.enter_context(sentinel_setup())
        team = team_file(tmp_path)
        args = ("--team", team, "--activity-ttl", TTL)
        a: BrokerProcess = stack.enter_context(broker_process(*args, redis=setup.url))
        b: BrokerProcess = stack.enter_context(broker_process(*args, redis=setup.url))
        working = stack.enter_context(reporting(a.url, "alice"))
        blocked = stack.enter_context(reporting(b.url, "builder"))
        working.start_turn(1, deltas=5000, delay_ms=20)  # working for 100 s
        blocked.start_turn(1, approval=True, deltas=1)  # blocked until answered: never
        blocked.wait_for(is_request("item/commandExecution/requestApproval"))
        streams = [Stream(a.url, "scout"), Stream(b.url, "scout"), Stream(b.url, "alice")]
        # each wrap is subscribed as its member too: alice on A and B, builder on B
        want = {"alice": ("working", 2), "builder": ("blocked", 1), "scout": ("idle", 2)}
        eventually(lambda: shown(a.url) == want and shown(b.url) == want, 60, "the roster")

        killed_at_ms = time.time() * 1000
        setup.kill_primary()
        replica = setup.replica
        assert replica is not None
        # during: the roster is served from each broker's mirror, unchanged, while no
        # primary answers; the brokers say they are down (503) and the streams are stale
        down: set[str] = set()
        deadline = time.monotonic() + WAIT
        while not down or not all(healthy(broker.url) for broker in (a, b)):
            assert time.monotonic() < deadline, f"the brokers did not come back; down: {down}"
            for broker in (a, b):
                assert shown(broker.url) == want
                if not healthy(broker.url):
                    down.add(broker.url)
            time.sleep(0.05)
        assert down == {a.url, b.url}, "a broker never noticed that the primary died"
        assert setup.primary_port() == replica.port

        # after: everything as before, every stream current again, the heartbeats land
        # on the new primary, and a report to A reaches B through it
        assert shown(a.url) == want and shown(b.url) == want
        for stream in streams:
            assert "stale" in stream.kinds()
            eventually(lambda s=stream: last_word(s) == "roster", 60, "a current roster")

        def heartbeats_landed(url: str) -> bool:
            people: dict[str, Any] = roster(url)
            return all(people[n]["lastSeen"] > killed_at_ms for n in ("alice", "builder"))

        eventually(lambda: heartbeats_landed(a.url) and heartbeats_landed(b.url), 60)
        assert report(a.url, "scout", "working").status_code == 204
        eventually(lambda: shown(b.url)["scout"] == ("working", 2), 60, "A's report on B")
        assert shown(a.url)["alice"] == ("working", 2)
        assert shown(b.url)["builder"] == ("blocked", 1)
        for broker in (a, b):
            broker.stderr.until("redis back", 60)
            assert "redis down" in broker.said()
