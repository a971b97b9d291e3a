"""Which ``Host`` a request may name: the broker's answer to DNS rebinding.

A broker on loopback is out of other machines' reach, but not out of a browser's: a page
on ``evil.example`` whose name the attacker then points at 127.0.0.1 ("DNS rebinding") can
make the user's browser send requests to the broker as same-origin requests of
``evil.example``, and read the answers. The one thing that gives it away is the ``Host``
header, which names the attacker's host, not an address the broker serves. So
:class:`HostCheck` answers such a request ``421`` with a reason, before any route sees it.

Which hosts are allowed (:func:`allowed_hosts`):

* a broker bound to loopback answers its loopback names only: ``localhost``, any
  loopback IP literal (``127.0.0.1``, ``[::1]``), and the address it is bound to;
* a broker bound to another address (behind a proxy, on a LAN) cannot know the names it
  is reached by, and answers any ``Host`` unless told;
* ``--allowed-host`` (comma-separated; ``*`` for any) adds the names a proxy forwards
  (``presence.example.com``), and once given, the names it lists are the only ones
  besides the bound address and, on loopback, the loopback names.

The port is not compared: a rebinding attacker's ``Host`` fails on its name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from codex_presence.broker.http import error

__all__ = ["ANY_HOST", "HostCheck", "allowed_hosts", "host_of"]

ANY_HOST = "*"
"""In ``--allowed-host``: answer any ``Host``."""


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host of a ``Host`` header's value, lower case, without its port or the
    brackets of an IPv6 literal."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header[1:]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The hosts a broker bound to ``bound`` answers, ``extra`` (``--allowed-host``)
    included; None for any."""
    names = {host_of(name) if name.strip() != ANY_HOST else ANY_HOST for name in extra}
    names.discard("")
    if ANY_HOST in names:
        return None
    bound_host = host_of(bound) if bound.startswith("[") else bound.strip().lower()
    if not _loopback(bound_host) and not names:
        return None  # reached by names it cannot know: see the module's docstring
    return frozenset({*names, bound_host})


class HostCheck:
    """ASGI middleware: a request whose ``Host`` is not ``allowed`` (nor a loopback name,
    when one of ``allowed`` is) gets 421 and never reaches ``app``."""

    def __init__(self, app: ASGIApp, *, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed
        self.loopback = loopback = any(map(_loopback, allowed))
        shown = sorted(allowed | ({"localhost", "127.0.0.1", "::1"} if loopback else set()))
        self._served = ", ".join(shown)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = [v for k, v in scope["headers"] if k == b"host"]
        if len(headers) != 1:
            response = error(400, "a request needs exactly one Host header")
        else:
            host = host_of(headers[0].decode("latin-1"))
            if host in self.allowed or (self.loopback and _loopback(host)):
                await self.app(scope, receive, send)
                return
            response = error(
                421,
                f"this broker does not serve the host named in the Host header "
                f"({host[:64]!r}); it serves {self._served} (a proxy's name: "
                "--allowed-host)",
            )
        if scope["type"] == "http":
            await response(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})
