"""Brokers of one team sharing a real redis-server, and what the tests ask them: the team
(:data:`TEAM`, and its file for the real command: :func:`team_file`), ``GET /roster``, a
report, and an SSE stream read in a thread (:class:`Stream`)::

    with redis_server() as server, brokers(server.url) as (a, b):
        on_b = Stream(b.url, "alice")
        assert report(a.url, "builder", "working").status_code == 204
        eventually(lambda: on_b.of("builder"))
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from httpx_sse import EventSource

from codex_presence.broker.team_file import render_team
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.waiting import WAIT, eventually

TEAM = make_team("alice", "builder", "scout")


def auth(name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token_of(name)}"}


def roster(url: str) -> dict[str, dict[str, Any]]:
    response = httpx.get(url + "/roster", headers=auth("scout"), timeout=5)
    assert response.status_code == 200, response.text
    return {p["name"]: p for p in response.json()}


def report(url: str, name: str, state: str) -> httpx.Response:
    return httpx.post(
        url + "/presence/activity", json={"state": state}, headers=auth(name), timeout=5
    )


class Stream:
    """An SSE subscription read in a thread: every event it got, in order."""

    def __init__(self, url: str, name: str, headers: dict[str, str] | None = None) -> None:
        self.events: list[tuple[str, Any]] = []
        self.status = 0
        self.ended = threading.Event()
        self._opened = threading.Event()
        args = (url, name, headers if headers is not None else auth(name))
        threading.Thread(target=self._read, args=args, daemon=True).start()
        assert self._opened.wait(WAIT), "the stream did not open"
        eventually(lambda: self.kinds().count("roster") >= 1 or self.ended.is_set())

    def _read(self, url: str, name: str, headers: dict[str, str]) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(WAIT)) as client,
                client.stream("GET", f"{url}/subscribe?name={name}", headers=headers) as r,
            ):
                self.status = r.status_code
                self._opened.set()
                for event in EventSource(r).iter_sse():
                    if event.data:  # not the opening "retry:" field
                        self.events.append((event.event, orjson.loads(event.data)))
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()
            self.ended.set()

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        """The ``presence`` events about ``name``."""
        return [data for kind, data in self.events if kind == "presence" and data["name"] == name]


@contextmanager
def brokers(url: str, count: int = 2, **kwargs: Any) -> Iterator[list[RunningBroker]]:
    """``count`` brokers of TEAM sharing the Redis at ``url``."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(running_broker(team=TEAM, redis=url, **kwargs))
            for _ in range(count)
        ]


def team_file(tmp_path: Path) -> str:
    """TEAM's file, for ``broker_process("--team", ...)``."""
    path = tmp_path / "team.toml"
    path.write_text(
        render_team("acme", [(n, None, token_of(n)) for n in ("alice", "builder", "scout")])
    )
    return str(path)
