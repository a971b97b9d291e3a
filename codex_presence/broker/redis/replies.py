"""Replies read in bulk from a redis-py connection: as many as one read of the socket
brought, parsed in C by the connection's own hiredis reader, without redis-py's
per-reply machinery (and commands written without its per-write task).

redis-py's asyncio connection reads one reply per call, each under a timeout context of
its own, and its pub/sub client builds a message dict for each; at a few thousand reports
a second (a script reply each, and each report's event coming back on the subscription)
that machinery cost the broker more than parsing the replies did (issue 26).
:class:`Replies` takes the connection's hiredis reader and stream as they are (what they
already hold included, the subscription's confirmation and anything after it) and hands
out every reply that one read of the socket completed: one wake-up of the event loop per
read, not one per reply.

That reaches into redis-py's connection (its parser's reader and its stream), which is
no public API: :meth:`Replies.of` says None when the connection is not the one expected
(no hiredis, another version's internals), and the callers then read as redis-py does.
Error replies come as the exception objects redis-py's parser makes
(:class:`~redis.exceptions.ResponseError`, ``NoScriptError``), in their place among the
replies, never raised. Either protocol reads alike (redis-py speaks RESP3 by default): a
pub/sub message is a list (RESP2) or a push, a list too (RESP3); :meth:`Replies.take`,
which reads the replies of commands, skips pushes, as redis-py does.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterator
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

try:
    from redis._parsers import hiredis as _hiredis_parser
except ImportError:  # another redis-py: read as redis-py does
    _hiredis_parser = None  # type: ignore[assignment]

_PARSER: Any = getattr(_hiredis_parser, "_AsyncHiredisParser", None)
NOT_ENOUGH_DATA: Any = getattr(_hiredis_parser, "NOT_ENOUGH_DATA", None)

__all__ = ["Replies"]

_READ_SIZE = 65536


def _push_type() -> Any:
    """What hiredis makes of a RESP3 push (a list subclass), if hiredis is there."""
    try:
        return importlib.import_module("hiredis").PushNotification
    except (ImportError, AttributeError):
        return None


_PUSH = _push_type()


class Replies:
    """The replies coming on one connection, read straight from its hiredis reader."""

    __slots__ = ("_feed", "_gets", "_read", "_writer")

    def __init__(
        self, reader: Any, stream: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self._gets = reader.gets
        self._feed = reader.feed
        self._read = stream.read
        self._writer = writer

    @classmethod
    def of(cls, connection: Any) -> Replies | None:
        """The replies of a connected redis-py asyncio ``connection``, or None when it is
        not one this module can read (the caller reads through redis-py)."""
        parser = getattr(connection, "_parser", None)
        if _PARSER is None or NOT_ENOUGH_DATA is None or type(parser) is not _PARSER:
            return None
        reader = getattr(parser, "_reader", None)
        stream = getattr(connection, "_reader", None)
        writer = getattr(connection, "_writer", None)
        if (
            reader is None
            or not isinstance(stream, asyncio.StreamReader)
            or not isinstance(writer, asyncio.StreamWriter)
        ):
            return None
        return cls(reader, stream, writer)

    async def send(self, packed: list[bytes]) -> None:
        """Write commands (packed), under the caller's timeout: redis-py's own write wraps
        each in ``asyncio.wait_for``, a task of its own per write."""
        self._writer.writelines(packed)
        await self._writer.drain()

    def ready(self) -> Iterator[Any]:
        """Every reply already read in full (none: :meth:`fill` first)."""
        gets = self._gets
        while (reply := gets()) is not NOT_ENOUGH_DATA:
            yield reply

    async def fill(self) -> None:
        """Read what the socket has (waiting for it); ConnectionError once it closed."""
        data = await self._read(_READ_SIZE)
        if not data:
            raise RedisConnectionError("Connection closed by server.")
        self._feed(data)

    async def take(self, count: int) -> list[Any]:
        """The next ``count`` replies (waiting for them)."""
        replies: list[Any] = []
        gets = self._gets
        while True:
            while (reply := gets()) is not NOT_ENOUGH_DATA:
                if _PUSH and type(reply) is _PUSH:
                    continue
                replies.append(reply)
                if len(replies) == count:
                    return replies
            await self.fill()
