"""What ten thousand streams on one broker rest on (issue 37), decided by structure, not by
time: keep-alives wake one lane of streams at a time, a batch wakes the streams that carry
changes and no quiet one, and the roster kept between changes follows every write and
every lapse (the in-memory store's version)."""

from __future__ import annotations

from collections import Counter

import anyio
import orjson

from codex_presence._wire import ActivityState
from codex_presence.broker.app import FIRST_PIECE, _Subscription
from codex_presence.broker.record import Report
from codex_presence.broker.state import KEEPALIVE_LANES, Broker, pieces
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


def test_pieces_join_to_the_whole_and_none_is_larger_than_asked() -> None:
    parts = (b"retry: 2000\n\n", b"", b"event: roster\ndata: ", bytes(range(256)) * 40, b"}\n\n")
    for size in (1, 7, 64, 4096, 100_000):
        written = list(pieces(parts, size))
        assert b"".join(written) == b"".join(parts)
        assert all(0 < len(piece) <= size for piece in written), size
    assert list(pieces((b"ab", b"cd"), 4)) == [b"abcd"]  # small parts together


def test_a_page_streams_first_roster_is_written_in_pieces_of_the_kept_roster() -> None:
    """At 10,000 members the first roster is 1.4 MB: written whole, each page stream held
    a copy of it (and the server's buffer what its client had not read), kept by the
    allocator after. Written in pieces (the server waits for its buffer to drain before
    each), the stream holds one piece and the roster is the broker's one copy."""
    team = make_team("alice", *(f"member-{i:05d}" for i in range(2000)))
    broker = Broker(team=team)
    bodies: list[bytes] = []
    whole = b""

    async def send(message: dict[str, object]) -> None:
        nonlocal whole
        if message["type"] == "http.response.body":
            if not bodies:  # what the stream, attached now, has to write first
                whole = broker.roster_event("alice", before=b"retry: 2000\n\n")
            bodies.append(message["body"])  # type: ignore[arg-type]
            if sum(map(len, bodies)) >= len(whole):
                broker.close()  # the first roster written: the stream ends

    async def receive() -> dict[str, object]:
        await anyio.Event().wait()  # the client never leaves: the broker ends the stream
        raise AssertionError("unreachable")

    stream = _Subscription(broker, "alice")
    anyio.run(stream, {"type": "http"}, receive, send)
    first = bodies[: len(bodies) - 1]  # the last is the end of the stream
    assert len(whole) > 2 * FIRST_PIECE  # the roster is larger than a piece
    assert b"".join(first) == whole
    assert len(first) > 2
    assert max(map(len, first)) <= FIRST_PIECE
