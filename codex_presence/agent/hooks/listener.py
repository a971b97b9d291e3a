"""The hook server's socket and secret, made with the standard library alone: a runner
binds and listens before it spawns the client (whose settings must hold the hook URL), and
loads the server (:mod:`.hook_server`: anyio, h11) only behind the client's start. Until
the server accepts, the kernel queues the client's connections in the backlog.
"""

from __future__ import annotations

import os
import socket

__all__ = ["EarlyAccepts", "hook_url", "listen_loopback", "new_hook_path"]


def new_hook_path() -> bytes:
    """A fresh hook path, ``/<secret>/hook``: 24 random bytes, URL-safe (as
    ``secrets.token_urlsafe(24)``, without loading ``secrets``, nor ``base64``, whose
    ``urlsafe_b64encode`` this is, with ``struct``: a millisecond before claude's spawn)."""
    import binascii

    encoded = binascii.b2a_base64(os.urandom(24), newline=False)
    return b"/" + encoded.translate(_URL_SAFE).rstrip(b"=") + b"/hook"


_URL_SAFE = bytes.maketrans(b"+/", b"-_")


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


class EarlyAccepts:
    """Connections taken from a listener while its server loads, each with its peer's uid
    as the kernel said it at once (:func:`~.peer_uid.peer_uid`; the error, if it could not):
    a hook poster gives up on its answer after a while and closes, and a peer gone can no
    longer be told apart from another user's, while what it sent waits in our socket. The
    server adopts them (:meth:`~.hook_server.HookServer.serve`) and judges each by that uid.
    A thread of the standard library, polling the listener every 50 ms until stopped."""

    def __init__(self, listener: socket.socket) -> None:
        import threading

        self._listener = listener
        self._stop = threading.Event()
        self.accepted: list[tuple[socket.socket, tuple[str, int], int | Exception | None]] = []
        self._thread = threading.Thread(target=self._run, name="codex-presence-accept")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        import select

        from codex_presence.agent.hooks.peer_uid import peer_uid

        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([self._listener], [], [], 0.05)
                if not readable:
                    continue
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # out of descriptors, say: the rest wait in the backlog
                return
            uid: int | Exception | None
            try:
                uid = peer_uid(sock.getsockname(), peer)
            except Exception as exc:  # judged by the server (served, as ever), never lost
                uid = exc
            self.accepted.append((sock, peer, uid))

    def stop(self) -> list[tuple[socket.socket, tuple[str, int], int | Exception | None]]:
        """Stop taking connections; those taken, oldest first."""
        self._stop.set()
        self._thread.join()
        return self.accepted
