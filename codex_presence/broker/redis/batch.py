"""Scripts batched per event-loop tick: one Redis round trip for every script call that
came in at the same time.

A report costs the broker one script call (``EVALSHA``). Called one by one, each takes a
connection from the pool, writes, waits for its own reply and gives the connection back:
under load, most of a report's cost in Redis mode was that, not the script (issue 26).
:class:`ScriptBatch` queues the calls instead; at the end of the event-loop tick in which
the first was queued, it sends all of them at once as one pipeline (not a transaction:
each script is atomic on its own, as before, and runs in the order queued) on one
connection, and gives each caller its own reply or its own error.

Calls queued while a batch is in flight make the next batch, which goes out at once: a
batch waits for nothing but the end of its tick. (Waiting for the batch in flight instead,
to send bigger ones, made the broker idle for a round trip whenever every request in
flight waited on Redis: fewer reports per second under ``bench/broker.py``, not more.)
Each batch's connection is kept for a later one (taken from the pool and given back cost
~30 us a batch, more than a report's script call): given back when it fails, and closed
when the link reconnects (with every idle one: it may lead to a Redis that went away).
Behind Sentinel, a ``READONLY`` reply fails the batch as a lost connection, as redis-py
does (the primary was demoted: a new connection asks the sentinels).

The commands are packed by hiredis (in C) when it is there (the redis extra installs it):
redis-py's asyncio client packs them in Python, ~8x slower, which was the largest part of
what a call cost the broker once the round trips were shared. The replies are read in bulk
from the connection's hiredis reader (:mod:`~.replies`: one wake-up per read of the
socket, not redis-py's timeout context and checks per reply, nor its task per write),
within one timeout for the whole round trip.

A script Redis does not know (``NOSCRIPT``: Redis restarted, or a new primary after a
failover) is loaded and the calls that met it are sent again, once. Anything that fails
the whole batch (the connection, a timeout) fails each of its calls with that error, as a
failed call of its own would have.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from codex_presence.broker.redis.replies import Replies

try:  # packs a command in C, ~8x faster than redis-py's own packer (in Python)
    from hiredis import pack_command as _pack
except ImportError:  # the redis extra brings hiredis; without it, redis-py's packer
    _pack = None  # type: ignore[assignment]

__all__ = ["ScriptBatch"]

_Call = tuple[AsyncScript, list[Any], list[Any], "asyncio.Future[Any]"]


class ScriptBatch:
    """Script calls on ``client``, sent together when they come together."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._queued: list[_Call] = []
        self._idle: list[Any] = []
        """Connections of batches that were answered, kept for the next ones: taking one
        from the pool and giving it back cost more than a report's script call did."""
        self._sending: set[asyncio.Task[None]] = set()
        """The batches in flight (held here: the event loop keeps only weak references)."""

    async def run(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        """``script`` with ``keys`` and ``args``, in the next batch: its reply, or what
        Redis (or the connection) raised for it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queued:
            loop.call_soon(self._send)
        self._queued.append((script, keys, args, future))
        return await future

    def _send(self) -> None:
        calls = [call for call in self._queued if not call[3].done()]  # not given up
        self._queued = []
        if not calls:
            return
        task = asyncio.get_running_loop().create_task(self._execute(calls))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _execute(self, calls: list[_Call]) -> None:
        try:
            replies = await self._pipeline(calls)
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:
                for script in {id(calls[i][0]): calls[i][0] for i in missing}.values():
                    await self._client.script_load(script.script)
                again = await self._pipeline([calls[i] for i in missing])
                for i, reply in zip(missing, again, strict=True):
                    replies[i] = reply
        except BaseException as exc:  # the connection, a timeout, or the loop stopping
            for *_, future in calls:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else _stopped())
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), reply in zip(calls, replies, strict=True):
            if future.done():  # its caller gave up (cancelled)
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _pipeline(self, calls: list[_Call]) -> list[Any]:
        """One round trip: every call's ``EVALSHA`` written at once, then every reply read
        (a reply that is an error is that call's)."""
        commands = [
            ("EVALSHA", script.sha, len(keys), *keys, *args) for script, keys, args, _ in calls
        ]
        pool = self._client.connection_pool
        if self._idle:
            connection = self._idle.pop()
        else:
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            if _pack is None:
                packed = connection.pack_commands(commands)
            else:
                packed = [b"".join(map(_pack, commands))]
            replies = Replies.of(connection) if connection.is_connected else None
            if replies is None:
                await connection.send_packed_command(packed, check_health=False)
                read: list[Any] = []
                for _ in commands:
                    try:
                        read.append(await connection.read_response())
                    except ResponseError as exc:
                        read.append(exc)
            else:  # one timeout for the whole round trip; every reply one read brought
                try:
                    async with asyncio.timeout(connection.socket_timeout):
                        await replies.send(packed)
                        read = await replies.take(len(commands))
                except TimeoutError:
                    raise RedisTimeoutError("Timeout on the round trip of a batch") from None
                except OSError as exc:
                    raise RedisConnectionError(
                        f"Error on the round trip of a batch: {exc}"
                    ) from exc
                _demoted(connection, read)
        except BaseException:
            await connection.disconnect(nowait=True)  # replies may be left unread: never reuse
            await pool.release(connection)
            raise
        self._idle.append(connection)
        return read

    async def reset(self) -> None:
        """The link reconnects: give the kept connections back to the pool, and close every
        idle one (to a Redis that may have gone away: redis-py's pool does not always see
        that before it serves one, and the first command after a restart would fail)."""
        pool = self._client.connection_pool
        idle, self._idle = self._idle, []
        for connection in idle:
            await pool.release(connection)
        await pool.disconnect(inuse_connections=False)


def _demoted(connection: Any, replies: list[Any]) -> None:
    """Raise ConnectionError, as redis-py's Sentinel connection does for a reply it reads
    itself, when a primary found through Sentinel answered ``READONLY``: it was demoted
    (a failover), and a new connection asks the sentinels again."""
    if any(isinstance(reply, ReadOnlyError) for reply in replies) and getattr(
        getattr(connection, "connection_pool", None), "is_master", False
    ):
        raise RedisConnectionError("The previous master is now a slave")


def _stopped() -> Exception:
    return RedisConnectionError("the broker is stopping")
