"""The ``agent`` object of a report (issue 32, AGENT-RECORD): validated and bounded at the
report endpoint (a precise 400 naming the field), stored whole with the session's record,
kept by a report without it (an idle spell included), cleared by ``null``, and listed in
the member's ``agents`` in ``GET /roster`` and the stream's ``presence`` events.

Every test takes ``store_url``: it runs in memory and on a real redis-server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import session_api
from tests.support.broker_harness import FakeClock
from tests.support.session_api import A, B, auth, builder
from tests.support.shared_brokers import Stream
from tests.support.waiting import eventually

clock, broker, client = session_api.clock, session_api.broker, session_api.client  # fixtures

TUI = {"client": "codex-tui", "version": "0.171.0", "host": "laptop", "project": "api-server"}
WAITS = {"kind": "command", "tool": "shell", "program": "make"}


def post(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/presence/activity", json=body, headers=auth("builder"))


def agents(client: httpx.Client) -> list[dict[str, Any]]:
    return builder(client).get("agents", [])  # type: ignore[no-any-return]


def test_two_sessions_show_as_two_agents_blocked_first(
    client: httpx.Client, clock: FakeClock
) -> None:
    assert post(client, {"state": "working", "session": A, "agent": TUI}).status_code == 204
    clock.advance(1)
    other = {**TUI, "client": "claude", "project": "web", "waits": WAITS}
    assert post(client, {"state": "blocked", "session": B, "agent": other}).status_code == 204
    first, second = agents(client)
    assert {k: first[k] for k in ("session", "state", "client", "project")} == {
        "session": B,
        "state": "blocked",
        "client": "claude",
        "project": "web",
    }
    assert first["waits"] == WAITS and first["background"] == 0
    assert isinstance(first["since"], int)
    assert (second["session"], second["state"], second["client"]) == (A, "working", "codex-tui")
    assert "waits" not in second


def test_a_report_without_agent_keeps_it_and_null_clears_it(client: httpx.Client) -> None:
    assert post(client, {"state": "working", "session": A, "agent": TUI}).status_code == 204
    assert post(client, {"state": "blocked", "session": A}).status_code == 204
    assert agents(client)[0]["project"] == "api-server"
    assert post(client, {"state": "idle", "session": A}).status_code == 204  # a turn ends
    assert agents(client) == []
    assert post(client, {"state": "working", "session": A}).status_code == 204
    assert agents(client)[0]["client"] == "codex-tui"  # kept over the idle spell
    assert post(client, {"state": "working", "session": A, "agent": None}).status_code == 204
    (entry,) = agents(client)
    assert "client" not in entry and entry["state"] == "working"


def test_the_anonymous_session_is_a_session_like_the_others(client: httpx.Client) -> None:
    assert post(client, {"state": "blocked", "agent": {"client": "my-reporter"}}).status_code == 204
    (entry,) = agents(client)
    assert (entry["session"], entry["state"], entry["client"]) == ("", "blocked", "my-reporter")


def test_the_stream_carries_the_agents(client: httpx.Client, broker: Any) -> None:
    watcher = Stream(broker.url, "alice")
    assert post(client, {"state": "blocked", "session": A, "agent": TUI}).status_code == 204

    def told() -> bool:
        events = watcher.of("builder")
        return bool(events) and events[-1].get("agents", [{}])[0].get("project") == "api-server"

    eventually(told, what="a presence event with builder's agent")


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        ("codex", '"agent" must be a JSON object or null'),
        ({"colour": "red"}, "\"agent\" has an unknown key 'colour'"),
        ({"client": "Codex TUI"}, '"agent.client" must be a short token'),
        ({"version": 1}, '"agent.version" must be a string'),
        ({"project": "x" * 65}, '"agent.project" is 65 characters long; at most 64'),
        ({"host": "a\x1b[2Jb"}, '"agent.host" holds a control character'),
        ({"waits": {"kind": "coffee"}}, '"agent.waits.kind" must be one of'),
        ({"waits": {"program": "make"}}, '"agent.waits.kind" is missing'),
        ({"waits": {"kind": "command", "detail": "y" * 121}}, '"agent.waits.detail" is 121'),
        ({"waits": []}, '"agent.waits" must be a JSON object or null'),
    ],
)
def test_a_bad_agent_is_a_precise_400(client: httpx.Client, agent: object, reason: str) -> None:
    answer = post(client, {"state": "working", "session": A, "agent": agent})
    assert answer.status_code == 400
    assert reason in answer.json()["error"]
    assert agents(client) == []  # nothing recorded


def test_an_agent_over_512_bytes_encoded_is_refused(client: httpx.Client) -> None:
    big = {"version": "é" * 64, "host": "é" * 64, "project": "é" * 64, "client": "claude"}
    big["waits"] = {"kind": "command", "tool": "é" * 64, "program": "é" * 64}
    answer = post(client, {"state": "blocked", "session": A, "agent": big})
    assert answer.status_code == 400
    assert "at most 512" in answer.json()["error"]
