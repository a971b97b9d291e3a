"""The roster stream's folding of what a broker sends into its view: whatever a peer sends,
the view holds what is readable and the process goes on."""

from __future__ import annotations

import httpx
import orjson
from httpx_sse import ServerSentEvent

from codex_presence.client.stream import RosterStream


def test_a_roster_with_members_a_broker_never_sends_keeps_the_readable_ones() -> None:
    """A member object without a name, or with one that is no string, raised KeyError or
    TypeError out of the stream's loop (the watcher's process with it); skipped now."""
    stream = RosterStream(httpx.AsyncClient(), "alice", on_roster=lambda view: None)
    members = [{"name": "alice", "connected": 1}, {}, {"name": ["x"]}, {"name": None}, "bob"]
    data = {"team": "t", "members": members, "privileges": {}}
    assert stream._apply(ServerSentEvent(event="roster", data=orjson.dumps(data).decode()))
    assert list(stream.view.members) == ["alice"]
    assert stream.view.team == "t"
