"""Script calls batched per event-loop tick (issue 26, ``broker/redis/batch.py``), against a
real redis-server: the calls of one tick share one connection and one round trip, and each
caller still gets its own reply or its own error, as a call of its own would have. Replies
and the channel's events are read in bulk from hiredis (``broker/redis/replies.py``), or
through redis-py where that cannot be: both ways give the same."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError

from codex_presence.broker.redis import batch as redis_batch
from codex_presence.broker.redis import replies as redis_replies
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.replies import Replies
from tests.support.waiting import WAIT

_ECHO = "return {ARGV[1], ARGV[2]}"
_FAILS_ON_BAD = "if ARGV[2] == 'bad' then return redis.error_reply('bad input') end return ARGV[2]"


async def _all_at_once(link: RedisLink, script: Any, args: list[Any]) -> list[Any]:
    """Each of ``args`` in a call of its own, all started in one tick: replies or errors."""
    results: list[Any] = [None] * len(args)

    async def one(i: int) -> None:
        try:
            results[i] = await link.run_script(script, [args[i]])
        except Exception as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(len(args)):
            tg.start_soon(one, i)
    return results


def _count_connections_taken(link: RedisLink) -> list[int]:
    pool = link.client.connection_pool
    taken = [0]
    get_connection = pool.get_connection

    async def counting(*args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return await get_connection(*args, **kwargs)

    pool.get_connection = counting  # type: ignore[method-assign]
    return taken


@pytest.mark.anyio
@pytest.mark.parametrize("packer", ["hiredis", "redis-py"])
async def test_the_calls_of_one_tick_take_one_round_trip_and_each_gets_its_reply(
    redis_url: str, packer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: each call took a connection of its own (16 at most: the rest waited)."""
    if packer == "redis-py":  # without hiredis (redis installed without the extra)
        monkeypatch.setattr(redis_batch, "_pack", None)
        monkeypatch.setattr(redis_replies, "_PARSER", None)
    link = RedisLink(redis_url, team="acme")
    echo = link.script(_ECHO)
    taken = _count_connections_taken(link)
    trips = _count_round_trips(link)
    try:
        await link.run_script(echo, ["loads it"])  # NOSCRIPT, SCRIPT LOAD, again
        taken[0] = trips[0] = 0
        replies = await _all_at_once(link, echo, [str(i) for i in range(100)])
        assert trips[0] == 1
        assert taken[0] == 0  # the last batch's connection, kept
        assert replies == [[link.key("").encode(), str(i).encode()] for i in range(100)]
    finally:
        await link.client.aclose()


def _count_round_trips(link: RedisLink) -> list[int]:
    batch = link._batch
    trips = [0]
    pipeline = batch._pipeline

    async def counting(calls: Any) -> Any:
        trips[0] += 1
        return await pipeline(calls)

    batch._pipeline = counting  # type: ignore[method-assign]
    return trips


