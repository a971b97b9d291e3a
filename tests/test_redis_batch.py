"""Script calls batched per event-loop tick (issue 26, ``broker/redis_batch.py``), against a
real redis-server: the calls of one tick share one connection and one round trip, and each
caller still gets its own reply or its own error, as a call of its own would have."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from codex_presence.broker import redis_batch
from codex_presence.broker.redis_link import RedisLink

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
async def test_the_calls_of_one_tick_take_one_connection_and_each_gets_its_reply(
    redis_url: str, packer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: each call took a connection of its own (16 at most: the rest waited)."""
    if packer == "redis-py":  # without hiredis (redis installed without the extra)
        monkeypatch.setattr(redis_batch, "_pack", None)
    link = RedisLink(redis_url, team="acme")
    echo = link.script(_ECHO)
    taken = _count_connections_taken(link)
    try:
        await link.run_script(echo, ["loads it"])  # NOSCRIPT, SCRIPT LOAD, again: 3
        taken[0] = 0
        replies = await _all_at_once(link, echo, [str(i) for i in range(100)])
        assert taken[0] == 1
        assert replies == [[link.key("").encode(), str(i).encode()] for i in range(100)]
    finally:
        await link.client.aclose()


@pytest.mark.anyio
async def test_an_error_goes_to_its_own_caller_only(redis_url: str) -> None:
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
    with anyio.fail_after(10):
        link = RedisLink("redis://127.0.0.1:1/0", team="acme", timeout=1)
        replies = await _all_at_once(link, link.script(_ECHO), ["1", "2", "3"])
        assert all(isinstance(r, RedisConnectionError) for r in replies)
        await link.client.aclose()
