"""A broker for the session tests, over real HTTP on loopback: the team, two session ids,
the fixtures (``clock``, ``broker``, ``client``: the TTLs' and the grace's clock is the
test's, :class:`FakeClock`; the store is ``store_url``'s, in memory or a real redis-server)
and what the tests of sessions (``tests/test_sessions.py``) and of background work
(``tests/test_background_roster.py``) both ask of it.

A test module takes the fixtures by naming them at its top level (pytest finds fixtures by
the module's names; an import of them would be shadowed by the tests' parameters)::

    clock, broker, client = session_api.clock, session_api.broker, session_api.client
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.broker_harness import (
    FakeClock,
    RunningBroker,
    make_team,
    running_broker,
    token_of,
)
from tests.support.shared_brokers import Stream
from tests.support.waiting import eventually

TEAM = make_team("alice", "builder", "scout")
A, B = "sessionAAAAAAAAA", "session-B_bbbbbb"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(clock: FakeClock, store_url: str | None) -> Iterator[RunningBroker]:
    with running_broker(team=TEAM, clock=clock, keepalive=30, redis=store_url) as b:
        yield b


@pytest.fixture
def client(broker: RunningBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=5) as c:
        yield c


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token_of(name)}"}


def builder(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/roster", headers=auth("alice"))
    assert response.status_code == 200
    (me,) = [p for p in response.json() if p["name"] == "builder"]
    return me  # type: ignore[no-any-return]


@contextmanager
def subscription(url: str, session: str | None, name: str = "builder") -> Iterator[None]:
    """``GET /subscribe?name=<name>&session=<session>`` held open for the block."""
    params = {"name": name} if session is None else {"name": name, "session": session}
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(5, read=60)) as c,
        c.stream("GET", "/subscribe", params=params, headers=auth(name)) as response,
    ):
        assert response.status_code == 200
        yield


def last_told(watcher: Stream) -> str | None:
    """The activity of builder's latest ``presence`` event on ``watcher`` (idle: None)."""
    told = watcher.of("builder")
    return told[-1].get("activity", "idle") if told else None


def lapse_within(broker: RunningBroker, seconds: float) -> None:
    """Wait until the broker's state says something lapses within ``seconds`` (with Redis
    the release travels through it before the mirror knows)."""

    def due() -> bool:
        lapse = broker.broker.store.next_lapse()
        return lapse is not None and lapse <= seconds

    eventually(due, 60, "a lapse within the grace")
