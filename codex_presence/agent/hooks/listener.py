"""The hook server's socket and secret, made with the standard library alone: a runner
binds and listens before it spawns the client (whose settings must hold the hook URL), and
loads the server (:mod:`.hook_server`: anyio, h11) only behind the client's start. Until
the server accepts, the kernel queues the client's connections in the backlog.
"""

from __future__ import annotations

import os
import socket

__all__ = ["hook_url", "listen_loopback", "new_hook_path"]


def new_hook_path() -> bytes:
    """A fresh hook path, ``/<secret>/hook``: 24 random bytes, URL-safe (as
    ``secrets.token_urlsafe(24)``, without loading ``secrets``)."""
    import base64

    return b"/" + base64.urlsafe_b64encode(os.urandom(24)).rstrip(b"=") + b"/hook"


def listen_loopback() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 (an ephemeral port), its backlog deep: until it
    is served the kernel queues the connections."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4096)
    except BaseException:
        listener.close()
        raise
    return listener


def hook_url(listener: socket.socket, path: bytes) -> str:
    """The hook URL of ``listener`` and ``path``, secret included: for the client's
    settings, never for a log."""
    return f"http://127.0.0.1:{listener.getsockname()[1]}{path.decode()}"
