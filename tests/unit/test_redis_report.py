"""A report in Redis mode, the broker's side (issue 32: what a report costs): the script's
arguments are only what the report says beyond its state (the broker's settings are in
the script's text), and a reply whose echo came first is not decoded again. Pure: the
link never connects; its script call is given by hand and the coroutine driven without
an event loop (nothing in it waits)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import orjson
import pytest

from codex_presence._wire import ActivityState
from codex_presence.broker.record import Report
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.scripts import report_script
from codex_presence.broker.redis.store import RedisStore

WORKING, BLOCKED = ActivityState.WORKING, ActivityState.BLOCKED


def finished(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """What ``coroutine`` returns, run to its end at once (it must not wait)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the report waited on something")


def event(seq: int, state: str) -> bytes:
    return orjson.dumps(
        {"seq": seq, "kind": "s", "name": "bob", "session": "s1", "ttl": 30000,
         "createdAt": 1000, "lastSeen": 2000 + seq, "record": {"state": state, "since": seq}}
    )  # fmt: skip


class Script:
    """The report script's side: each call's arguments, and the reply given."""

    def __init__(self) -> None:
        self.args: list[list[Any]] = []
        self.reply: Any = None

    async def call(self, script: Any, args: list[Any], *, doing: str) -> Any:
        self.args.append(args)
        return self.reply


def store_with_script() -> tuple[RedisStore, RedisLink, Script]:
    link = RedisLink("redis://127.0.0.1:1/0", team="acme")
    store = RedisStore(link, names=["bob"])
    script = Script()
    link.call = script.call  # type: ignore[method-assign]
    return store, link, script


def test_a_report_sends_what_it_says_beyond_its_state_and_no_more() -> None:
    store, _, script = store_with_script()
    agent = {"client": "codex", "project": "api"}
    for seq, report in enumerate(
        [Report(WORKING, "s1"), Report(WORKING, "s1", 2), Report(BLOCKED, "s1", 0, agent)],
        start=1,
    ):
        script.reply = [event(seq, report.state.value), [], seq]
        finished(store.report("bob", report, 1764590000000))
    assert script.args == [
        ["bob", "s1", "working", 1764590000000],  # (the link puts the prefix first)
        ["bob", "s1", "working", 1764590000000, 2],
        ["bob", "s1", "blocked", 1764590000000, 0, orjson.dumps(agent)],
    ]


def test_a_reply_whose_echo_came_first_is_not_decoded() -> None:
    """The echo on the subscription usually comes before the script's reply: applied
    from it, the reply's bytes are never read (garbage here, which would raise)."""
    store, link, script = store_with_script()
    link._deliver(event(7, "blocked"))
    assert store.activity("bob") is BLOCKED
    script.reply = [b"not json at all", [], 7]
    assert finished(store.report("bob", Report(BLOCKED, "s1"), 1764590000000)) is False
    assert link.dropped_count == 0
    # A reply ahead of its echo is read, and its echo then is not.
    script.reply = [event(8, "working"), [], 8]
    assert finished(store.report("bob", Report(WORKING, "s1"), 1764590000000)) is True
    assert store.activity("bob") is WORKING
    assert link._echoes == {event(8, "working"): 8}
    link._deliver(event(8, "working"))  # its echo, byte for byte: taken out, not decoded
    assert not link._echoes and store.activity("bob") is WORKING


@pytest.mark.parametrize(("ttl_ms", "most"), [(0, 16), (2**31, 16), (30000, -1)])
def test_a_report_script_for_settings_no_broker_has_is_refused(ttl_ms: int, most: int) -> None:
    with pytest.raises(ValueError, match="report script"):
        report_script(ttl_ms, most)
    assert "local px, at, most = 30000, tonumber(ARGV[5]), 16" in report_script(30000, 16)
