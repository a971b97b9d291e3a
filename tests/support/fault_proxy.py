"""A TCP proxy on loopback in front of a real broker, with a switchable fault: the broker
unreachable, failing, slow to take a request, or slow to answer one it already applied."""

from __future__ import annotations

import errno
import random
import socket
import threading
from contextlib import suppress
from pathlib import Path

from tests.support.waiting import WAIT


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream``, with a switchable fault.

    Modes: ``pass`` (forward), ``refuse`` (nothing listens: ECONNREFUSED), ``500`` (read the
    request head, answer 500), ``stall`` (read the request, hold it ``stall`` seconds, then
    forward it), ``late`` (forward the request at once, hold the answer ``stall`` seconds:
    the broker has applied what the client will not hear of in time). Switching the mode
    cuts every open connection, as a real outage would.
    """

    def __init__(self, upstream_port: int, *, mode: str = "pass", stall: float = 10.0) -> None:
        self.upstream_port = upstream_port
        self.stall = stall
        self.mode = "pass"
        self.counts = {"pass": 0, "500": 0, "stall": 0, "answered_after_stall": 0}
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._cut = threading.Event()
        self._closed = False
        self.port = 0
        self._listen()
        self.set_mode(mode)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            _bind(sock, self.port)
            sock.listen(256)
        except OSError:
            sock.close()
            raise
        sock.settimeout(0.05)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._acceptor = threading.Thread(target=self._accept, args=(sock,), daemon=True)
        self._acceptor.start()

    def _accept(self, sock: socket.socket) -> None:
        while self._listener is sock:
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
                mode = self.mode
            threading.Thread(target=self._serve, args=(conn, mode), daemon=True).start()

    def set_mode(self, mode: str) -> None:
        assert mode in ("pass", "refuse", "500", "stall", "late")
        with self._lock:
            self.mode = mode
            conns, self._conns = self._conns, set()
            cut, self._cut = self._cut, threading.Event()
        cut.set()
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        if mode == "refuse" and self._listener is not None:
            listener, self._listener = self._listener, None
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # refused from now on
            # The acceptor's poll holds the socket, listening, until it sees it is no longer
            # the listener: a `pass` right after would find the port in use.
            if self._acceptor is not None:
                self._acceptor.join(WAIT)
            listener.close()
        elif mode != "refuse" and self._listener is None and not self._closed:
            self._listen()

    def close(self) -> None:
        self._closed = True
        self.set_mode("refuse")

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._conns.add(sock)

    def _serve(self, conn: socket.socket, mode: str) -> None:
        try:
            if mode == "500":
                self.counts["500"] += 1
                _read_head(conn)
                conn.sendall(
                    b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n"
                    b"connection: close\r\n\r\n"
                )
                return
            head = b""
            if mode == "stall":
                self.counts["stall"] += 1
                head = _read_head(conn)
                if self._cut.wait(self.stall):
                    return  # the fault ended first: the connection was cut
                self.counts["answered_after_stall"] += 1
            self.counts["pass"] += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            upstream.settimeout(None)
            self._track(upstream)
            upstream.sendall(head)
            hold = self._cut if mode == "late" else None
            pump = threading.Thread(
                target=_pump, args=(upstream, conn, hold, self.stall), daemon=True
            )
            pump.start()
            _pump(conn, upstream)
            pump.join(WAIT)
        except OSError:
            pass
        finally:
            conn.close()


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    conn.settimeout(5)
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    conn.settimeout(None)
    return data


def _pump(
    src: socket.socket,
    dst: socket.socket,
    hold: threading.Event | None = None,
    seconds: float = 0.0,
) -> None:
    try:
        while chunk := src.recv(65536):
            if hold is not None:
                if hold.wait(seconds):
                    return  # the fault ended first: the connection was cut
                hold = None
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


# -- watching the session and the roster -------------------------------------------------------


def _bind(sock: socket.socket, port: int) -> None:
    """Bind ``port`` on loopback; the first time (0), a free port below the ephemeral range.

    ``refuse`` closes the listener and ``pass`` binds the same port again: an ephemeral port
    could have been handed meanwhile to an outgoing connection (anyone's, on this machine),
    and the proxy could not come back ("Address already in use")."""
    if port:
        sock.bind(("127.0.0.1", port))
        return
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        try:
            sock.bind(("127.0.0.1", random.randrange(1024, low)))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        else:
            return
    raise OSError(errno.EADDRINUSE, "no free port below the ephemeral range")
