"""Sessions under a member, at the broker over real HTTP on loopback (issue 23, part 1 and
the broker's half of part 2): each session's activity held apart, the member showing the
strongest; bad session ids refused precisely; the bound on busy sessions; a session's
activity lapsing a grace after the last subscription bound to it ends.

Every test takes ``store_url``: it runs in memory and on a real redis-server. The clock of
the TTLs and the grace is the test's (:class:`FakeClock`): the sockets are real, the waits
are not."""

from __future__ import annotations

import httpx
import pytest

from codex_presence._wire import MAX_SESSIONS, SESSION_GRACE
from tests.support import session_api
from tests.support.broker_harness import FakeClock, RunningBroker, running_broker
from tests.support.session_api import (
    TEAM,
    A,
    B,
    auth,
    builder,
    lapse_within,
    last_told,
    subscription,
)
from tests.support.shared_brokers import Stream
from tests.support.waiting import eventually

clock, broker, client = session_api.clock, session_api.broker, session_api.client  # fixtures


def post(client: httpx.Client, state: str, session: str | None = None) -> httpx.Response:
    body = {"state": state} if session is None else {"state": state, "session": session}
    return client.post("/presence/activity", json=body, headers=auth("builder"))


def shown(client: httpx.Client) -> tuple[str, dict[str, int] | None]:
    p = builder(client)
    return p.get("activity", "idle"), p.get("sessions")


# -- several sessions ----------------------------------------------------------------------


def test_the_member_shows_the_strongest_of_their_sessions(
    client: httpx.Client, clock: FakeClock
) -> None:
    """On main, working then idle from one token read idle although the first session was
    still working (issue 23: last write wins); now each session is its own."""
    assert post(client, "working", A).status_code == 204
    assert post(client, "idle", B).status_code == 204  # B ended its turn: A still works
    assert shown(client) == ("working", None)  # one busy session: no count
    start = builder(client)["activitySince"]

    clock.advance(5)
    assert post(client, "working", B).status_code == 204
    assert shown(client) == ("working", {"working": 2})
    assert builder(client)["activitySince"] == start  # the longest-working session's

    assert post(client, "blocked", B).status_code == 204  # blocked wins over working
    assert shown(client) == ("blocked", {"working": 1, "blocked": 1})
    blocked_since = builder(client)["activitySince"]
    assert blocked_since >= start
    assert post(client, "working", A).status_code == 204  # a heartbeat hides nothing
    assert shown(client) == ("blocked", {"working": 1, "blocked": 1})

    assert post(client, "idle", B).status_code == 204
    assert shown(client) == ("working", None)
    assert builder(client)["activitySince"] == start
    assert post(client, "idle", A).status_code == 204
    assert shown(client) == ("idle", None)
    assert "activitySince" not in builder(client)


def test_a_report_without_a_session_is_the_anonymous_session(client: httpx.Client) -> None:
    assert post(client, "blocked").status_code == 204
    assert post(client, "working", A).status_code == 204
    assert shown(client) == ("blocked", {"working": 1, "blocked": 1})
    assert post(client, "idle").status_code == 204  # the anonymous one only
    assert shown(client) == ("working", None)
    assert post(client, "idle", A).status_code == 204
    assert shown(client) == ("idle", None)


def test_each_session_lapses_on_its_own_ttl(client: httpx.Client, clock: FakeClock) -> None:
    assert post(client, "blocked", A).status_code == 204
    clock.advance(20)
    assert post(client, "working", B).status_code == 204
    assert shown(client) == ("blocked", {"working": 1, "blocked": 1})
    clock.advance(10)  # A's 30 s are over, B has 20 left
    assert shown(client) == ("working", None)
    clock.advance(20)
    assert shown(client) == ("idle", None)


# -- what is refused -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session", "reason"),
    [
        ("", "the session id is empty"),
        ("x" * 65, "65 characters long; at most 64"),
        ("has space", "may hold only A-Z, a-z, 0-9, '_' and '-'"),
        ("a:b", "may hold only"),
        ("caf\u00e9", "may hold only"),
        ("line\nbreak", "may hold only"),
        (7, '"session" must be a string'),
        (None, '"session" must be a string'),
    ],
)
def test_a_bad_session_id_is_a_precise_400(
    client: httpx.Client, broker: RunningBroker, session: object, reason: str
) -> None:
    body = {"state": "working", "session": session}
    response = client.post("/presence/activity", json=body, headers=auth("builder"))
    assert response.status_code == 400
    assert reason in response.json()["error"]
    if isinstance(session, str):
        params = {"name": "builder", "session": session}
        refused = client.get("/subscribe", params=params, headers=auth("builder"))
        assert refused.status_code == 400
        assert reason in refused.json()["error"]
    assert shown(client) == ("idle", None)
    assert builder(client)["connected"] == 0


def test_a_subscription_names_one_session_at_most(client: httpx.Client) -> None:
    url = "/subscribe?name=builder&session=aaaa&session=bbbb"
    response = client.get(url, headers=auth("builder"))
    assert (response.status_code, response.json()["error"]) == (
        400,
        "?session= is given more than once",
    )


