"""Numbers out of range in Redis, and what they cost (issue 35, items 1, 2, 3 and 9): every
number that crosses from Redis goes through one bounded reader, so a forged event or a key
holding what no broker writes is dropped alone, counted, and the team goes on; the change
counter starts again from a value it cannot increment; ``/healthz`` says 503 while Redis
refuses every report; and the session ids a member ever reported do not grow the mirror.

Each runs brokers of one team on a real redis-server (the review's reproductions)."""

from __future__ import annotations

import httpx
import orjson
import redis

from codex_presence.broker.redis.store import RedisStore
from codex_presence.broker.tracker import ENDED_KEPT
from tests.support.broker_harness import running_broker
from tests.support.shared_brokers import TEAM, auth, report, roster
from tests.support.waiting import eventually

KEYS = "codex-presence:{acme}:"


def forge(direct: redis.Redis, event: object) -> None:
    """Publish ``event`` on the team's channel, numbered next (the counter taken along)."""
    seq = int(direct.incr(KEYS + "seq"))
    if isinstance(event, list):
        event[0] = seq
    elif isinstance(event, dict):
        event["seq"] = seq
    text = orjson.dumps(event).replace(b"1e+20", b"100000000000000000000")
    direct.publish(KEYS + "events", text)


def test_a_forged_event_with_an_activity_since_of_1e30_costs_that_event_alone(
    redis_url: str,
) -> None:
    """Before (main): every broker of the team exited within 2 s (the review's event below:
    orjson could not encode the mirror's integer past 64 bits in the fan-out)."""
    direct = redis.Redis.from_url(redis_url)
    with (
        running_broker(team=TEAM, redis=redis_url) as a,
        running_broker(team=TEAM, redis=redis_url) as b,
    ):
        assert report(a.url, "builder", "working").status_code == 204
        eventually(lambda: roster(b.url)["builder"].get("activity") == "working")
        forge(direct, [0, "a", "builder", "blocked", 600000, 1e30, 0, 0])  # main's form
        record = {"state": "blocked", "since": 1e30, "background": 0, "agent": None}
        forge(
            direct,
            {"kind": "s", "name": "builder", "session": "", "ttl": 600000, "createdAt": 1,
             "lastSeen": 1, "record": record},
        )  # fmt: skip
        forge(direct, {"kind": "c", "name": "scout", "broker": "x", "count": 1e20,
                       "createdAt": 1, "lastSeen": 1})  # fmt: skip
        assert report(a.url, "alice", "blocked").status_code == 204
        for broker in (a, b):
            eventually(lambda u=broker.url: roster(u)["alice"].get("activity") == "blocked")  # type: ignore[misc]
            assert not broker.broker.failed
            assert roster(broker.url)["builder"]["activity"] == "working"
            store = broker.broker.store
            assert isinstance(store, RedisStore)
            eventually(lambda s=store: s.link.dropped_count >= 3, what="the three dropped")  # type: ignore[misc]


def test_a_twenty_digit_number_in_a_key_costs_that_key_alone(redis_url: str) -> None:
    """Before (main): ``GET /roster`` was 500 for the whole team on every broker started
    after the value was written."""
    direct = redis.Redis.from_url(redis_url)
    huge = "9" * 20
    direct.hset(KEYS + "m:builder", mapping={"c": huge, "s": huge})
    direct.zadd(KEYS + "brokers", {"ghost/1": 10**12})
    direct.hset(KEYS + "c:ghost/1", "scout", huge)
    record = b'{"state":"working","since":' + huge.encode() + b',"background":0,"agent":null}'
    direct.set(KEYS + "s:sessHuge:alice", record, px=600_000)
    direct.zadd(KEYS + "S:alice", {"sessHuge": 1e15})
    with running_broker(team=TEAM, redis=redis_url) as broker:
        shown = roster(broker.url)
        assert [shown[n].get("activity") for n in ("alice", "builder", "scout")] == [None] * 3
        assert shown["scout"]["connected"] == 0
        assert report(broker.url, "builder", "working").status_code == 204
        assert roster(broker.url)["builder"]["activity"] == "working"
        assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 200


def test_a_change_counter_it_cannot_increment_starts_again(redis_url: str) -> None:
    """Before (main): ``seq`` = 2**63 - 1 made every report of every member 503 (INCR
    overflows); a counter of 15 digits had cjson round the event numbers (repeated
    numbers, endless reconnections)."""
    direct = redis.Redis.from_url(redis_url)
    with running_broker(team=TEAM, redis=redis_url) as broker:
        for stuck in (str(2**63 - 1), "123456789012345"):
            direct.set(KEYS + "seq", stuck)
            for name in ("alice", "builder"):  # the numbering starting again: a resync
                for state in ("working", "idle"):
                    eventually(
                        lambda n=name, s=state: report(broker.url, n, s).status_code == 204,  # type: ignore[misc]
                        what=f"{name}'s report with seq at {stuck}",
                    )
            assert int(direct.get(KEYS + "seq") or 0) < 10**14
        assert report(broker.url, "scout", "blocked").status_code == 204
        assert roster(broker.url)["scout"]["activity"] == "blocked"


def test_healthz_is_503_while_redis_refuses_every_report(redis_url: str) -> None:
    """Before (main): ``/healthz`` said 200 while every report got 503."""
    direct = redis.Redis.from_url(redis_url)
    with running_broker(team=TEAM, redis=redis_url) as broker:
        direct.config_set("maxmemory", "1")
        try:
            assert report(broker.url, "alice", "working").status_code == 503
            health = httpx.get(broker.url + "/healthz", headers=auth("alice"), timeout=5)
            assert health.status_code == 503, health.text
            assert "refuses" in health.json()["reason"]
        finally:
            direct.config_set("maxmemory", "0")
        assert report(broker.url, "alice", "working").status_code == 204
        assert httpx.get(broker.url + "/healthz", timeout=5).status_code == 200


def test_the_session_ids_a_member_reported_do_not_grow_the_mirror(redis_url: str) -> None:
    """Before (main): every session id a member ever reported stayed in every broker's
    mirror until its next resync (+28 MB per 100,000 ids)."""
    with (
        running_broker(team=TEAM, redis=redis_url) as broker,
        httpx.Client(base_url=broker.url, timeout=10) as client,
    ):
        count = 2 * ENDED_KEPT + 600
        for n in range(count):
            body = {"state": "idle", "session": f"s{n}"}
            answer = client.post("/presence/activity", json=body, headers=auth("builder"))
            assert answer.status_code == 204
        store = broker.broker.store
        assert isinstance(store, RedisStore)
        assert store.sessions_remembered <= 2 * ENDED_KEPT, store.sessions_remembered
