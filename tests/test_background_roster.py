"""A member's background count on the roster, apart from the state (issue 23, part 3, the
broker's half), over real HTTP on loopback: each session's count held with its state under
the same TTL and the same grace; the member's total in ``background`` with the earliest
``backgroundSince``, absent when none; it never makes a member working or blocked; a bad
count is a precise 400.

Every test takes ``store_url``: it runs in memory and on a real redis-server. The clock of
the TTLs and the grace is the test's (:class:`FakeClock`)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from codex_presence._wire import MAX_BACKGROUND, SESSION_GRACE
from tests.support import session_api
from tests.support.broker_harness import FakeClock, RunningBroker, running_broker
from tests.support.session_api import TEAM, A, B, auth, builder, lapse_within, subscription
from tests.support.shared_brokers import Stream
from tests.support.waiting import WAIT, eventually

clock, broker, client = session_api.clock, session_api.broker, session_api.client  # fixtures


def post(client: httpx.Client, state: str, session: str, background: object) -> httpx.Response:
    body = {"state": state, "session": session, "background": background}
    return client.post("/presence/activity", json=body, headers=auth("builder"))


def shown(client: httpx.Client) -> tuple[str, int | None]:
    p = builder(client)
    assert ("background" in p) == ("backgroundSince" in p)
    return p.get("activity", "idle"), p.get("background")


def test_background_is_shown_apart_from_the_state(client: httpx.Client, clock: FakeClock) -> None:
    assert post(client, "working", A, 1).status_code == 204
    assert shown(client) == ("working", 1)
    since = builder(client)["backgroundSince"]
    clock.advance(5)
    assert post(client, "idle", A, 1).status_code == 204  # the turn ended; the command runs
    me = builder(client)
    assert (me.get("activity"), me.get("busy"), me["background"]) == (None, None, 1)
    assert me["backgroundSince"] == since  # a change of state keeps it
    clock.advance(5)
    assert post(client, "idle", B, 2).status_code == 204  # another session's
    assert shown(client) == ("idle", 3)
    assert builder(client)["backgroundSince"] == since  # the earliest
    assert post(client, "idle", A, 0).status_code == 204  # A's command ended
    assert shown(client) == ("idle", 2)
    assert builder(client)["backgroundSince"] > since  # B's
    assert post(client, "idle", B, 0).status_code == 204
    me = builder(client)
    assert "background" not in me and "backgroundSince" not in me and "activity" not in me


def test_background_lapses_with_the_ttl(client: httpx.Client, clock: FakeClock) -> None:
    """A runner that stops heartbeating takes its count with it, as it does its state."""
    assert post(client, "idle", A, 1).status_code == 204
    clock.advance(20)
    assert post(client, "idle", A, 1).status_code == 204  # a heartbeat keeps it
    clock.advance(20)
    assert shown(client) == ("idle", 1)
    clock.advance(10)
    assert shown(client) == ("idle", None)


def test_background_lapses_a_grace_after_the_subscription_ends(
    client: httpx.Client, broker: RunningBroker, clock: FakeClock
) -> None:
    """The runner was killed: its subscription drops and its count goes after the grace,
    not the TTL, and a watcher is told without asking. The watcher has been told of the
    drop before the grace runs out, so the lapse is news of its own: the fan-out must see
    a lapse of the background alone (the member idle all along), not only of a state (it
    did not, and the watcher was told only when something else about the member changed
    after the lapse)."""
    watcher = Stream(broker.url, "alice")
    with subscription(broker.url, A):
        eventually(lambda: builder(client)["connected"] == 1)
        assert post(client, "idle", A, 2).status_code == 204
        eventually(
            lambda: any(p.get("background") == 2 for p in watcher.of("builder")),
            what="the watcher told of the count",
        )
    eventually(lambda: builder(client)["connected"] == 0)
    lapse_within(broker, SESSION_GRACE)
    eventually(
        lambda: (
            (last := watcher.of("builder")[-1])["connected"] == 0 and last.get("background") == 2
        ),
        what="the watcher told of the drop",
    )
    assert shown(client) == ("idle", 2)  # within the grace
    clock.advance(SESSION_GRACE)
    assert shown(client) == ("idle", None)
    eventually(
        lambda: "background" not in watcher.of("builder")[-1],
        what="the watcher told of the lapse",
    )


@pytest.mark.parametrize(
    ("background", "reason"),
    [
        (-1, f'"background" must be 0 to {MAX_BACKGROUND}, not -1'),
        (MAX_BACKGROUND + 1, f"not {MAX_BACKGROUND + 1}"),
        (1.5, '"background" must be an integer'),
        ("2", '"background" must be an integer'),
        (True, '"background" must be an integer'),
        (None, '"background" must be an integer'),
    ],
)
def test_a_bad_background_count_is_a_precise_400(
    client: httpx.Client, background: object, reason: str
) -> None:
    response = post(client, "working", A, background)
    assert response.status_code == 400
    assert reason in response.json()["error"]
    assert shown(client) == ("idle", None)


def test_background_needs_a_session(client: httpx.Client) -> None:
    body: dict[str, Any] = {"state": "idle", "background": 1}
    response = client.post("/presence/activity", json=body, headers=auth("builder"))
    assert (response.status_code, response.json()["error"]) == (
        400,
        '"background" needs a "session": it is counted per session',
    )
    assert post(client, "idle", A, MAX_BACKGROUND).status_code == 204  # the bound itself
    assert shown(client) == ("idle", MAX_BACKGROUND)


def test_a_count_found_in_redis_is_read_or_skipped_never_fatal(redis_url: str) -> None:
    """A broker that starts reads each session's count from Redis (its snapshot); a value
    written by hand or by another program with a count it cannot read counts as none, and
    a report replaces it."""
    import redis

    prefix = "codex-presence:{acme}:"
    direct = redis.Redis.from_url(redis_url)

    def record(state: str, background: object, background_since: object) -> str:
        return json.dumps(
            {
                "state": state,
                "since": 5,
                "background": background,
                "backgroundSince": background_since,
                "agent": None,
            }
        )

    values = {
        "sessGood": record("idle", 2, 1000),
        "sessWork": record("working", 1, 2000),
        "sessJunk": record("idle", "x", "y"),
        "sessHuge": record("idle", MAX_BACKGROUND + 1, 3),
        "sessOdd": "idle 5 1",  # an older version's words
    }
    for session, value in values.items():
        direct.set(prefix + f"s:{session}:builder", value, px=60_000)
        direct.zadd(prefix + "S:builder", {session: 1e15})
    with (
        running_broker(team=TEAM, redis=redis_url) as broker,
        httpx.Client(base_url=broker.url, timeout=5) as client,
    ):
        me = builder(client)
        assert (me["activity"], me["background"], me["backgroundSince"]) == ("working", 3, 1000)
        assert post(client, "idle", "sessJunk", 4).status_code == 204
        assert shown(client) == ("working", 7)
        assert direct.get(prefix + "s:sessJunk:builder") is not None
        assert post(client, "idle", "sessJunk", 0).status_code == 204
        assert direct.get(prefix + "s:sessJunk:builder") is None


def test_another_broker_sees_the_count_and_its_lapse(redis_url: str) -> None:
    """Two brokers sharing Redis: a count reported to one is on the other's roster, and a
    release on the first (the runner's subscription dropped) takes it from both."""
    with (
        running_broker(team=TEAM, redis=redis_url) as first,
        running_broker(team=TEAM, redis=redis_url) as second,
        httpx.Client(base_url=first.url, timeout=5) as one,
        httpx.Client(base_url=second.url, timeout=5) as other,
    ):
        with subscription(first.url, A):
            assert post(one, "idle", A, 2).status_code == 204
            eventually(lambda: shown(other) == ("idle", 2), what="the other broker's mirror")
            since = builder(one)["backgroundSince"]
            assert builder(other)["backgroundSince"] == since
        eventually(lambda: shown(other) == ("idle", None), WAIT, "the count lapsed everywhere")
        assert shown(one) == ("idle", None)