def test_busy_sessions_per_member_are_bounded(client: httpx.Client) -> None:
    """A member cannot grow the broker's memory without limit: past MAX_SESSIONS busy
    sessions a new one is refused (429) until one ends; the busy ones, idle reports and the
    anonymous session are never refused, nor are other members."""
    sessions = [f"session{n:04d}" for n in range(MAX_SESSIONS)]
    for session in sessions:
        assert post(client, "working", session).status_code == 204
    refused = post(client, "working", "one-too-many")
    assert refused.status_code == 429
    assert f"at most {MAX_SESSIONS} sessions" in refused.json()["error"]
    assert post(client, "blocked", sessions[3]).status_code == 204  # a held one may change
    assert post(client, "idle", "one-too-many").status_code == 204  # idle holds nothing
    other = client.post(
        "/presence/activity", json={"state": "working", "session": A}, headers=auth("scout")
    )
    assert other.status_code == 204
    assert shown(client) == ("blocked", {"working": MAX_SESSIONS - 1, "blocked": 1})
    assert post(client, "idle", sessions[0]).status_code == 204
    assert post(client, "working", "one-too-many").status_code == 204  # room again


# -- a session bound to its subscription ---------------------------------------------------


def test_a_session_lapses_a_grace_after_its_subscription_ends(
    client: httpx.Client, broker: RunningBroker, clock: FakeClock
) -> None:
    """The runner was killed: its subscription drops, and its session reads idle after the
    grace, not the TTL; the other session stays, and a watcher is told without asking."""
    watcher = Stream(broker.url, "alice")
    assert post(client, "working", B).status_code == 204  # a session with no subscription
    with subscription(broker.url, A):
        eventually(lambda: builder(client)["connected"] == 1)
        assert post(client, "blocked", A).status_code == 204
        clock.advance(5)  # well inside the TTL
    eventually(lambda: builder(client)["connected"] == 0)
    lapse_within(broker, SESSION_GRACE)
    assert shown(client) == ("blocked", {"working": 1, "blocked": 1})  # within the grace
    eventually(lambda: last_told(watcher) == "blocked", what="the watcher told of blocked")
    clock.advance(SESSION_GRACE)
    assert shown(client) == ("working", None)  # A lapsed; B holds its TTL
    eventually(lambda: last_told(watcher) == "working", what="the watcher told of the lapse")
    clock.advance(30)
    assert shown(client) == ("idle", None)


def test_a_reconnect_within_the_grace_changes_nothing(
    client: httpx.Client, broker: RunningBroker, clock: FakeClock
) -> None:
    """A network blip: the runner reconnects within the grace and re-sends its state (as
    the link does on every reconnect), so its session holds its TTL again; a second
    subscription bound to the same session keeps the session while the first drops."""
    with subscription(broker.url, A):
        assert post(client, "working", A).status_code == 204
        start = builder(client)["activitySince"]
        with subscription(broker.url, A):
            eventually(lambda: builder(client)["connected"] == 2)
        eventually(lambda: builder(client)["connected"] == 1)
        clock.advance(SESSION_GRACE + 1)
        assert shown(client) == ("working", None)  # still bound: no grace started
    eventually(lambda: builder(client)["connected"] == 0)
    lapse_within(broker, SESSION_GRACE)
    clock.advance(1)
    with subscription(broker.url, A):  # back within the grace
        assert post(client, "working", A).status_code == 204  # the link re-sends
        clock.advance(SESSION_GRACE * 2)
        assert shown(client) == ("working", None)
        assert builder(client)["activitySince"] == start  # nobody saw a thing


def test_a_session_that_reported_idle_has_nothing_to_lapse(
    client: httpx.Client, broker: RunningBroker, clock: FakeClock
) -> None:
    with subscription(broker.url, A):
        assert post(client, "working", A).status_code == 204
        assert post(client, "idle", A).status_code == 204
    eventually(lambda: builder(client)["connected"] == 0)
    assert post(client, "working", B).status_code == 204  # B has no subscription: the TTL
    clock.advance(SESSION_GRACE + 1)
    assert shown(client) == ("working", None)
    clock.advance(30)
    assert shown(client) == ("idle", None)


def test_a_subscription_without_a_session_binds_nothing(
    client: httpx.Client, broker: RunningBroker, clock: FakeClock
) -> None:
    """Every existing client: its reports hold their TTL whatever its streams do."""
    with subscription(broker.url, None):
        assert post(client, "working").status_code == 204
    eventually(lambda: builder(client)["connected"] == 0)
    clock.advance(SESSION_GRACE + 1)
    assert shown(client) == ("working", None)
    clock.advance(30)
    assert shown(client) == ("idle", None)


def test_garbage_in_the_session_keys_stops_nothing(redis_url: str) -> None:
    """Keys of the sessions holding another type (written by hand, another program): a
    broker starts (its snapshot skips them), reports replace them, a release and a dead
    broker's bindings go past them."""
    import redis

    prefix = "codex-presence:{acme}:"
    direct = redis.Redis.from_url(redis_url)
    direct.set(prefix + "S:builder", "junk")
    direct.hset(prefix + f"s:{A}:builder", "x", "1")
    direct.rpush(prefix + "s:zzzz:scout", "junk")
    direct.zadd(prefix + "S:scout", {"zzzz": 1e15})
    with (
        running_broker(team=TEAM, redis=redis_url) as broker,
        httpx.Client(base_url=broker.url, timeout=5) as client,
    ):
        assert shown(client) == ("idle", None)
        with subscription(broker.url, A):
            assert post(client, "working", A).status_code == 204
            assert post(client, "blocked", B).status_code == 204
            assert shown(client) == ("blocked", {"working": 1, "blocked": 1})
        direct.set(prefix + f"s:{B}:builder", "blocked not-a-time")
        with (
            running_broker(team=TEAM, redis=redis_url) as other,
            httpx.Client(base_url=other.url, timeout=5) as second,
        ):
            eventually(lambda: shown(second) == ("working", None), what="B unreadable: idle")
        # A released after the grace (a real clock here); B as this broker last heard it
        eventually(lambda: shown(client) == ("blocked", None), what="A released")
