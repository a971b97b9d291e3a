"""What every client of a broker shares: where it is, who we are, and the token rules.

The token comes from ``--token-file FILE`` or else ``$CODEX_PRESENCE_TOKEN`` — never from a
flag carrying the token itself (argv is world-readable in ``ps``), and it is never logged.
A token file that group or others can read draws a warning. ``roster`` uses this module,
and so does the wrap daemon's reporter.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_BROKER",
    "DEFAULT_PORT",
    "TOKEN_ENV",
    "TokenError",
    "add_client_options",
    "auth_headers",
    "make_async_client",
    "make_client",
    "parse_whoami",
    "read_token",
]

logger = logging.getLogger("codex_presence.client")

DEFAULT_PORT = 8765
DEFAULT_BROKER = f"http://127.0.0.1:{DEFAULT_PORT}"
TOKEN_ENV = "CODEX_PRESENCE_TOKEN"


class TokenError(Exception):
    """No usable token (the message never contains the token)."""


def add_client_options(
    parser: argparse.ArgumentParser, *, broker_default: str | None = DEFAULT_BROKER
) -> None:
    """``--broker``, ``--name`` and ``--token-file`` (each also from ``CODEX_PRESENCE_*``)."""
    parser.add_argument(
        "--broker",
        metavar="URL",
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
            logger.warning("token file %s is readable by group or others; chmod 600 it", path)
        token, where = text.strip(), f"token file {path}"
    else:
        env = os.environ if environ is None else environ
        token, where = env.get(TOKEN_ENV, "").strip(), f"${TOKEN_ENV}"
        if not token:
            raise TokenError(f"no token: set ${TOKEN_ENV} or pass --token-file FILE")
    if not token:
        raise TokenError(f"{where} is empty")
    if any(not (33 <= ord(c) < 127) for c in token):
        raise TokenError(f"{where} holds whitespace or non-ASCII characters inside the token")
    return token


def auth_headers(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def make_client(broker: str, token: str, *, timeout: float = 5.0) -> httpx.Client:
    """A synchronous client for ``broker`` that sends the token on every request."""
    import httpx

    return httpx.Client(base_url=broker, headers=auth_headers(token), timeout=timeout)


def make_async_client(broker: str, token: str, *, timeout: float = 5.0) -> httpx.AsyncClient:
    """The async twin of :func:`make_client`."""
    import httpx

    return httpx.AsyncClient(base_url=broker, headers=auth_headers(token), timeout=timeout)


@dataclass(frozen=True, slots=True)
class Whoami:
    """A broker's answer to ``GET /whoami``: whose token this is, in which team."""

    team: str
    name: str


def parse_whoami(body: bytes) -> Whoami | None:
    """The ``/whoami`` answer in ``body``, or None if it is not one (a proxy's sign-in
    page, a dev server's fallback route: a URL that is not a codex-presence broker)."""
    import orjson

    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(answer, dict):
        return None
    team, name = answer.get("team"), answer.get("name")
    if not isinstance(team, str) or not isinstance(name, str) or not name:
        return None
    return Whoami(team=team, name=name)
