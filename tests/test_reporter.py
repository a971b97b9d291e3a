"""The activity reporter and connection presence against a real broker on loopback."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from codex_presence import ActivityState
from codex_presence.broker.record import Report
from codex_presence.client.link import BrokerLink, BrokerSettings
from codex_presence.client.reporter import ActivityReporter
from codex_presence.client.subscription import ConnectionPresence, ConnectionState
from codex_presence.core.activity import Transition
from codex_presence.core.backoff import Backoff
from codex_presence.core.report_policy import ReportPolicy, Wait
from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    make_team,
    reserved_port,
    running_broker,
    token_of,
)
from tests.support.fault_proxy import FaultProxy
from tests.support.waiting import WAIT, eventually_async

pytestmark = pytest.mark.anyio

IDLE, WORKING, BLOCKED = ActivityState.IDLE, ActivityState.WORKING, ActivityState.BLOCKED


def client_for(url: str, name: str = "alice", token: str | None = None) -> httpx.AsyncClient:
    token = token if token is not None else token_of(name)
    return httpx.AsyncClient(base_url=url, headers={"authorization": f"Bearer {token}"})


def activity(broker: RunningBroker, name: str = "alice") -> str | None:
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob")).json()
    (me,) = [p for p in roster if p["name"] == name]
    assert ("busy" in me) == ("activity" in me)
    return me.get("activity")


@asynccontextmanager
async def reporting(
    url: str, *, token: str | None = None, policy: ReportPolicy | None = None
) -> AsyncIterator[ActivityReporter]:
    async with client_for(url, token=token) as client, anyio.create_task_group() as tg:
        reporter = ActivityReporter(client=client, policy=policy)
        tg.start_soon(reporter.run)
        try:
            yield reporter
        finally:
            tg.cancel_scope.cancel()


def fast_policy(**kwargs: float) -> ReportPolicy:
    return ReportPolicy(backoff=Backoff(base=0.02, cap=0.1), **kwargs)  # type: ignore[arg-type]


async def test_every_transition_reaches_the_roster_and_idle_is_absence() -> None:
    with running_broker(team=make_team("alice", "bob")) as broker:
        async with reporting(broker.url) as reporter:
            assert activity(broker) is None
            for state, shown in [(WORKING, "working"), (BLOCKED, "blocked"), (IDLE, None)]:
                reporter.observe(state)
                await eventually_async(lambda shown=shown: activity(broker) == shown, 60)  # type: ignore[misc]
            assert reporter.posts == 3


def last_seen(broker: RunningBroker, name: str = "alice") -> int:
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob")).json()
    (me,) = [p for p in roster if p["name"] == name]
    return int(me["lastSeen"])


async def test_heartbeat_keeps_a_short_ttl_from_lapsing_and_idle_is_silent() -> None:
    """Heartbeats every 0.1 s keep a 0.5 s TTL from lapsing over more than twice the TTL.
    The broker's clocks are the test's: it moves them 0.4 s (less than the TTL) at a
    time, and waits for a heartbeat at each new time (the report's lastSeen) before the
    next move, so a machine too loaded to send one in time fails nothing by itself."""
    clock, wall = FakeClock(), FakeClock(1_800_000_000.0)
    team = make_team("alice", "bob")
    with running_broker(team=team, activity_ttl=0.5, clock=clock, wall_clock=wall) as broker:
        async with reporting(broker.url, policy=fast_policy(heartbeat=0.1)) as reporter:
            reporter.observe(WORKING)
            await eventually_async(lambda: activity(broker) == "working", 60)
            start = reporter.posts
            for _ in range(3):  # 1.2 s: more than twice the TTL
                clock.advance(0.4)
                wall.advance(0.4)
                now = round(wall() * 1000)
                await eventually_async(lambda now=now: last_seen(broker) == now, 60)  # type: ignore[misc]
                assert activity(broker) == "working"
            assert reporter.posts >= start + 3  # the heartbeats did it
            reporter.observe(IDLE)
            await eventually_async(lambda: activity(broker) is None, WAIT)
            after_idle = reporter.posts
            await anyio.sleep(0.5)
            assert reporter.posts == after_idle  # silence when idle


async def test_without_heartbeats_the_ttl_lapses() -> None:
    # The control for the test above: a short TTL, heartbeats far apart. The broker's
    # clock is the test's, so the report cannot lapse before a (slow, loaded) poll of the
    # roster has seen it: on the real clock it could lapse unseen within 0.3 s.
    clock = FakeClock()
    with running_broker(team=make_team("alice", "bob"), activity_ttl=0.3, clock=clock) as broker:
        async with reporting(broker.url, policy=fast_policy(heartbeat=60)) as reporter:
            reporter.observe(WORKING)
            await eventually_async(lambda: activity(broker) == "working", 60)
            clock.advance(0.3)
            assert activity(broker) is None
            assert reporter.posts == 1  # no heartbeat revived it


async def test_coalescing_sends_only_the_latest_state() -> None:
    with running_broker(team=make_team("alice", "bob")) as broker:
        async with reporting(broker.url) as reporter:
            for state in (WORKING, BLOCKED, WORKING, BLOCKED, WORKING):
                reporter.observe(state)  # all before the reporter task runs once
            await eventually_async(lambda: activity(broker) == "working", 60)
            await anyio.sleep(0.1)
            assert reporter.posts == 1


async def test_broker_down_at_start_then_up_is_recovered_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="codex_presence")
    with reserved_port() as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with reporting(url, policy=fast_policy()) as reporter:
            reporter.observe(WORKING)
            await eventually_async(lambda: reporter.posts >= 3, 60)  # refused, retried
            assert not reporter.policy.settled
            # Said once, in httpx's words (before: its class name, "(ConnectError)").
            [said] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
            assert said == (
                "cannot report activity to the broker (All connection attempts failed); "
                "retrying with backoff"
            )
            with running_broker(team=make_team("alice", "bob"), sock=sock) as broker:
                await eventually_async(lambda: activity(broker) == "working", 60)
                await eventually_async(lambda: reporter.policy.settled, 60)  # the 204 is read after


async def test_unauthorized_is_logged_once_and_reporting_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="codex_presence")
    with running_broker(team=make_team("alice", "bob")) as broker:
        async with reporting(broker.url, token="cp_wrong-token") as reporter:
            for state in (WORKING, BLOCKED, IDLE, WORKING):
                reporter.observe(state)
                await anyio.sleep(0.05)
            assert reporter.posts == 1 and reporter.policy.stopped
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "refused our token" in errors[0].getMessage()
    assert "cp_wrong-token" not in caplog.text


async def test_finish_reports_idle_within_its_grace() -> None:
    with running_broker(team=make_team("alice", "bob")) as broker:
        async with client_for(broker.url) as client:
            reporter = ActivityReporter(client=client)
            async with anyio.create_task_group() as tg:
                tg.start_soon(reporter.run)
                reporter.observe(BLOCKED)
                await eventually_async(lambda: activity(broker) == "blocked", 60)
                tg.cancel_scope.cancel()
            await reporter.finish(grace=1.0)
            assert activity(broker) is None


async def test_finish_gives_up_when_the_broker_is_gone() -> None:
    with reserved_port() as sock:  # nobody listens there
        async with client_for(f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            reporter = ActivityReporter(client=client, policy=fast_policy())
            reporter.policy.held = WORKING  # as if reported before the broker vanished
            reporter.policy.truth = WORKING
            reporter.policy.held_since = anyio.current_time()
            with anyio.fail_after(3):
                await reporter.finish(grace=0.3)
            assert not reporter.policy.settled


async def test_finish_says_idle_at_once_though_a_failed_report_waits_its_backoff() -> None:
    """The broker holds working; the next report failed (the broker was away a moment) and
    its retry waits a backoff longer than the exit's grace. The session ends, the broker
    back: its last word goes at once. (finish() waited for the backoff, past its grace: the
    broker held working until its TTL, and a death for a session that ended cleanly.)"""
    with running_broker(team=make_team("alice", "bob")) as broker:
        proxy = FaultProxy(int(broker.url.rsplit(":", 1)[1]))
        try:
            async with client_for(proxy.url) as client:
                policy = ReportPolicy(backoff=Backoff(base=60.0, cap=60.0))
                reporter = ActivityReporter(client=client, policy=policy)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reporter.run)
                    reporter.observe(WORKING)
                    await eventually_async(lambda: policy.settled, 60)
                    proxy.set_mode("500")
                    reporter.observe(BLOCKED)
                    await eventually_async(
                        lambda: reporter.posts == 2 and policy.in_flight is None, 5
                    )
                    assert isinstance(policy.next_action(anyio.current_time()), Wait)
                    tg.cancel_scope.cancel()  # the session ends during the backoff
                proxy.set_mode("pass")
                await reporter.finish(grace=5.0)
                assert policy.settled
            assert activity(broker) is None  # idle is absence
        finally:
            proxy.close()


async def test_the_last_word_comes_while_the_session_is_still_subscribed() -> None:
    """A session ends mid-turn: its idle reaches the broker while its subscription still
    holds the session, and only then does the subscription end. (The link ended the
    subscription first: the broker gave the session its grace and took it for dying before
    the idle came; where several brokers share a store, the one holding the subscription
    never sees a report made through another, so that clean end read as a lapse there and
    was told as a death.) Decided by the link's own order: whether its subscription's task
    is over when the broker gets the idle."""
    with running_broker(team=make_team("alice", "bob")) as running:
        link = BrokerLink(
            BrokerSettings(url=running.url, token=token_of("alice"), name="alice", exit_grace=10.0)
        )
        subscribed = link._hold_presence
        subscription_over = False

        async def holding(client: httpx.AsyncClient) -> None:
            nonlocal subscription_over
            try:
                await subscribed(client)
            finally:
                subscription_over = True

        link._hold_presence = holding  # type: ignore[method-assign]
        broker, report = running.broker, running.broker.report
        at_idle: list[tuple[bool, int]] = []

        async def reporting(member: Any, said: Report) -> None:
            if said.state is IDLE:
                at_idle.append((subscription_over, broker.presence("alice")["connected"]))
            await report(member, said)

        broker.report = reporting  # type: ignore[method-assign]
        async with link.session():
            await eventually_async(lambda: connected(running) == 1, 60)
            link.observe(Transition(previous=IDLE, state=WORKING, cause="turn/started"))
            await eventually_async(lambda: activity(running) == "working", 60)
        assert at_idle == [(False, 1)]
        await eventually_async(lambda: connected(running) == 0, WAIT)
        assert activity(running) is None


async def test_connection_presence_counts_and_reconnects() -> None:
    states: list[ConnectionState] = []
    team = make_team("alice", "bob")
    with reserved_port() as sock:  # the first broker's, once it starts
        port = sock.getsockname()[1]
        async with (
            client_for(f"http://127.0.0.1:{port}") as client,
            anyio.create_task_group() as tg,
        ):
            presence = ConnectionPresence(
                client=client,
                name="alice",
                backoff=Backoff(base=0.02, cap=0.1),
                on_change=states.append,
            )
            tg.start_soon(presence.run)
            await eventually_async(lambda: ConnectionState.OFFLINE in states, WAIT)  # down at start
            for round_ in (1, 2):
                # the second life binds the port the first one let go of, as a restart does
                life = running_broker(team=team, sock=sock) if round_ == 1 else None
                with life or running_broker(team=team, port=port) as broker:
                    await eventually_async(lambda: presence.state is ConnectionState.ONLINE, 60)
                    await eventually_async(lambda: connected(broker) == 1, 60)
                    assert presence.connects == round_
                await eventually_async(lambda: presence.state is not ConnectionState.ONLINE, WAIT)
            tg.cancel_scope.cancel()
    assert states[:3] == [
        ConnectionState.CONNECTING,
        ConnectionState.OFFLINE,
        ConnectionState.CONNECTING,
    ]


def connected(broker: RunningBroker, name: str = "alice") -> int:
    roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob")).json()
    (me,) = [p for p in roster if p["name"] == name]
    count: int = me["connected"]
    return count


async def test_connection_presence_stops_on_a_wrong_token() -> None:
    with running_broker(team=make_team("alice", "bob")) as broker:
        async with client_for(broker.url, token=token_of("bob")) as client:
            presence = ConnectionPresence(client=client, name="alice")  # bob posing as alice
            with anyio.fail_after(WAIT):
                await presence.run()
            assert presence.refused == 403 and "403" in presence.reason
            assert connected(broker) == 0


async def test_a_report_applied_but_answered_too_late_is_followed_by_idle() -> None:
    """The broker applied "working" but its answer came after the reporter's timeout; the
    turn then ended. The broker may hold working, so idle is still reported."""
    with running_broker(team=make_team("alice", "bob")) as broker:
        proxy = FaultProxy(int(broker.url.rsplit(":", 1)[1]), mode="late", stall=2.0)
        try:
            async with client_for(proxy.url) as client, anyio.create_task_group() as tg:
                reporter = ActivityReporter(
                    client=client, policy=fast_policy(), request_timeout=0.3
                )
                tg.start_soon(reporter.run)
                reporter.observe(WORKING)
                # applied; its answer held
                await eventually_async(lambda: activity(broker) == "working", 60)
                proxy.set_mode("pass")
                reporter.observe(IDLE)
                await eventually_async(lambda: reporter.policy.settled, 60)
                tg.cancel_scope.cancel()
            assert activity(broker) is None  # idle is absence
        finally:
            proxy.close()


async def test_finish_reports_idle_after_a_report_cancelled_in_flight() -> None:
    """The session ended while the POST of "working" was in flight (applied by the broker,
    not yet answered): finish() cannot know it was not applied, so it reports idle."""
    with running_broker(team=make_team("alice", "bob")) as broker:
        proxy = FaultProxy(int(broker.url.rsplit(":", 1)[1]), mode="late", stall=5.0)
        try:
            async with client_for(proxy.url) as client:
                reporter = ActivityReporter(client=client, policy=fast_policy())
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reporter.run)
                    reporter.observe(WORKING)
                    await eventually_async(lambda: activity(broker) == "working", 60)
                    tg.cancel_scope.cancel()  # the session ends, the answer still held
                proxy.set_mode("pass")
                await reporter.finish(grace=2.0)
                assert reporter.policy.settled
            assert activity(broker) is None  # idle is absence
        finally:
            proxy.close()


async def test_two_reporters_of_one_member_are_two_sessions() -> None:
    """Issue 23: each reporter names its session; one ending its turn does not hide the
    other's work."""
    with running_broker(team=make_team("alice", "bob")) as broker:
        async with (
            client_for(broker.url) as first_client,
            client_for(broker.url) as second_client,
            anyio.create_task_group() as tg,
        ):
            first = ActivityReporter(client=first_client, session="first-run")
            second = ActivityReporter(client=second_client, session="second-run")
            tg.start_soon(first.run)
            tg.start_soon(second.run)
            first.observe(WORKING)
            second.observe(WORKING)
            await eventually_async(lambda: first.posts and second.posts)
            second.observe(IDLE)
            await eventually_async(lambda: second.posts == 2)
            assert activity(broker) == "working"
            first.observe(IDLE)
            await eventually_async(lambda: activity(broker) is None)
            tg.cancel_scope.cancel()


async def test_a_broker_that_predates_sessions_gets_anonymous_reports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker of before issue 23 refuses a body with ``session`` (400, naming the key):
    the reporter says so once and goes on as the member's one anonymous session. (The old
    broker is an in-process ASGI app answering as it did: the socket is not the point.)"""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    bodies: list[bytes] = []

    async def old_activity(request: Request) -> Response:
        body = await request.body()
        bodies.append(body)
        if b"session" in body:
            reason = "unexpected key(s) 'session': the body is exactly {\"state\": ...}"
            return JSONResponse({"error": reason}, status_code=400)
        return Response(status_code=204)

    app = Starlette(routes=[Route("/presence/activity", old_activity, methods=["POST"])])
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://old-broker") as client,
        anyio.create_task_group() as tg,
    ):
        reporter = ActivityReporter(client=client, policy=fast_policy(), session="this-run")
        tg.start_soon(reporter.run)
        reporter.observe(WORKING)
        await eventually_async(lambda: len(bodies) == 2)
        reporter.observe(IDLE)
        await eventually_async(lambda: len(bodies) == 3)
        tg.cancel_scope.cancel()
    assert bodies == [
        b'{"state":"working","session":"this-run"}',
        b'{"state":"working"}',
        b'{"state":"idle"}',
    ]
    assert reporter.session is None
    said = [r.getMessage() for r in caplog.records if "does not know sessions" in r.getMessage()]
    assert len(said) == 1


async def test_a_broker_that_predates_counts_gets_the_state_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker of before issue 23 part 3 refuses a body with ``background`` (400, naming
    the key, and the keys it takes, "session" among them): the reporter drops the count,
    not the session, says so once, and goes on."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    bodies: list[bytes] = []

    async def old_activity(request: Request) -> Response:
        body = await request.body()
        bodies.append(body)
        if b"background" in body:
            reason = (
                "unexpected key(s) 'background': the body is exactly "
                '{"state": ...[, "session": ...]}'
            )
            return JSONResponse({"error": reason}, status_code=400)
        return Response(status_code=204)

    app = Starlette(routes=[Route("/presence/activity", old_activity, methods=["POST"])])
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://old-broker") as client,
        anyio.create_task_group() as tg,
    ):
        reporter = ActivityReporter(client=client, policy=fast_policy(), session="this-run")
        tg.start_soon(reporter.run)
        reporter.observe(WORKING)
        reporter.observe_background(1)
        await eventually_async(lambda: len(bodies) == 2)
        reporter.observe_background(2)
        await eventually_async(lambda: len(bodies) == 3)
        tg.cancel_scope.cancel()
    assert bodies == [
        b'{"state":"working","session":"this-run","background":1}',
        b'{"state":"working","session":"this-run"}',
        b'{"state":"working","session":"this-run"}',
    ]
    assert reporter.session == "this-run"
    said = [r.getMessage() for r in caplog.records if "know background counts" in r.getMessage()]
    assert len(said) == 1
