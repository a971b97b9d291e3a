"""The broker, rule by rule (issue 4): what it answers through its app in this process
(``client``, no socket), streams and connections over real HTTP on loopback (uvicorn in a
thread: ``broker``, ``live_client``).

The tests that take ``store_url`` run twice: with the state in memory, and in a real
redis-server (issue 18): the rules, and what bad input gets, are the same in both."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import orjson
import pytest
from httpx_sse import EventSource, ServerSentEvent
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from codex_presence._wire import Whoami, parse_whoami
from codex_presence.broker.limits import BrokerLimits
from codex_presence.broker.record import Report
from codex_presence.broker.team import Member
from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    in_process_broker,
    make_team,
    running_broker,
    token_of,
)
from tests.support.waiting import WAIT, eventually

TEAM = make_team("alice", "builder", "scout")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def wall() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def broker(clock: FakeClock, wall: FakeClock, store_url: str | None) -> Iterator[RunningBroker]:
    with running_broker(
        team=TEAM, clock=clock, wall_clock=wall, keepalive=30, redis=store_url
    ) as b:
        yield b


@pytest.fixture
def client(clock: FakeClock, wall: FakeClock, store_url: str | None) -> Iterator[httpx.Client]:
    """A client of :func:`broker`'s app in this process, without a socket: for the rules of
    what the broker answers (a test about streams or connections takes ``live_client``)."""
    with in_process_broker(
        team=TEAM, clock=clock, wall_clock=wall, keepalive=30, redis=store_url
    ) as b:
        yield b.client


@pytest.fixture
def live_client(broker: RunningBroker) -> Iterator[httpx.Client]:
    """A client of :func:`broker`, the real server on loopback."""
    with httpx.Client(base_url=broker.url, timeout=5) as c:
        yield c


def post(client: httpx.Client, name: str, body: Any, **kw: Any) -> httpx.Response:
    return client.post("/presence/activity", json=body, headers=_auth(name), **kw)


def _auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token_of(name)}"}


def roster(client: httpx.Client, as_: str = "alice") -> dict[str, dict[str, Any]]:
    response = client.get("/roster", headers=_auth(as_))
    assert response.status_code == 200
    return {p["name"]: p for p in response.json()}


# -- basics --------------------------------------------------------------------------------


def test_healthz_needs_no_token(client: httpx.Client, store_url: str | None) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    shared = {} if store_url is None else {"store": "redis"}
    assert response.json() == {"status": "ok", **shared, "startedAt": 1_800_000_000_000}


def test_whoami(client: httpx.Client) -> None:
    """Who the token is, and the broker's TTL: runners heartbeat at a third of it."""
    response = client.get("/whoami", headers=_auth("scout"))
    assert response.json() == {
        "team": "acme",
        "name": "scout",
        "role": {"title": "scout", "permissions": ["objectives.create"]},
        "activityTtlMs": 30_000,
    }
    assert parse_whoami(response.content) == Whoami("acme", "scout", activity_ttl=30.0)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer cp_not-a-member"},
        {"authorization": f"Basic {token_of('alice')}"},
        {"authorization": "Bearer"},
        {"authorization": f"Bearer{token_of('alice')}"},
        {"authorization": f"Bearer {token_of('alice')}x"},
    ],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/roster"),
        ("GET", "/whoami"),
        ("GET", "/subscribe?name=alice"),
        ("POST", "/presence/activity"),
    ],
)
def test_401_without_or_with_a_wrong_token(
    client: httpx.Client, headers: dict[str, str], method: str, path: str
) -> None:
    response = client.request(method, path, headers=headers, json={"state": "working"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "alice" not in response.text
    assert "activity" not in roster(client)["alice"]


def test_a_roster_read_again_unchanged_is_a_304_and_gzip_is_given_to_who_asks(
    client: httpx.Client,
) -> None:
    """Issue 37: a client that has the roster sends its ETag back and gets 304, no body,
    until something changes; a client that accepts gzip gets the same JSON gzip'd."""
    first = client.get("/roster", headers={**_auth("alice"), "accept-encoding": "identity"})
    etag = first.headers["etag"]
    assert (
        first.status_code == 200
        and etag.startswith('W/"')  # weak: the plain and gzip'd bodies share it
        and "gzip" not in first.headers.get("content-encoding", "")
    )
    again = client.get("/roster", headers={**_auth("scout"), "if-none-match": etag})
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
    listed = client.get("/roster", headers={**_auth("scout"), "if-none-match": f'"x", {etag}'})
    assert listed.status_code == 304
    zipped = client.get("/roster", headers={**_auth("alice"), "accept-encoding": "gzip, br"})
    assert zipped.headers["content-encoding"] == "gzip"  # httpx undoes it: the same JSON
    assert zipped.json() == first.json() and zipped.headers["etag"] == etag
    assert client.post("/presence/activity", headers=_auth("builder"), json={"state": "working"})
    changed = client.get("/roster", headers={**_auth("alice"), "if-none-match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert {p["name"]: p.get("activity") for p in changed.json()}["builder"] == "working"


def test_roster_lists_every_member_in_the_exact_schema(client: httpx.Client) -> None:
    response = client.get("/roster", headers=_auth("builder"))
    assert response.headers["content-type"] == "application/json"
    assert response.json() == [
        {
            "name": "alice",
            "connected": 0,
            "createdAt": 0,
            "lastSeen": 0,
            "role": {"title": "director", "permissions": ["members.manage", "objectives.create"]},
        },
        {
            "name": "builder",
            "connected": 0,
            "createdAt": 0,
            "lastSeen": 0,
            "role": {"title": "engineer", "permissions": []},
        },
        {
            "name": "scout",
            "connected": 0,
            "createdAt": 0,
            "lastSeen": 0,
            "role": {"title": "scout", "permissions": ["objectives.create"]},
        },
    ]
    # key order is the schema's
    assert list(orjson.loads(response.content)[0]) == [
        "name",
        "connected",
        "createdAt",
        "lastSeen",
        "role",
    ]


def test_role_null_for_a_member_without_one(store_url: str | None) -> None:
    with (
        running_broker(team=make_team("alice", "zed"), redis=store_url) as b,
        httpx.Client(base_url=b.url) as c,
    ):
        assert roster(c)["zed"]["role"] is None


# -- activity ------------------------------------------------------------------------------


def test_activity_states_idle_omitted_busy_mirrors_working(client: httpx.Client) -> None:
    assert post(client, "builder", {"state": "working"}).status_code == 204
    p = roster(client)["builder"]
    assert (p["activity"], p["busy"]) == ("working", True)
    assert list(p)[-4:] == ["activity", "busy", "activitySince", "agents"]

    assert post(client, "builder", {"state": "blocked"}).status_code == 204
    p = roster(client)["builder"]
    assert (p["activity"], p["busy"]) == ("blocked", False)

    response = post(client, "builder", {"state": "idle"})
    assert (response.status_code, response.content) == (204, b"")
    p = roster(client)["builder"]
    assert "activity" not in p
    assert "busy" not in p
    # the others never had any
    assert all("activity" not in q and "busy" not in q for q in roster(client).values())


def test_report_is_an_emit_lastseen_ticks(client: httpx.Client, wall: FakeClock) -> None:
    post(client, "scout", {"state": "working"})
    first = roster(client)["scout"]
    assert first["createdAt"] == first["lastSeen"] == 1_800_000_000_000
    wall.advance(2.5)
    post(client, "scout", {"state": "working"})
    second = roster(client)["scout"]
    assert second["createdAt"] == 1_800_000_000_000
    assert second["lastSeen"] == 1_800_000_002_500


def test_activity_since_holds_over_heartbeats_and_moves_with_each_change(
    broker: RunningBroker, live_client: httpx.Client, clock: FakeClock, wall: FakeClock
) -> None:
    """``activitySince`` (ours, additive): when the working or blocked state began, in the
    roster and on the stream; a heartbeat keeps it, a change of state or a lapse moves it;
    absent when idle."""
    start = 1_800_000_000_000
    with subscribed(broker, "alice") as events:
        next_event(events, "roster")
        next_event(events, "presence")  # our own attach
        post(live_client, "builder", {"state": "working"})
        assert roster(live_client)["builder"]["activitySince"] == start
        assert next_event(events, "presence")["activitySince"] == start
        for _ in range(3):  # heartbeats, 10 s apart
            clock.advance(10)
            wall.advance(10)
            post(live_client, "builder", {"state": "working"})
        assert roster(live_client)["builder"]["activitySince"] == start
        post(live_client, "builder", {"state": "blocked"})
        p = next_event(events, "presence")
        assert (p["activity"], p["activitySince"]) == ("blocked", start + 30_000)
        assert roster(live_client)["builder"]["activitySince"] == start + 30_000
        post(live_client, "builder", {"state": "idle"})
        p = next_event(events, "presence")
        assert "activity" not in p and "activitySince" not in p
        wall.advance(5)
        post(live_client, "builder", {"state": "blocked"})  # blocked anew: a new since
        assert roster(live_client)["builder"]["activitySince"] == start + 35_000
    assert all("activitySince" not in p for n, p in roster(live_client).items() if n != "builder")


def test_a_lapse_ends_the_since_and_the_next_report_starts_anew(store_url: str | None) -> None:
    """The TTL (a real one here: Redis keeps its own time) ends the state and its since.
    2 s, so that the roster read right after the report sees it (0.3 s could lapse first
    on a loaded machine)."""
    with (
        running_broker(team=TEAM, activity_ttl=2.0, redis=store_url) as b,
        httpx.Client(base_url=b.url) as c,
    ):
        post(c, "builder", {"state": "blocked"})
        first = roster(c)["builder"]["activitySince"]
        eventually(lambda: "activitySince" not in roster(c)["builder"], WAIT, "the lapse")
        post(c, "builder", {"state": "blocked"})
        assert roster(c)["builder"]["activitySince"] > first


def test_ttl_lapse_with_an_injected_clock(client: httpx.Client, clock: FakeClock) -> None:
    post(client, "builder", {"state": "working"})
    clock.advance(29.9)
    assert roster(client)["builder"]["activity"] == "working"
    post(client, "builder", {"state": "working"})  # heartbeat: another 30 s from now
    clock.advance(29.9)
    assert roster(client)["builder"]["activity"] == "working"
    clock.advance(0.1)
    p = roster(client)["builder"]
    assert "activity" not in p
    assert "busy" not in p


def test_blocked_lapses_too_and_a_new_report_revives(
    client: httpx.Client, clock: FakeClock
) -> None:
    post(client, "alice", {"state": "blocked"})
    clock.advance(30)
    assert "activity" not in roster(client)["alice"]
    post(client, "alice", {"state": "blocked"})
    assert roster(client)["alice"]["activity"] == "blocked"


def test_fractional_ttl(clock: FakeClock, store_url: str | None) -> None:
    with (
        running_broker(team=TEAM, clock=clock, activity_ttl=0.25, redis=store_url) as b,
        httpx.Client(base_url=b.url) as c,
    ):
        post(c, "alice", {"state": "working"})
        clock.advance(0.2)
        assert roster(c)["alice"]["activity"] == "working"
        clock.advance(0.05)
        assert "activity" not in roster(c)["alice"]


# -- spoofing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"state": "working", "name": "builder"},
        {"state": "working", "member": "builder"},
        {"name": "builder", "state": "blocked"},
    ],
)
def test_a_body_naming_someone_else_is_refused(client: httpx.Client, body: Any) -> None:
    response = post(client, "alice", body)
    assert response.status_code == 400
    assert "unexpected key" in response.json()["error"]
    r = roster(client)
    assert "activity" not in r["builder"]
    assert "activity" not in r["alice"]


def test_a_report_counts_only_for_the_token_owner(client: httpx.Client) -> None:
    response = client.post(
        "/presence/activity?name=builder",
        json={"state": "working"},
        headers={**_auth("alice"), "x-member": "builder"},
    )
    assert response.status_code == 204
    r = roster(client)
    assert r["alice"]["activity"] == "working"
    assert "activity" not in r["builder"]


# -- bad bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "not valid JSON"),
        (b"working", "not valid JSON"),
        (b'{"state": "working"', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[]", "JSON object"),
        (b'"working"', "JSON object"),
        (b"null", "JSON object"),
        (b"{}", 'missing "state"'),
        (b'{"State": "working"}', "unexpected key"),
        (b'{"state": "busy"}', "must be one of"),
        (b'{"state": "IDLE"}', "must be one of"),
        (b'{"state": 1}', "must be one of"),
        (b'{"state": null}', "must be one of"),
        (b'{"state": ["working"]}', "must be one of"),
        (b"[" * 500 + b"]" * 500, "JSON object"),
        (b'{"state": {"state": "working"}}', "must be one of"),
    ],
)
def test_malformed_bodies_get_400_with_a_reason(
    client: httpx.Client, body: bytes, reason: str
) -> None:
    response = client.post(
        "/presence/activity",
        content=body,
        headers={**_auth("builder"), "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert reason in response.json()["error"]
    assert "activity" not in roster(client)["builder"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"state":"idle","state":"blocked"}',
        b'{"state": "blocked", "state": "idle"}',
        b'{"state":{"x":1},"state":"working"}',
        b'{"st\\u0061te":"idle","state":"blocked"}',
        b'{"state":"idle", "state":"idle"}',
    ],
)
def test_a_repeated_key_is_400(client: httpx.Client, body: bytes) -> None:
    """A body must say one thing: with a key twice, a reader that keeps the first and one
    that keeps the last would disagree (the broker's JSON parser keeps the last)."""
    response = client.post(
        "/presence/activity",
        content=body,
        headers={**_auth("builder"), "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json() == {"error": "key 'state' is repeated: each key may appear once"}
    assert "activity" not in roster(client)["builder"]


def test_missing_content_type_is_taken_as_json(client: httpx.Client) -> None:
    response = client.post(
        "/presence/activity", content=b'{"state":"working"}', headers=_auth("scout")
    )
    assert response.status_code == 204
    assert roster(client)["scout"]["activity"] == "working"


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "text/json"])
def test_wrong_content_type_is_415(client: httpx.Client, ctype: str) -> None:
    response = client.post(
        "/presence/activity",
        content=b'{"state":"working"}',
        headers={**_auth("scout"), "content-type": ctype},
    )
    assert response.status_code == 415
    assert "activity" not in roster(client)["scout"]


def test_content_type_with_parameters_is_fine(client: httpx.Client) -> None:
    response = client.post(
        "/presence/activity",
        content=b'{"state":"working"}',
        headers={**_auth("scout"), "content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 204


def test_oversized_body_with_content_length_is_413(client: httpx.Client) -> None:
    body = b'{"state": "working"' + b" " * 2000 + b"}"
    response = client.post(
        "/presence/activity",
        content=body,
        headers={**_auth("builder"), "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert "activity" not in roster(client)["builder"]


def test_body_at_the_limit_is_read(store_url: str | None) -> None:
    with (
        running_broker(team=TEAM, limits=BrokerLimits(max_body=64), redis=store_url) as b,
        httpx.Client(base_url=b.url) as c,
    ):
        body = b'{"state": "working"' + b" " * (64 - 20) + b"}"
        assert len(body) == 64
        assert post_raw(c, body).status_code == 204
        assert post_raw(c, body + b" ").status_code == 413


def post_raw(c: httpx.Client, body: bytes) -> httpx.Response:
    headers = {**_auth("alice"), "content-type": "application/json"}
    return c.post("/presence/activity", content=body, headers=headers)


def test_oversized_chunked_body_is_refused_while_reading(broker: RunningBroker) -> None:
    """No Content-Length, and a body that never ends: the 413 must come anyway, which it can
    only if the limit is enforced while reading rather than after."""
    host, port = broker.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = (
            "POST /presence/activity HTTP/1.1\r\n"
            f"Host: {host}\r\n"
            f"Authorization: Bearer {token_of('alice')}\r\n"
            "Content-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        sock.sendall(head)
        chunk = b" " * 512
        for _ in range(4):  # 2 KiB, then we stop sending but never end the body
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413 ")


# -- subscribe -----------------------------------------------------------------------------


@contextlib.contextmanager
def subscribed(
    broker: RunningBroker, name: str, *, as_: str | None = None
) -> Iterator[Iterator[ServerSentEvent]]:
    with (
        httpx.Client(base_url=broker.url, timeout=httpx.Timeout(10)) as c,
        c.stream(
            "GET", "/subscribe", params={"name": name}, headers=_auth(as_ or name)
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield EventSource(response).iter_sse()


def next_event(events: Iterator[ServerSentEvent], kind: str) -> Any:
    for _ in range(1000):
        event = next(events)
        if event.event == kind:
            return orjson.loads(event.data)
    raise AssertionError(f"no {kind} event")


def test_subscribe_as_someone_else_is_403(client: httpx.Client) -> None:
    response = client.get("/subscribe", params={"name": "alice"}, headers=_auth("builder"))
    assert response.status_code == 403
    assert response.json() == {
        "error": "the token is builder's, not alice's: a member may only subscribe as themselves"
    }
    response = client.get("/subscribe", params={"name": "no\x1bbody"}, headers=_auth("builder"))
    assert response.status_code == 403
    assert response.json()["error"].startswith("the token is builder's, not no\\x1bbody's")
    assert roster(client)["alice"]["connected"] == 0


def test_subscribe_without_name_is_400(client: httpx.Client) -> None:
    assert client.get("/subscribe", headers=_auth("alice")).status_code == 400


def test_connected_counts_live_streams(
    broker: RunningBroker, live_client: httpx.Client, wall: FakeClock
) -> None:
    with subscribed(broker, "alice") as first:
        initial = next_event(first, "roster")
        assert initial["team"] == "acme"
        assert initial["you"] == "alice"
        assert [p["name"] for p in initial["members"]] == ["alice", "builder", "scout"]
        assert initial["members"][0]["connected"] == 1
        assert roster(live_client)["alice"]["createdAt"] == 1_800_000_000_000
        wall.advance(60)
        with subscribed(broker, "alice") as second:
            next_event(second, "roster")
            p = roster(live_client)["alice"]
            assert p["connected"] == 2
            assert p["createdAt"] == 1_800_000_000_000
            assert p["lastSeen"] == 1_800_000_060_000
        eventually(lambda: roster(live_client)["alice"]["connected"] == 1)
    eventually(lambda: roster(live_client)["alice"]["connected"] == 0)
    assert roster(live_client)["alice"]["lastSeen"] == 1_800_000_060_000


def test_stream_carries_changes_of_others(broker: RunningBroker, live_client: httpx.Client) -> None:
    with subscribed(broker, "alice") as events:
        next_event(events, "roster")
        assert next_event(events, "presence")["name"] == "alice"  # our own attach
        post(live_client, "builder", {"state": "working"})
        p = next_event(events, "presence")
        assert p == roster(live_client)["builder"]
        assert (p["name"], p["activity"], p["busy"]) == ("builder", "working", True)
        post(live_client, "builder", {"state": "working"})  # a heartbeat changes nothing
        post(live_client, "builder", {"state": "blocked"})
        p = next_event(events, "presence")
        assert (p["name"], p["activity"]) == ("builder", "blocked")
        with subscribed(broker, "scout") as other:
            next_event(other, "roster")
            p = next_event(events, "presence")
            assert (p["name"], p["connected"]) == ("scout", 1)
        p = next_event(events, "presence")
        assert (p["name"], p["connected"]) == ("scout", 0)
        post(live_client, "builder", {"state": "idle"})
        p = next_event(events, "presence")
        assert p["name"] == "builder"
        assert "activity" not in p
        assert "busy" not in p


def test_a_ttl_lapse_is_announced_on_the_stream(store_url: str | None) -> None:
    """A 2 s TTL: the report's own event goes out before the lapse however slow the
    fan-out is on a loaded machine (0.3 s could let the lapse come first)."""
    with (
        running_broker(team=TEAM, activity_ttl=2.0, redis=store_url) as b,
        httpx.Client(base_url=b.url) as c,
        subscribed(b, "alice") as events,
    ):
        next_event(events, "roster")
        post(c, "builder", {"state": "working"})
        for _ in range(10):
            p = next_event(events, "presence")
            if p["name"] == "builder":
                break
        assert p["activity"] == "working"
        p = next_event(events, "presence")  # nobody reports: the TTL lapses
        assert p["name"] == "builder"
        assert "activity" not in p


def test_keepalive_comments(store_url: str | None) -> None:
    with (
        running_broker(team=TEAM, keepalive=0.05, redis=store_url) as b,
        httpx.Client(base_url=b.url, timeout=10) as c,
        c.stream("GET", "/subscribe?name=scout", headers=_auth("scout")) as response,
    ):
        lines = response.iter_lines()
        seen = [next(lines) for _ in range(12)]
        assert ": keepalive" in seen


def test_a_quiet_stream_is_counted_and_carries_keepalives_alone(store_url: str | None) -> None:
    """A runner's stream (``?quiet=1``, issue 37): connected counts it, and it carries no
    roster and no change, only keep-alives: a change that a page stream carried is
    followed on the quiet one by keep-alives and nothing else."""
    with (
        running_broker(team=TEAM, keepalive=0.05, redis=store_url) as b,
        httpx.Client(base_url=b.url, timeout=10) as c,
        c.stream(
            "GET", "/subscribe", params={"name": "scout", "quiet": "1"}, headers=_auth("scout")
        ) as quiet,
        subscribed(b, "alice") as page,
    ):
        assert quiet.status_code == 200
        lines = quiet.iter_lines()
        assert next(lines) == "retry: 2000"
        assert roster(c)["scout"]["connected"] == 1  # counted at once: attached before 200
        next_event(page, "roster")
        post(c, "builder", {"state": "working"})
        while (p := next_event(page, "presence"))["name"] != "builder":
            pass
        assert p["activity"] == "working"  # published: a quiet stream would have it by now
        seen: list[str] = []
        while seen.count(": keepalive") < 3:
            seen.append(next(lines))
        assert set(seen) == {"", ": keepalive"}, seen
        refused = c.get(
            "/subscribe", params={"name": "scout", "quiet": "yes"}, headers=_auth("scout")
        )
        assert refused.status_code == 400
        assert "quiet" in refused.json()["error"]


def _awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The coroutines ``task`` is suspended in, outermost first, as ``module.qualname``."""
    chain: list[str] = []
    coro: Any = task.get_coro()
    while (code := getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)) is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        module = frame.f_globals.get("__name__", "?") if frame is not None else "?"
        chain.append(f"{module}.{code.co_qualname}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


def _tasks_route(broker: Any) -> list[Route]:
    async def tasks(request: Request) -> JSONResponse:
        return JSONResponse([_awaiting(t) for t in asyncio.all_tasks()])

    return [Route("/test/tasks", tasks)]


def test_an_open_stream_waits_outside_the_router_in_two_tasks(store_url: str | None) -> None:
    """What 10,000 open streams weigh (issue 37): a stream waits in the server's task with
    none of the router's coroutines under it (they held ~7 kB of each stream's ~26 kB), and
    with one task more that waits for the client's disconnect, not a task group; and it
    still carries its keep-alives and events, and is uncounted when its client goes."""
    with (
        running_broker(team=TEAM, keepalive=0.05, redis=store_url, extra_routes=_tasks_route) as b,
        httpx.Client(base_url=b.url, timeout=10) as c,
        subscribed(b, "alice") as page,
    ):
        next_event(page, "roster")
        with c.stream(
            "GET", "/subscribe", params={"name": "scout", "quiet": "1"}, headers=_auth("scout")
        ) as quiet:
            lines = quiet.iter_lines()
            assert next(lines) == "retry: 2000"
            chains = c.get("/test/tasks").json()
            streams = [t for t in chains if any(".app._Subscription." in f for f in t)]
            assert len(streams) == 2, chains  # alice's page and scout's runner
            for chain in streams:
                assert not [f for f in chain if f.startswith("starlette.") or "TaskGroup" in f]
            watching = [t for t in chains if t and t[0] == "codex_presence.broker.app._disconnect"]
            assert len(watching) == 2, chains

            post(c, "builder", {"state": "working"})
            while (p := next_event(page, "presence"))["name"] != "builder":
                pass
            assert p["activity"] == "working"
            seen: list[str] = []
            while seen.count(": keepalive") < 3:
                seen.append(next(lines))
            assert set(seen) == {"", ": keepalive"}, seen
            assert roster(c)["scout"]["connected"] == 1
        eventually(
            lambda: roster(c)["scout"]["connected"] == 0,
            what="scout's stream uncounted once its client closed it",
        )
        chains = c.get("/test/tasks").json()
        assert len([t for t in chains if any(".app._Subscription." in f for f in t)]) == 1


def test_too_many_streams_for_one_member_is_429(store_url: str | None) -> None:
    with (
        running_broker(team=TEAM, limits=BrokerLimits(max_subscribers=2), redis=store_url) as b,
        httpx.Client(base_url=b.url, timeout=10) as c,
        subscribed(b, "alice") as s1,
        subscribed(b, "alice") as s2,
    ):
        next_event(s1, "roster")
        next_event(s2, "roster")
        response = c.get("/subscribe?name=alice", headers=_auth("alice"))
        assert response.status_code == 429
        assert roster(c)["alice"]["connected"] == 2


_SUBSCRIBER = """
import sys, httpx
url, token = sys.argv[1], sys.argv[2]
with httpx.Client(timeout=None) as c, c.stream(
    "GET", url + "/subscribe?name=builder", headers={"authorization": "Bearer " + token}
) as r:
    for line in r.iter_lines():
        if line.startswith("event: roster"):
            print("subscribed", flush=True)
    print("stream ended", flush=True)
"""


def test_a_sigkilled_subscriber_process_is_uncounted(
    broker: RunningBroker, live_client: httpx.Client
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _SUBSCRIBER, broker.url, token_of("builder")],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        _kill_and_watch(proc, live_client)


def _kill_and_watch(proc: subprocess.Popen[str], client: httpx.Client) -> None:
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "subscribed"
        assert roster(client)["builder"]["connected"] == 1
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(WAIT) == -signal.SIGKILL
        eventually(lambda: roster(client)["builder"]["connected"] == 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)


def test_a_broken_pipe_is_uncounted(broker: RunningBroker, live_client: httpx.Client) -> None:
    """A socket torn down with RST (SO_LINGER 0), as a crashed host or a middlebox does."""
    host, port = broker.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(
        f"GET /subscribe?name=scout HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token_of('scout')}\r\n\r\n".encode()
    )
    assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
    eventually(lambda: roster(live_client)["scout"]["connected"] == 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    eventually(lambda: roster(live_client)["scout"]["connected"] == 0)


def test_shutdown_ends_open_streams(store_url: str | None) -> None:
    with running_broker(team=TEAM, redis=store_url) as b, subscribed(b, "alice") as events:
        next_event(events, "roster")
        b.server.should_exit = True
        for _ in range(1000):  # the stream ends (StopIteration) rather than hanging
            try:
                next(events)
            except StopIteration:
                break
        else:
            raise AssertionError("the stream did not end")


# -- extension point for the web page's session cookie -------------------------------------


def test_an_extra_authenticator_is_a_second_way_in(store_url: str | None) -> None:
    async def cookie(request: Request) -> Member | None:
        return TEAM.member("scout") if request.cookies.get("session") == "s3cret" else None

    with (
        running_broker(team=TEAM, authenticators=[cookie], redis=store_url) as b,
        httpx.Client(base_url=b.url) as c,
    ):
        assert c.get("/roster", headers={"cookie": "session=s3cret"}).status_code == 200
        assert c.get("/roster", headers={"cookie": "session=wrong"}).status_code == 401
        assert c.get("/whoami", headers={"cookie": "session=s3cret"}).json()["name"] == "scout"


# -- the fan-out, sans HTTP ----------------------------------------------------------------


def _events(chunk: bytes) -> list[tuple[str, Any]]:
    out = []
    for block in chunk.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            out.append((fields["event"], orjson.loads(fields["data"])))
    return out


def test_fanout_coalesces_and_resyncs_a_subscriber_that_fell_behind(clock: FakeClock) -> None:
    from codex_presence.broker.state import Broker
    from codex_presence.core.activity import ActivityState

    b = Broker(team=TEAM, clock=clock)
    alice, builder = TEAM.member("alice"), TEAM.member("builder")
    assert alice is not None and builder is not None

    def report(member: Member, state: ActivityState) -> None:
        anyio.run(b.report, member, Report(state))

    start = b.version
    report(builder, ActivityState.WORKING)
    report(builder, ActivityState.BLOCKED)
    report(alice, ActivityState.WORKING)
    report(alice, ActivityState.WORKING)  # a heartbeat: no change
    assert b.publish()
    assert not b.publish()  # nothing new
    chunk, version = b.since(start, you="scout")
    assert version == b.version == start + 1
    events = _events(chunk)
    # one event per member, with the latest state, however many reports came in between
    assert [(kind, p["name"], p.get("activity")) for kind, p in events] == [
        ("presence", "builder", "blocked"),
        ("presence", "alice", "working"),
    ]
    # a lapse is found and published by the fan-out, though nobody read the roster
    clock.advance(30)
    assert b.publish()
    (kind, p), *_ = _events(b.since(version, you="scout")[0])
    assert kind == "presence"
    assert "activity" not in p
    # far behind: more batches than the log keeps -> the whole roster again
    for _ in range(100):
        report(builder, ActivityState.WORKING)
        b.publish()
        report(builder, ActivityState.IDLE)
        b.publish()
    chunk, _ = b.since(start, you="scout")
    ((kind, data),) = _events(chunk)
    assert kind == "roster"
    assert data["you"] == "scout"
    assert [p["name"] for p in data["members"]] == ["alice", "builder", "scout"]


def test_the_roster_event_says_each_members_privilege() -> None:
    """The web page shows the broker's privilege bucket, not its own copy of the rule."""
    from codex_presence.broker.state import Broker

    ((kind, data),) = _events(Broker(team=TEAM).roster_event("scout"))
    assert kind == "roster"
    assert data["privileges"] == {"alice": "admin", "builder": None, "scout": "operator"}


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.one_of(
        _json_values,
        st.fixed_dictionaries({"state": st.sampled_from(["idle", "working", "blocked"])}),
        st.fixed_dictionaries({"state": _json_values}),
        st.fixed_dictionaries(
            {"state": st.sampled_from(["idle", "working"])},
            optional={
                "session": st.sampled_from(["s1", "", "a b"]) | _json_values,
                "background": st.integers(-2, 1030) | _json_values,
            },
        ),
    )
)
def test_only_exactly_a_state_object_is_accepted(value: Any) -> None:
    from codex_presence._wire import background_problem, session_id_problem
    from codex_presence.broker.app import _parse_report
    from codex_presence.core.activity import ActivityState

    result = _parse_report(orjson.dumps(value))
    valid = (
        isinstance(value, dict)
        and "state" in value
        and set(value) <= {"state", "session", "background"}
        and value["state"] in ("idle", "working", "blocked")
        and ("session" not in value or session_id_problem(value["session"]) is None)
        and (
            "background" not in value
            or ("session" in value and background_problem(value["background"]) is None)
        )
    )
    if valid:
        expected = Report(
            ActivityState(value["state"]),
            value.get("session", ""),
            value.get("background", 0),
        )
        assert result == expected
    else:
        assert isinstance(result, str)
        assert not isinstance(result, Report)


def test_a_send_that_fails_uncounts_the_stream() -> None:
    """ASGI 2.4 servers raise OSError on a send to a closed connection; the stream ends
    quietly and is uncounted (uvicorn, ASGI 2.3, is covered by the tests above)."""
    import anyio

    from codex_presence.broker.app import _Subscription
    from codex_presence.broker.state import Broker

    broker = Broker(team=TEAM)
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)
        assert broker.store.connection("alice").connected == 1
        if len(sent) == 2:  # the start went out; the first body meets a dead peer
            raise OSError("broken pipe")

    async def receive() -> Any:
        await anyio.sleep(60)  # never a disconnect message: only the send can tell

    async def main() -> None:
        with anyio.fail_after(WAIT):
            await _Subscription(broker, "alice")({"type": "http"}, receive, send)

    anyio.run(main)
    assert len(sent) == 2
    assert broker.store.connection("alice").connected == 0


def _client_until(gone: asyncio.Event) -> tuple[Any, Any]:
    """An SSE client's ``receive`` and ``send`` as the server gives them to a stream: its
    request (a GET's empty body), then its disconnect once ``gone`` is set; what the stream
    sends is dropped."""
    requested = False

    async def receive() -> Any:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        pass

    return receive, send


def test_a_stream_whose_client_went_ends_though_an_await_swallowed_the_cancel() -> None:
    """The client's going cancels the stream's task once (a plain asyncio cancel, not a
    task group's scope, which cancels again at every await): a stream in an await that
    swallowed it (here the sign-in's check, as a store's client might) must still end, not
    wait on for keep-alives that a closed connection drops."""
    from codex_presence.broker.app import _Subscription
    from codex_presence.broker.state import Broker

    broker = Broker(team=TEAM)
    asked = 0
    gone = asyncio.Event()
    receive, send = _client_until(gone)

    async def authorized() -> bool:
        nonlocal asked
        asked += 1
        if asked == 1:
            gone.set()  # the client goes while this check waits
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
        return True

    async def main() -> bool:
        stream = _Subscription(broker, "alice", authorized)
        task = asyncio.create_task(stream({"type": "http"}, receive, send))
        done, _ = await asyncio.wait({task}, timeout=60)
        task.cancel()  # (a stream still open after a minute: the test fails below)
        await asyncio.gather(task, return_exceptions=True)
        return task in done

    assert asyncio.run(main()), "the stream was still open a minute after its client went"
    assert asked == 1
    assert broker.store.connection("alice").connected == 0


def test_a_client_that_goes_as_the_stream_ends_cancels_nothing_after_it() -> None:
    """The client goes in the same turn of the loop as the stream ends by itself (the
    broker closing): the disconnect's callback, already scheduled, ran after the stream
    had returned and cancelled its task's next await (the review of 2026-12-03: a caller
    that goes on after the app, an ASGI transport or a middleware, would be cancelled)."""
    from codex_presence.broker.app import _Subscription
    from codex_presence.broker.state import Broker

    broker = Broker(team=TEAM)
    gone = asyncio.Event()
    receive, send = _client_until(gone)

    def both() -> None:
        gone.set()
        broker.close()

    async def main() -> str:
        asyncio.get_running_loop().call_soon(both)
        await _Subscription(broker, "alice", quiet=True).run({"type": "http"}, receive, send)
        try:
            for _ in range(3):  # turns of the loop: a callback scheduled runs in the first
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            return "the caller was cancelled after the stream had ended"
        return "went on"

    assert asyncio.run(main()) == "went on"
    assert broker.store.connection("alice").connected == 0


# -- a subscriber whose machine vanished -----------------------------------------------------


def test_accepted_connections_give_up_on_a_silent_peer() -> None:
    from codex_presence.broker.server import DEAD_PEER_TIMEOUT, listen_socket

    assert DEAD_PEER_TIMEOUT == 45.0  # three stream keep-alives
    with listen_socket() as server, socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            tcp = socket.IPPROTO_TCP
            assert accepted.getsockopt(tcp, socket.TCP_USER_TIMEOUT) == 45_000
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert client.fileno() >= 0


VANISHING_PEER = r"""
import socket, subprocess, sys, time
from codex_presence.broker.server import listen_socket

subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
server = listen_socket(dead_peer_timeout=1.0)
client = socket.create_connection(server.getsockname())
accepted, _ = server.accept()
accepted.sendall(b"event: roster\n\n")
assert client.recv(100)
subprocess.run(["ip", "link", "set", "lo", "down"], check=True)  # the peer vanishes: no FIN
start = time.monotonic()
try:
    while time.monotonic() - start < 30:
        accepted.sendall(b": keepalive\n\n")  # what the broker's stream sends meanwhile
        time.sleep(0.2)
except OSError as exc:
    print(f"{exc.errno} {time.monotonic() - start:.1f}")
    sys.exit(0)
print("still open after 30 s")
sys.exit(1)
"""


def test_a_vanished_subscribers_connection_is_dropped_within_the_timeout() -> None:
    """In a private network namespace, loopback is taken down under an open connection
    (as a laptop lid or a dropped link does: no FIN, no RST). The broker's side of it
    fails within its dead-peer timeout instead of after ~15 minutes of retransmissions,
    and a failed stream is a detached subscriber (the stream tests show that part)."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("this test needs root for a private network namespace (unshare -n)")
        pytest.skip("needs root for a private network namespace (unshare -n)")
    result = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", VANISHING_PEER],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    errno_text, _seconds = result.stdout.split()
    assert int(errno_text) == 110  # ETIMEDOUT: our timeout fired (without it: "still open")
