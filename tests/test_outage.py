"""A broker that stays away is said once, then counted (issue 15): not ``offline:
ConnectError`` six times in ten seconds."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from codex_presence.client.subscription import ConnectionPresence, Outage
from codex_presence.core.backoff import Backoff
from tests.support.broker_harness import (
    FakeClock,
    make_team,
    reserved_port,
    running_broker,
    token_of,
)
from tests.support.waiting import WAIT, eventually_async


def said(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == logger and r.levelno >= logging.INFO
    ]


def test_a_failure_is_said_when_it_changes_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = FakeClock(0)
    outage = Outage(logging.getLogger("test.outage"), "offline", clock=clock)
    assert outage.over() == ""  # nothing failed: nothing to say
    for _ in range(100):
        clock.advance(1)
        outage.failed("lost the stream: ConnectError")
    outage.failed("subscribe: HTTP 503 busy")  # another reason: said
    assert said(caplog, "test.outage") == [
        "offline: lost the stream: ConnectError",
        "still offline: 10 failed attempts in 9 s",
        "still offline: 100 failed attempts in 99 s",
        "offline: subscribe: HTTP 503 busy",
    ]
    assert outage.over() == " (after 101 failed attempts in 99 s)"
    outage.failed("lost the stream: ConnectError")  # a new run: said again
    assert said(caplog, "test.outage")[-1] == "offline: lost the stream: ConnectError"


@pytest.mark.anyio
async def test_a_subscription_to_a_broker_away_logs_once_and_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="codex_presence")
    team = make_team("alice")
    with reserved_port() as sock:  # bound, not listening: every attempt is refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        headers = {"authorization": f"Bearer {token_of('alice')}"}
        async with (
            httpx.AsyncClient(base_url=url, headers=headers) as client,
            anyio.create_task_group() as tg,
        ):
            presence = ConnectionPresence(client, "alice", backoff=Backoff(base=0.01, cap=0.02))
            tg.start_soon(presence.run)
            await eventually_async(lambda: presence._outage.attempts >= 12, 60, "12 attempts")
            offline = said(caplog, "codex_presence.presence")
            assert len(offline) == 2, offline  # the first failure, then the 10th counted
            assert offline[0].startswith("offline: lost the stream: ")
            assert offline[1].startswith("still offline: 10 failed attempts in ")
            with running_broker(team=team, sock=sock):
                await eventually_async(lambda: presence.connects == 1, 60, "back online")
                tg.cancel_scope.cancel()
    online = said(caplog, "codex_presence.presence")[-1]
    assert online.startswith("online: subscribed to the broker as alice (after ")
    assert "failed attempts in " in online


@pytest.mark.anyio
async def test_a_refused_subscription_says_why(caplog: pytest.LogCaptureFixture) -> None:
    """A name the token does not own: the broker's 403 says so, and so does the log."""
    caplog.set_level(logging.INFO, logger="codex_presence")
    with running_broker(team=make_team("alice", "bob")) as broker:
        headers = {"authorization": f"Bearer {token_of('alice')}"}
        async with httpx.AsyncClient(base_url=broker.url, headers=headers) as client:
            presence = ConnectionPresence(client, "bob")
            with anyio.fail_after(WAIT):
                await presence.run()  # returns: refused for good
    assert presence.refused is not None
    assert presence.reason == (
        "the broker refused the subscription (HTTP 403: the token is alice's, not bob's: a"
        " member may only subscribe as themselves); not retrying"
    )
    assert said(caplog, "codex_presence.presence") == [f"offline: {presence.reason}"]
