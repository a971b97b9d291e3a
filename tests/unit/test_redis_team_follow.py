"""The Redis store following its team file (issue 33): a member added is read from Redis
by a snapshot whose marker orders it among the channel's events, and what the channel
said of that member meanwhile is held back, then applied in the channel's order,
whichever of the snapshot's reply and its marker came first. Pure: the link never
connects; the events and the snapshot's reply are given by hand, in each order (the
real brokers and redis-server: ``tests/test_redis.py``, ``tests/test_team_command.py``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from codex_presence._wire import ActivityState
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.store import RedisStore, _Load
from codex_presence.broker.team import Member, Team, hash_token


def team(*names: str) -> Team:
    return Team("acme", tuple(Member(n, None, hash_token(f"cp_token-of-{n}")) for n in names))


class Told:
    """The broker's side of the store: the members it was told changed."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def changed(self, name: str) -> None:
        self.names.append(name)

    def store_down(self, reason: str) -> None:
        raise AssertionError(reason)

    def store_back(self) -> None:
        pass


def record(state: str, since: int) -> dict[str, Any]:
    return {"state": state, "since": since, "background": 0, "backgroundSince": 0, "agent": None}


def event(seq: int, name: str, state: str, since: int) -> bytes:
    return orjson.dumps(
        {"seq": seq, "kind": "s", "name": name, "session": "", "ttl": 30000,
         "createdAt": 1000, "lastSeen": since, "record": record(state, since)}
    )  # fmt: skip


def store_of(*names: str) -> tuple[RedisStore, Told]:
    store = RedisStore(RedisLink("redis://127.0.0.1:1/0", team="acme"), names=names)
    told = Told()
    store._listener = told
    return store, told


@pytest.mark.parametrize("reply_first", [True, False])
def test_a_member_added_is_read_in_the_channels_order(reply_first: bool) -> None:
    """Before: a broker sharing Redis refused a team file that added a member. The
    snapshot of carol is taken at seq 7 (working since 1500); the channel said, before
    it, blocked since 1400 (seq 5: in the snapshot, stale) and, after it, blocked since
    1900 (seq 9): carol ends blocked since 1900, never showing the stale event."""
    store, told = store_of("alice")
    link = store.link
    store.replace_team(team("alice", "carol"))
    assert store.activity("carol") is ActivityState.IDLE  # offline, shown at once
    load = store._load = _Load(["carol"], "m1")  # what _follow_team sent
    marker = orjson.dumps({"seq": 0, "kind": "l", "broker": link.broker_id, "load": "m1"})
    held = [b"", orjson.dumps(record("working", 1500)), 30000]
    reply = [b"7", [], [[b"1000", b"1500", held]], []]
    if reply_first:
        load.reply = reply
        store._loaded()
        assert store.activity("carol") is ActivityState.IDLE  # its marker not yet come
    link._deliver(event(5, "carol", "blocked", 1400))
    assert store.activity("carol") is ActivityState.IDLE  # held back
    link._deliver(marker)
    link._deliver(event(9, "carol", "blocked", 1900))
    if not reply_first:
        assert store.activity("carol") is ActivityState.IDLE  # both held back
        load.reply = reply
        store._loaded()
    entry = store.activity_entry("carol")
    assert (entry.state, entry.since) == (ActivityState.BLOCKED, 1900)
    assert store._load is None and "carol" in told.names
    link._deliver(event(11, "carol", "working", 2000))  # then as any member
    assert store.activity("carol") is ActivityState.WORKING


def test_a_member_removed_leaves_the_mirror_and_its_events_are_ignored() -> None:
    store, _ = store_of("alice", "bob")
    link = store.link
    store._synced_seq = store._sessions.synced_seq = 1
    link._deliver(event(2, "bob", "working", 1500))
    assert store.activity("bob") is ActivityState.WORKING
    store.replace_team(team("alice"))
    assert store.activity("bob") is ActivityState.IDLE
    link._deliver(event(3, "bob", "blocked", 1600))
    assert store.activity("bob") is ActivityState.IDLE
    assert store._load is None and not store._loading  # nothing to read for a removal