@pytest.mark.anyio
@pytest.mark.parametrize("reader", ["hiredis", "redis-py"])
async def test_an_error_goes_to_its_own_caller_only(
    redis_url: str, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if reader == "redis-py":
        monkeypatch.setattr(redis_replies, "_PARSER", None)
    link = RedisLink(redis_url, team="acme")
    script = link.script(_FAILS_ON_BAD)
    try:
        replies = await _all_at_once(link, script, ["a", "bad", "c"])
        assert replies[0] == b"a" and replies[2] == b"c"
        assert isinstance(replies[1], ResponseError) and "bad input" in str(replies[1])
    finally:
        await link.client.aclose()


@pytest.mark.anyio
async def test_scripts_redis_forgot_are_loaded_again(redis_url: str) -> None:
    """After a restart or a failover, Redis knows none of the scripts (NOSCRIPT)."""
    link = RedisLink(redis_url, team="acme")
    echo, other = link.script(_ECHO), link.script(_FAILS_ON_BAD)
    try:
        assert (await _all_at_once(link, echo, ["x"]))[0][1] == b"x"
        await link.client.script_flush()
        replies = await _all_at_once(link, echo, ["1", "2"])
        assert [r[1] for r in replies] == [b"1", b"2"]
        assert await _all_at_once(link, other, ["y"]) == [b"y"]
    finally:
        await link.client.aclose()


@pytest.mark.anyio
async def test_a_lost_connection_fails_every_call_of_the_batch() -> None:
    with anyio.fail_after(WAIT):
        link = RedisLink("redis://127.0.0.1:1/0", team="acme", timeout=1)
        replies = await _all_at_once(link, link.script(_ECHO), ["1", "2", "3"])
        assert all(isinstance(r, RedisConnectionError) for r in replies)
        await link.client.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", [2, 3])
async def test_replies_and_events_are_read_in_bulk_with_hiredis(
    redis_url: str, protocol: int
) -> None:
    """The connections the link makes are ones :mod:`~codex_presence.broker.redis.replies`
    reads (a redis-py whose internals moved would quietly cost every report redis-py's way
    again), in either protocol (redis-py speaks RESP3 unless told)."""
    link = RedisLink(f"{redis_url}?protocol={protocol}", team="acme")
    try:
        await link.run_script(link.script(_ECHO), ["x"])
        connection = await link.client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
        assert Replies.of(connection) is not None
        await link.client.connection_pool.release(connection)
        async with link.client.pubsub() as pubsub:
            await pubsub.subscribe(link.channel)
            assert Replies.of(pubsub.connection) is not None
    finally:
        await link.client.aclose()


class _Heard:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.synced = anyio.Event()

    async def resync(self) -> None:
        self.synced.set()

    async def keep(self) -> None:
        await anyio.sleep_forever()

    def on_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def on_down(self, reason: str) -> None:
        pass

    def on_back(self) -> None:
        pass

    async def leave(self) -> None:
        pass


_PUBLISH = "redis.call('PUBLISH', KEYS[1], ARGV[2]) return 1"


@pytest.mark.anyio
@pytest.mark.parametrize("reader", ["hiredis", "redis-py"])
@pytest.mark.parametrize("protocol", [2, 3])
async def test_every_event_on_the_channel_reaches_the_listeners_in_order(
    redis_url: str, reader: str, protocol: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many at once (several to one read of the socket), and what is not an event skipped."""
    if reader == "redis-py":
        monkeypatch.setattr(redis_replies, "_PARSER", None)
    link = RedisLink(f"{redis_url}?protocol={protocol}", team="acme")
    heard = _Heard()
    link.add_listener(heard)
    sent = [{"seq": i, "kind": "t", "x": "x" * (i % 50)} for i in range(1, 501)]
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            await tg.start(link.run)
            await heard.synced.wait()
            publish = link.script(_PUBLISH)
            await link.run_script(publish, ["not json"])
            await link.run_script(publish, ["[1]"])
            await link.run_script(publish, ['{"seq": 1}'])  # no kind
            await _all_at_once(link, publish, [orjson.dumps(event) for event in sent])
            while len(heard.events) < len(sent):
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert heard.events == sent


class _Pool:
    is_master = True


class _Connection:
    connection_pool = _Pool()


def test_a_demoted_primary_behind_sentinel_fails_the_batch_as_a_lost_connection() -> None:
    """As redis-py's Sentinel connection does for a reply it reads itself: the link then
    finds the new primary (a plain Redis's READONLY stays that call's refusal)."""
    replies = [b"ok", ReadOnlyError("You can't write against a read only replica.")]
    with pytest.raises(RedisConnectionError, match="now a slave"):
        redis_batch._demoted(_Connection(), replies)
    redis_batch._demoted(object(), replies)  # not behind Sentinel: each its own reply
    redis_batch._demoted(_Connection(), [b"ok", ResponseError("other")])
