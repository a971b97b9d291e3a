"""How a member reaches its broker: the options that say where, the token, the HTTP client.

The token comes from ``--token-file FILE`` or else ``$CODEX_PRESENCE_TOKEN`` — never from a
flag carrying the token itself (argv is world-readable in ``ps``), and it is never logged.
A token file that group or others can read draws a warning. The client made here sends the
token on every request. ``wrap``, ``roster``, ``mcp`` and the demo all start here.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Mapping

from codex_presence._env import DEFAULT_BROKER, TOKEN_ENV

TYPE_CHECKING = False  # import-light: wrap configures its options before its child runs
if TYPE_CHECKING:
    import httpx

__all__ = [
    "BadBrokerUrl",
    "TokenError",
    "add_client_options",
    "broker_url",
    "make_async_client",
    "read_token",
]


class BadBrokerUrl(argparse.ArgumentTypeError, ValueError):
    """A ``--broker`` that is not an http(s) URL (argparse says it as it is; a variable
    naming it, too)."""


def broker_url(value: str) -> str:
    """``value`` if it is a broker's URL (``http://`` or ``https://`` and a host), else
    :class:`BadBrokerUrl` saying what is wrong: ``localhost:8765`` got httpx's
    "unsupported protocol 'localhost://'"."""
    from urllib.parse import urlsplit

    from codex_presence._wire import masked

    given = masked(value)  # as every message shows it: without its password
    scheme, _, rest = value.partition("://")
    if not rest:
        guess = f"{_likely_scheme(value)}://{given}"
        raise BadBrokerUrl(
            f"{given!r} is not a URL: a broker's URL starts with http:// or https:// ({guess}?)"
        )
    if scheme.lower() not in ("http", "https"):
        raise BadBrokerUrl(
            f"{given!r}: a broker's URL starts with http:// or https://, not {scheme}://"
        )
    try:
        parts = urlsplit(value)
        host, _ = parts.hostname, parts.port  # a port past 65535 raises only when read
    except ValueError as exc:
        raise BadBrokerUrl(f"{given!r} is not a URL: {exc}") from None
    if not host:
        raise BadBrokerUrl(f"{given!r} names no host")
    return value


_TLS_PORTS = frozenset({443, 8443})


def _likely_scheme(address: str) -> str:
    """``https`` for an address that looks served over TLS (port 443 or 8443, or a host
    name without a port, which is 443 to a browser), ``http`` for the rest (the broker
    itself, on loopback)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(f"//{address}")
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "http"
    loopback = host == "localhost" or host.startswith("127.") or host == "::1"
    return "https" if port in _TLS_PORTS or (port is None and not loopback) else "http"


class TokenError(Exception):
    """No usable token (the message never contains the token)."""


def add_client_options(
    parser: argparse.ArgumentParser,
    *,
    broker_default: str | None = DEFAULT_BROKER,
    check_url: bool = False,
) -> None:
    """``--broker``, ``--name`` and ``--token-file`` (each also from ``CODEX_PRESENCE_*``).
    With ``check_url``, a ``--broker`` that is not an http(s) URL is a usage error
    (:func:`broker_url`); the runners take any, because a broker they cannot use must
    never keep their child from running (they say once that they do not report)."""
    parser.add_argument(
        "--broker",
        metavar="URL",
        type=broker_url if check_url else str,
        default=broker_default,
        help=f"the presence broker (default: {broker_default or 'none'})",
    )
    parser.add_argument("--name", metavar="NAME", help="your member name on the team")
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"file holding your member token (default: ${TOKEN_ENV})",
    )


def read_token(*, token_file: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The member token: from ``token_file`` if given, else from ``$CODEX_PRESENCE_TOKEN``."""
    from pathlib import Path

    from codex_presence._wire import is_token_text

    if token_file:
        path = Path(token_file)
        try:
            mode = path.stat().st_mode
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TokenError(f"cannot read token file {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise TokenError(f"token file {path} is not text (UTF-8)") from None
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            import logging

            logger = logging.getLogger("codex_presence.client")
            logger.warning("token file %s is readable by group or others; chmod 600 it", path)
        token, where = text.strip(), f"token file {path}"
    else:
        env = os.environ if environ is None else environ
        token, where = env.get(TOKEN_ENV, "").strip(), f"${TOKEN_ENV}"
        if not token:
            raise TokenError(f"no token: set ${TOKEN_ENV} or pass --token-file FILE")
    if not token:
        raise TokenError(f"{where} is empty")
    if token in _PLACEHOLDERS:
        raise TokenError(
            f"{where} is {token!r}, the docs' placeholder: put a member's token there (team "
            "init printed it, NAME<TAB>TOKEN; it starts with cp_)"
        )
    if not is_token_text(token):
        raise TokenError(f"{where} holds whitespace or non-ASCII characters inside the token")
    return token


_PLACEHOLDERS = frozenset({"…", "...", "TOKEN", "<token>", "<TOKEN>"})
"""What the docs write where a token goes (``CODEX_PRESENCE_TOKEN=…``), pasted as is."""


def make_async_client(broker: str, token: str, *, timeout: float = 5.0) -> httpx.AsyncClient:
    """A client for ``broker`` that sends the token on every request."""
    import httpx

    headers = {"authorization": f"Bearer {token}"}
    return httpx.AsyncClient(base_url=broker, headers=headers, timeout=timeout)
