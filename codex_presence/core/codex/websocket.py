"""The TUI's websocket traffic, sans-I/O: the upgrade heads, each direction's frames read
into messages, and when the client has hung up.

``codex --remote unix://PATH`` talks to ``codex app-server --listen unix://PATH`` over a
websocket (RFC 6455) on a unix socket: an HTTP/1.1 upgrade, then one JSON-RPC object per
text frame, the same messages as over stdio (``docs/codex-tui.md``). The relay of
``codex-presence codex`` (:mod:`codex_presence.agent.tui.ws_relay`) copies the bytes both ways
as they are, except for the compression offer in the client's request head; here is what it
needs to do that and to read the traffic on the way:

* :class:`RequestHead` collects the client's request head (h11 says where it ends) and
  gives it back without the ``zstd-stream-v1`` offer (:func:`strip_compression_offer`): the
  relay must read the frames, and compressed frames it could not. Neither codex version
  accepts the offer today, so the server's answer is the same either way.
* :class:`MessageReader` reads one direction's bytes into whole text messages, for the
  mapping. The server's direction starts with the response head (h11), its frames after a
  101; wsproto parses the frames. A close frame from the client is a hang-up.
* :class:`ClientLinks` is the rule that the relay and the replay share: which connection
  events end the member's work (see its docstring).

Nothing here is needed to keep the bytes flowing: a reader that cannot parse its direction
says so (:attr:`MessageReader.failed`) and the relay goes on copying.
"""

from __future__ import annotations

import h11
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, TextMessage
from wsproto.utilities import ProtocolError

from codex_presence.core.codex.protocol import ConnectionEvent, Direction

__all__ = [
    "COMPRESSION_HEADER",
    "COMPRESSION_OFFER",
    "HANGUP",
    "ClientLinks",
    "MessageReader",
    "RequestHead",
    "strip_compression_offer",
]

COMPRESSION_HEADER = b"x-codex-app-server-compression"
"""The request header in which the TUI offers compressed frames."""
COMPRESSION_OFFER = b"zstd-stream-v1"
"""The one token of it that the relay takes out."""
MAX_HEAD = 64 * 1024
"""Longest request or response head that is read as one; a longer one is passed on as it is."""
HANGUP = "hangup"
"""The cause of the transition when the client hung up (:class:`ClientLinks`)."""


def strip_compression_offer(head: bytes) -> tuple[bytes, bool]:
    """``head`` (a raw HTTP head) without the ``zstd-stream-v1`` token of the compression
    header, the header dropped when no other token is left; and whether anything was taken
    out. Every other byte of the head stays as it was."""
    lines = head.split(b"\n")
    kept: list[bytes] = []
    stripped = False
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or name.strip().lower() != COMPRESSION_HEADER:
            kept.append(line)
            continue
        cr = b"\r" if value.endswith(b"\r") else b""
        tokens = [token.strip() for token in value.removesuffix(b"\r").split(b",")]
        present = [token for token in tokens if token]
        others = [token for token in present if token.lower() != COMPRESSION_OFFER]
        if len(others) == len(present):
            kept.append(line)
            continue
        stripped = True
        if others:
            kept.append(name + b": " + b", ".join(others) + cr)
    return b"\n".join(kept), stripped


class RequestHead:
    """The client's request head, collected until complete.

    :meth:`feed` returns None while the head is incomplete; then ``(head, rest)``: the head
    to send on (stripped of the compression offer) and the bytes that came after it (the
    first frames). What h11 cannot read as a request head (garbage, a head over
    :data:`MAX_HEAD`, the end of the stream inside it) comes back unchanged as ``head``,
    with :attr:`upgrade` False: the relay passes it on and lets the server answer it."""

    def __init__(self) -> None:
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._buffer = bytearray()
        self.upgrade = False
        """A complete request head was read (the relay then reads the frames after it)."""
        self.stripped = False
        """The compression offer was taken out of it."""
        self.target = b""

    def feed(self, data: bytes) -> tuple[bytes, bytes] | None:
        """More bytes from the client (``b""`` at its end of stream)."""
        self._buffer += data
        try:
            self._h11.receive_data(data)
            event = self._h11.next_event()
        except h11.RemoteProtocolError:
            return bytes(self._buffer), b""
        if event is h11.NEED_DATA:
            return (bytes(self._buffer), b"") if not data else None
        if not isinstance(event, h11.Request):
            return bytes(self._buffer), b""
        rest = self._h11.trailing_data[0]
        head = bytes(self._buffer[: len(self._buffer) - len(rest)])
        head, self.stripped = strip_compression_offer(head)
        self.upgrade = True
        self.target = event.target
        return head, rest


