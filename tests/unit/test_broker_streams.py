"""What ten thousand streams on one broker rest on (issue 37), decided by structure, not by
time: keep-alives wake one lane of streams at a time, a batch wakes the streams that carry
changes and no quiet one, and the roster kept between changes follows every write and
every lapse (the in-memory store's version)."""

from __future__ import annotations

from collections import Counter

import anyio
import orjson

from codex_presence._wire import ActivityState
from codex_presence.broker.record import Report
from codex_presence.broker.state import KEEPALIVE_LANES, Broker
from codex_presence.broker.team import Member
from tests.support.broker_harness import FakeClock, make_team

TEAM = make_team("alice", "builder", "scout")


def _member(name: str) -> Member:
    member = TEAM.member(name)
    assert member is not None
    return member


def test_keepalives_wake_one_lane_of_streams_at_a_time() -> None:
    broker = Broker(team=TEAM)
    lanes = [broker.take_lane() for _ in range(3 * KEEPALIVE_LANES)]
    assert Counter(lanes) == dict.fromkeys(range(KEEPALIVE_LANES), 3)  # dealt in turn
    waiting = {
        lane: (broker.waiter(lane), broker.waiter(lane, quiet=True))
        for lane in range(KEEPALIVE_LANES)
    }
    for tick in range(KEEPALIVE_LANES):
        assert broker.keepalive_tick() == tick
        woken = [lane for lane, events in waiting.items() if any(e.is_set() for e in events)]
        assert woken == list(range(tick + 1))  # one lane more per tick, never all at once
    assert broker.keepalive_tick() == 0  # and round again
    assert broker.waiter(0).is_set() is False  # a fresh event for the lane's next wait


def test_a_batch_wakes_the_streams_that_carry_changes_and_no_quiet_one() -> None:
    broker = Broker(team=TEAM)
    carrying = [broker.waiter(lane) for lane in range(KEEPALIVE_LANES)]
    quiet = [broker.waiter(lane, quiet=True) for lane in range(KEEPALIVE_LANES)]
    anyio.run(broker.report, _member("builder"), Report(ActivityState.WORKING))
    assert broker.publish()
    assert all(event.is_set() for event in carrying)
    assert not any(event.is_set() for event in quiet)
    broker.close()  # the end, though, is every stream's
    assert all(event.is_set() for event in quiet)


def test_quiet_streams_are_counted_but_do_not_slow_the_fanout() -> None:
    broker = Broker(team=TEAM)
    broker.attach("alice", "s1", quiet=True)
    broker.attach("scout")
    assert (broker.streams, broker.carrying) == (2, 1)
    assert broker.presence("alice")["connected"] == 1
    broker.detach("alice", "s1", quiet=True)
    assert (broker.streams, broker.carrying) == (1, 1)


def _roster(broker: Broker) -> dict[str, dict[str, object]]:
    return {p["name"]: p for p in orjson.loads(broker.roster_json())}


def test_the_kept_roster_follows_every_write_and_every_lapse() -> None:
    clock, wall = FakeClock(), FakeClock(1_800_000_000.0)
    broker = Broker(team=TEAM, clock=clock, wall_clock=wall, activity_ttl=30)
    first = broker.roster_json()
    assert broker.roster_json() is first  # kept: nothing changed
    anyio.run(broker.report, _member("builder"), Report(ActivityState.WORKING))
    assert _roster(broker)["builder"]["activity"] == "working"
    wall.advance(5)
    anyio.run(broker.report, _member("builder"), Report(ActivityState.WORKING))  # heartbeat
    assert _roster(broker)["builder"]["lastSeen"] == 1_800_000_005_000  # lastSeen alone
    broker.attach("scout")
    assert _roster(broker)["scout"]["connected"] == 1
    broker.detach("scout")
    assert _roster(broker)["scout"]["connected"] == 0
    kept = broker.roster_json()
    clock.advance(31)  # nobody reads, nothing is published: the lapse is the store's
    assert "activity" not in _roster(broker)["builder"]
    assert broker.roster_json() is not kept


def test_a_light_stream_never_carries_the_roster() -> None:
    """A light stream (the page's and ``roster --watch``'s) carries the changes and the
    ``stale`` events as the full one does, but where the full one sends the whole roster
    (first, after a stale spell, too far behind) a ``changed`` event: the team, the member
    and the privilege buckets, no members (they are read with ``GET /roster``)."""
    broker = Broker(team=TEAM)
    first = broker.changed_event("alice")
    assert first.startswith(b"event: changed\ndata: ")
    assert orjson.loads(first.split(b"data: ", 1)[1]) == {
        "version": 0,
        "team": "acme",
        "you": "alice",
        "privileges": {"alice": "admin", "builder": None, "scout": "operator"},
    }
    version = broker.version
    for state in (ActivityState.WORKING, ActivityState.BLOCKED):
        anyio.run(broker.report, _member("builder"), Report(state))
        assert broker.publish()
    light, now = broker.since(version, you="alice", light=True)
    assert light == broker.since(version, you="alice")[0]  # the changes, as they are
    assert light.count(b"event: presence") == 2
    broker.store_down("redis away")
    light, after = broker.since(now, you="alice", light=True)
    assert light.startswith(b"event: stale\ndata: ")
    broker.store_back()  # no log entry: the full stream's whole roster, here "changed"
    light, _ = broker.since(after, you="alice", light=True)
    full, _ = broker.since(after, you="alice")
    assert light.startswith(b"event: changed\ndata: ") and b'"members"' not in light
    assert full.startswith(b"event: roster\ndata: ") and b'"members"' in full
