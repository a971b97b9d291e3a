"""The options of a ``--redis`` URL a broker refuses before it starts.

redis-py takes every parameter of the URL's query as a connection option, and a value it
accepts may still leave the broker in an outage for good: ``socket_timeout=0`` times out
every command, ``decode_responses=true`` hands our reply reader text where it reads bytes,
a ``client_name`` with a space, a database Redis does not have or a negative
``health_check_interval`` fail every connection. None of that is an outage to wait out:
it is a mistake in the URL, so :func:`check_redis_url` says which option and why, for the
command line (and any other maker of a broker) to turn into a usage error. Nothing is
connected; a value of an option not named here is redis-py's to judge.
"""

from __future__ import annotations

import math
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["DATABASES", "check_redis_url"]

DATABASES = 16
"""Redis's databases, 0 to 15 (its default ``databases 16``): a number past them fails
every connection (``SELECT``: "DB index is out of range")."""

_SECONDS = ("socket_timeout", "socket_connect_timeout", "timeout")
_CERT_REQS = ("none", "optional", "required")
_TRUE = ("1", "true", "yes", "y", "on")


def check_redis_url(url: str) -> None:
    """Raise :class:`ValueError` naming the first option of ``url`` (its query, or the
    database in its path) that would keep a broker from ever connecting, and why."""
    parts = urlsplit(url)
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        why = _refused(name, value)
        if why is not None:
            raise ValueError(f"{name}={value}: {why}")
    database = _path_database(parts.scheme, parts.path)
    if database is not None and database.isdigit() and int(database) >= DATABASES:
        raise ValueError(f"database {database}: {_databases()}")


def _refused(name: str, value: str) -> str | None:
    if name in _SECONDS:
        try:
            seconds = float(value)
        except ValueError:
            return "must be a number of seconds"
        return None if math.isfinite(seconds) and seconds > 0 else "must be seconds > 0"
    if name == "health_check_interval":
        return None if value.isdigit() else "must be a whole number of seconds >= 0"
    if name == "max_connections":
        return None if value.isdigit() and int(value) > 0 else "must be a number > 0"
    if name == "db":
        return None if value.isdigit() and int(value) < DATABASES else _databases()
    if name == "decode_responses":
        return (
            "the broker reads Redis's replies as bytes; leave the option out"
            if (value.lower() in _TRUE)
            else None
        )
    if name == "client_name":
        if value and all("!" <= c <= "~" for c in value):
            return None
        return "Redis takes a name of printable characters, without spaces"
    if name == "ssl_cert_reqs" and value.lower() not in _CERT_REQS:
        return f"must be one of {', '.join(_CERT_REQS)}"
    return None


def _path_database(scheme: str, path: str) -> str | None:
    """The database a URL's path names (redis-py's reading), if any."""
    if scheme in ("redis", "rediss"):
        return unquote(path).replace("/", "") or None
    if scheme.endswith("+sentinel"):
        segments = [s for s in path.split("/") if s]
        return unquote(segments[1]) if len(segments) > 1 else None
    return None


def _databases() -> str:
    return f"Redis has databases 0 to {DATABASES - 1} (its default `databases {DATABASES}`)"
