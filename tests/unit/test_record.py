"""The session record and the bounded reader of what comes from Redis, pure: a report's
record follows from the one before it; every number is refused out of its range."""

from __future__ import annotations

import json

import orjson
import pytest

from codex_presence._wire import ActivityState, agent_problem
from codex_presence.broker.record import KEEP, Report, SessionRecord
from codex_presence.broker.redis.records import TIME_MAX, Unreadable, number, record

WORKING, BLOCKED, IDLE = ActivityState.WORKING, ActivityState.BLOCKED, ActivityState.IDLE
TUI = {"client": "codex-tui", "project": "api"}


def test_a_record_follows_from_the_report_and_the_one_before() -> None:
    first = SessionRecord.first(Report(WORKING, "s", 2, TUI), 1000)
    assert first == SessionRecord(WORKING, 1000, 2, 1000, TUI)
    same = first.after(Report(WORKING, "s", 3), 2000)  # a heartbeat: since kept, agent kept
    assert same == SessionRecord(WORKING, 1000, 3, 1000, TUI)
    blocked = same.after(Report(BLOCKED, "s", 0, None), 3000)  # agent cleared
    assert blocked == SessionRecord(BLOCKED, 3000, 0, 0, None)
    assert not SessionRecord.first(Report(IDLE), 1).held
    assert SessionRecord.first(Report(IDLE, "s", 0, TUI), 1).shown
    assert Report(IDLE).agent is KEEP


def test_an_entry_spreads_the_agent_in() -> None:
    entry = SessionRecord(BLOCKED, 5, 1, 5, TUI).entry("s")
    assert entry == {"session": "s", "state": "blocked", "since": 5, "background": 1, **TUI}


@pytest.mark.parametrize(
    "value", [1e30, 10**20, "9" * 20, -1, True, "1e9", "", b"abc", "１２", None, 2.0]
)
def test_a_number_no_broker_writes_is_refused(value: object) -> None:
    with pytest.raises(Unreadable):
        number(value, TIME_MAX, "a time")


@pytest.mark.parametrize(("value", "read"), [(0, 0), (b"1764590000000", 1764590000000), ("7", 7)])
def test_a_number_a_broker_writes_is_read(value: object, read: int) -> None:
    assert number(value, TIME_MAX, "a time") == read


def test_a_stored_record_is_read_through_the_same_checks() -> None:
    data = {"state": "working", "since": 5, "background": 0, "agent": TUI}
    assert record(data) == SessionRecord(WORKING, 5, 0, 0, TUI)
    for bad in (
        {**data, "since": 1e30},
        {**data, "state": "napping"},
        {**data, "agent": {"host": "\x1b]52;c;evil\x07"}},
        {**data, "background": 10**6},
        [1, 2],
    ):
        with pytest.raises(Unreadable):
            record(bad)


def test_the_agent_checks_name_the_field() -> None:
    assert agent_problem(None) is None
    assert agent_problem({**TUI, "waits": {"kind": "command", "program": "make"}}) is None
    assert agent_problem({"waits": {"kind": "command", "x": 1}}) == (
        "\"agent.waits\" has an unknown key 'x'"
    )


EVENT_TIMES = (1764590000000, 1764590000001)
EVENT = {
    "seq": 7,
    "kind": "s",
    "name": "bob",
    "session": "s",
    "ttl": 30000,
    "createdAt": EVENT_TIMES[0],
    "lastSeen": EVENT_TIMES[1],
    "record": {"state": "working", "since": 5, "background": 1, "backgroundSince": 5},
}


@pytest.mark.parametrize("field", ["seq", "ttl", "createdAt", "lastSeen"])
@pytest.mark.parametrize("value", [True, -1, 1e30, 10**20, 2.0, None, "x"])
def test_every_number_of_an_event_goes_through_the_bounded_reader(
    field: str, value: object
) -> None:
    """The events a broker writes are read at once (the cost of every report); anything
    else still meets :func:`number`'s refusal, whichever of the numbers it is: dropped
    alone and counted, the mirror unchanged. The channel's path; the link never connects."""
    from codex_presence.broker.redis.link import RedisLink
    from codex_presence.broker.redis.store import RedisStore

    def mirror() -> tuple[RedisStore, RedisLink]:
        link = RedisLink("redis://127.0.0.1:1/0", team="acme")
        return RedisStore(link, names=["bob"]), link

    store, link = mirror()
    link._deliver(orjson.dumps(EVENT))
    assert link.dropped_count == 0
    assert store._activity.record("bob", "s") == SessionRecord(WORKING, 5, 1, 5, None)
    assert (store._created["bob"], store._seen["bob"]) == EVENT_TIMES
    store, link = mirror()
    link._deliver(json.dumps({**EVENT, field: value}).encode())  # 10**20 too
    assert link.dropped_count == 1
    assert store._activity.record("bob", "s") is None and "bob" not in store._seen


@pytest.mark.parametrize("field", ["since", "background"])
@pytest.mark.parametrize("value", [True, -1, 1e30, 10**20, 2.0, None])
def test_every_number_of_a_record_goes_through_the_bounded_reader(
    field: str, value: object
) -> None:
    data = {"state": "blocked", "since": 5, "background": 2, "backgroundSince": 4}
    assert record(data) == SessionRecord(BLOCKED, 5, 2, 4, None)
    assert record({**data, "since": "5"}).since == 5  # the digits Redis returns
    with pytest.raises(Unreadable):
        record({**data, field: value})
