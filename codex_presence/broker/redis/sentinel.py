"""Redis behind Sentinel: the ``redis+sentinel://`` address and the client it makes.

With Sentinel, Redis is a primary, its replicas and (at least three) sentinels that watch
them and promote a replica when the primary dies. The broker is given the sentinels, never
the primary; redis-py's :class:`~redis.asyncio.sentinel.Sentinel` asks them where the
primary is each time a connection opens, so a connection opened after a failover goes to
the new primary. Everything else a failover needs (commands retried there, the
subscription made again, the state read again in full) is :class:`~.link.RedisLink`'s
loop, which handles a failover as the outage it is: this module only parses the address
and builds the client.

The address::

    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB][?OPTIONS]
    rediss+sentinel://...   (TLS to the sentinels and to Redis alike)

``SERVICE`` is the primary's name as the sentinels know it (``sentinel monitor SERVICE
...``); a sentinel's port defaults to 26379. ``USER``/``PASSWORD`` are Redis's (the
primary's and the replicas' ``requirepass``/ACL user), as in a ``redis://`` URL. Sentinels
that want a password of their own get it from the options ``sentinel_password`` (and
``sentinel_username``); every other option (``ssl_ca_certs``, ``ssl_cert_reqs``, ...) is
redis-py's, as in a ``redis://`` URL, and applies to both. The logs show the address
through :func:`~.link.redacted`, which hides the password and every option whose
name says ``pass``, ``secret`` or ``token``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

__all__ = ["SENTINEL_SCHEMES", "SentinelAddress", "parse_sentinel_url", "sentinel_client"]

SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379
_SENTINEL_ONLY = ("sentinel_password", "sentinel_username")


@dataclass(frozen=True)
class SentinelAddress:
    """A parsed ``redis+sentinel://`` URL."""

    sentinels: list[tuple[str, int]]
    service: str
    tls: bool
    redis_options: dict[str, Any] = field(default_factory=dict)
    """Connection options for the primary (password, db, TLS options)."""
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    """Connection options for the sentinels (their password, TLS options)."""


def _host_port(text: str) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:PORT
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError(f"a sentinel without a host: {text!r}")
    if not port:
        return host, DEFAULT_SENTINEL_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"a sentinel's port is not a port: {text!r}")
    return host, int(port)


def parse_sentinel_url(url: str) -> SentinelAddress:
    """The sentinels, the service and the options of ``url``; :class:`ValueError` saying
    what is wrong (never quoting the password)."""
    parts = urlsplit(url)
    if parts.scheme not in SENTINEL_SCHEMES:
        raise ValueError(f"not a Sentinel URL ({' or '.join(SENTINEL_SCHEMES)})")
    tls = parts.scheme == "rediss+sentinel"
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not hosts:
        raise ValueError("no sentinel in the URL (HOST:PORT[,HOST:PORT...])")
    sentinels = [_host_port(host) for host in hosts.split(",")]
    service, _, db = parts.path.removeprefix("/").partition("/")
    service = unquote(service)
    if not service:
        raise ValueError("no service name in the URL (/SERVICE: the primary's name in Sentinel)")
    if db and not db.isdigit():
        raise ValueError(f"the database is not a number: {db!r}")
    query = [p for p in parts.query.split("&") if p]
    mine = [p for p in query if p.partition("=")[0] not in _SENTINEL_ONLY]
    theirs = [p for p in query if p.partition("=")[0] in _SENTINEL_ONLY]
    # redis-py parses the rest as it parses a redis:// URL (types, TLS options)
    plain = urlunsplit(
        (
            "rediss" if tls else "redis",
            f"{userinfo}{at}localhost",
            f"/{db or 0}",
            "&".join(mine),
            "",
        )
    )
    options: dict[str, Any] = dict(parse_url(plain))
    for key in ("host", "port", "path", "connection_class"):
        options.pop(key, None)
    tls_options = {k: v for k, v in options.items() if k.startswith("ssl")}
    sentinel_options: dict[str, Any] = {**tls_options, "ssl": tls} if tls else {}
    for parameter in theirs:
        name, _, value = parameter.partition("=")
        sentinel_options[name.removeprefix("sentinel_")] = unquote(value)
    return SentinelAddress(sentinels, service, tls, options, sentinel_options)


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """Sentinel's pool (each new connection asks where the primary is), bounded like the
    link's plain pool: a caller waits for a free connection instead of opening one."""


def sentinel_client(
    address: SentinelAddress, *, max_connections: int, timeout: float, **options: Any
) -> tuple[aioredis.Redis, Sentinel]:
    """A client of ``address``'s primary (wherever it is now) and the :class:`Sentinel`
    behind it (to close with it). ``options`` apply to every connection, the sentinels'
    too (timeouts, retries)."""
    sentinel_options = {**options, **address.sentinel_options}
    sentinel_options.pop("client_name", None)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        address.sentinels,
        sentinel_kwargs={
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            **sentinel_options,
        },
    )
    client = sentinel.master_for(
        address.service,
        connection_pool_class=_BlockingSentinelPool,
        max_connections=max_connections,
        timeout=timeout,  # the wait for a free connection
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        ssl=address.tls,
        **options,
        **address.redis_options,
    )
    return client, sentinel