class MessageReader:
    """One direction of a connection, read into whole text messages.

    ``sender`` is who writes these bytes: the client's frames are masked and come after the
    request head (which the relay handles); the server's bytes start with the response head,
    and frames follow only a ``101``. Binary messages, pings and pongs are not the mapping's
    business and are passed over. A text message longer than ``max_size`` is dropped
    (counted in :attr:`oversized`), like a line too long to analyse in ``wrap``."""

    def __init__(self, sender: Direction, *, max_size: int) -> None:
        self.sender = sender
        self.max_size = max_size
        self.closed = False
        """A close frame came: nothing after it is read."""
        self.failed: str | None = None
        """Why this direction is no longer read (not an upgrade, a protocol error)."""
        self.oversized = 0
        self.binary = 0
        self._parts: list[str] = []
        self._size = 0
        self._frames: Connection | None = None
        self._head: h11.Connection | None = None
        if sender == "client":
            self._frames = Connection(ConnectionType.SERVER)
        else:
            self._head = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
            # h11 reads a response only after a request was sent; this one is never sent.
            self._head.send(
                h11.Request(
                    method="GET",
                    target="/",
                    headers=[("Host", "localhost"), ("Connection", "Upgrade"), ("Upgrade", "ws")],
                )
            )

    @property
    def done(self) -> bool:
        """Nothing more will come out of this reader."""
        return self.closed or self.failed is not None

    def feed(self, data: bytes) -> list[bytes]:
        """The text messages completed by ``data`` (bytes as they crossed the wire)."""
        if self.done:
            return []
        if self._frames is None:
            data = self._read_head(data)
            if self._frames is None:
                return []
        try:
            self._frames.receive_data(data)
            return self._messages(self._frames)
        except ProtocolError as exc:
            self.failed = f"the {self.sender}'s frames cannot be read: {exc}"
            return []

    def _read_head(self, data: bytes) -> bytes:
        """Feed the response head; the bytes after it once it is complete."""
        assert self._head is not None
        try:
            self._head.receive_data(data)
            event = self._head.next_event()
        except h11.RemoteProtocolError as exc:
            self.failed = f"the server's answer is not an HTTP response head: {exc}"
            return b""
        if event is h11.NEED_DATA:
            return b""
        if not isinstance(event, h11.InformationalResponse) or event.status_code != 101:
            status = getattr(event, "status_code", event)
            self.failed = f"the server did not switch to websocket (answered {status})"
            return b""
        self._frames = Connection(ConnectionType.CLIENT)
        return self._head.trailing_data[0]

    def _messages(self, frames: Connection) -> list[bytes]:
        out: list[bytes] = []
        for event in frames.events():
            if isinstance(event, TextMessage):
                if self._size <= self.max_size:
                    self._parts.append(event.data)
                    self._size += len(event.data)
                if not event.message_finished:
                    continue
                text = "".join(self._parts) if self._size <= self.max_size else ""
                payload = text.encode()
                if self._size > self.max_size or len(payload) > self.max_size:
                    self.oversized += 1
                else:
                    out.append(payload)
                self._parts.clear()
                self._size = 0
            elif isinstance(event, BytesMessage):
                if event.message_finished:
                    self.binary += 1
            elif isinstance(event, CloseConnection):
                if frames.state is ConnectionState.OPEN:  # wsproto's word for a parse failure
                    self.failed = f"the {self.sender}'s frames cannot be read: {event.reason}"
                else:
                    self.closed = True
                break
        return out


class ClientLinks:
    """The client connections of a session, and when the client's leaving ends the work.

    A connection that the client ends with a close frame is a **hang-up**: the TUI left
    (``/exit``, Ctrl-C; it unsubscribes first) and says "Disconnected from this task". When
    no other connection is live, the member's work is over as far as anyone can act on it:
    :meth:`apply` says so, and the mapping closes everything (cause :data:`HANGUP`), even if
    the app-server goes on with a turn or a background terminal. A connection that ends
    without the client's close frame was **lost** (dropped): the TUI reconnects within
    milliseconds and the server sends the pending requests again, so the state is kept.
    """

    def __init__(self) -> None:
        self._live: set[int] = set()

    def apply(self, connection: int, event: ConnectionEvent) -> bool:
        """Account for one connection event; True when the mapping should close."""
        if event == "open":
            self._live.add(connection)
            return False
        was_live = connection in self._live
        self._live.discard(connection)
        return event == "hangup" and was_live and not self._live
