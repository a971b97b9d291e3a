"""The websocket relay of ``codex-presence codex``: the TUI's connections to the app-server,
copied byte for byte, and read on the way.

Each client connection accepted on the relay's socket (OUTER) gets its own connection to
the app-server's (INNER). What the bytes mean is :mod:`codex_presence.core.codex.websocket`'s;
here are the sockets, the copying and the order of things.

Design, and why:

* **The bytes are copied as they are**, both ways, after the client's request head. The
  handshake is end to end (the client's ``Sec-WebSocket-Key`` reaches the server, the
  server's accept reaches the client), so the frames are valid as they stand, masking keys
  included; re-framing them would cost time and could only add mistakes. The one change is
  the compression offer taken out of the request head: compressed frames could not be read.
* **Reading is a side job.** After each part of a chunk is written to the other side, the
  same bytes go to that direction's :class:`~codex_presence.core.codex.websocket.MessageReader`
  (wsproto), and each whole text message to the codex mapping — the mapping of ``wrap``,
  fed one message at a time with its direction, so the two directions stay apart. Write,
  then read, with no wait in between: a client's answer can never be analysed before the
  request it answers. A reader that fails stops reading; the bytes go on. A bug in the
  analysis ends it in idle (:class:`~codex_presence.agent.analysis.AnalysisGuard`).
* **One connection's reading never holds back another's bytes.** Tiny frames are cheap
  to send and dear to parse (256 KiB of empty fragments is 40,000 frames, a second of
  wsproto), so a chunk is read in slices whose size each direction fits to what its
  slices cost (:class:`_Pace`: about :data:`BUDGET` each, from 256 bytes to a whole
  chunk); once :data:`BUDGET` of reading has gone by, the connection lets the others run
  before its next slice. Meanwhile that connection waits,
  and only it: the next chunk is taken from its socket once this one is read. Its two
  directions take turns (one lock per connection, fair), so a request is still read
  before the answer that follows it.
* **A hang-up ends the reading of its connection.** Once the client's close frame has
  gone by, what the server still writes on that connection (events of a turn it goes on
  with, already on their way) is for a client that left: it is relayed, not read, so the
  hang-up's idle holds.
* **Raw non-blocking sockets on the event loop** (``anyio.wait_readable``/``wait_writable``),
  a read or write tried before it is waited for: one event loop thread for every direction,
  and none of anyio's stream objects, whose cancelled ``receive`` on a unix socket makes
  asyncio log an error (agronholm/anyio#1267).
* **The relay never closes a client connection on its own.** The end of one side is passed
  on as an end of stream (``shutdown``) to the other: the client's end to the server, and
  the server's end (codex never answers a close frame; it closes) to the client. A client
  whose connection to INNER cannot be made is closed, as a dead app-server would be.
* **Connections are events.** ``open``, ``hangup`` (the client's close frame) and ``lost``
  (an end without one) go to :class:`~codex_presence.core.codex.websocket.ClientLinks`, whose rule
  the replay shares, and to the recording as connection lines. A connection is lost as soon
  as either side of it ends, before that end is passed on: not once both sides are done,
  which waits on the app-server. Otherwise a dropped connection whose app-server side lingers
  still counted as live when the client, reconnected, hung up; and that hang-up, not the
  last one, closed nothing: working for good. The app-server's end, though, counts only
  once the client's bytes already written to it are read (it waits for the connection's
  reading turn): the client's close frame is written before it is read, and may wait for
  its turn behind a long read of the server's bytes; the app-server, told, ends the
  connection at once, and an end counted then made the hang-up a drop (the member
  working until the TUI exits). The client's own end counts at once: its chunks are read
  one after the other, so none is left unread by then.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
import anyio.lowlevel
import orjson

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.recorder import Recorder
from codex_presence.core.activity import Transition
from codex_presence.core.codex.mapping import CodexMapping
from codex_presence.core.codex.prefilter import DEFAULT_MAX_LINE
from codex_presence.core.codex.protocol import ConnectionEvent, Direction
from codex_presence.core.codex.websocket import HANGUP, ClientLinks, MessageReader, RequestHead
from codex_presence.core.recording import encode_connection, encode_entry

__all__ = ["WsRelay"]

logger = logging.getLogger("codex_presence.relay")

CHUNK = 256 * 1024
BUDGET = 0.0005
"""Seconds of reading after which a connection lets the others run."""


class _Pace:
    """How many bytes of one direction are read at a time: fitted to what they cost, so
    that a slice takes about :data:`BUDGET`."""

    SMALLEST = 256
    FIRST = 4 * 1024

    def __init__(self) -> None:
        self.slice = self.FIRST

    def took(self, seconds: float) -> None:
        if seconds > BUDGET:
            fitted = int(self.slice * BUDGET / seconds)
            self.slice = max(self.SMALLEST, min(fitted, self.slice // 2))
        elif seconds < BUDGET / 4:
            self.slice = min(CHUNK, self.slice * 2)


class WsRelay:
    """Relays every client connection of OUTER to INNER, feeding one mapping.

    ``on_transition`` gets every transition, synchronously, on the event loop; it must not
    block. ``clock`` gives the session's time in seconds (the recording's ``t``). A client
    that connects before ``inner_ready`` is set waits for it. ``analysis`` guards the
    mapping (the session's own, if it closes the mapping too)."""

    def __init__(
        self,
        *,
        inner: str,
        inner_ready: anyio.Event | None = None,
        mapping: CodexMapping,
        on_transition: Callable[[Transition], None],
        clock: Callable[[], float],
        recorder: Recorder | None = None,
        max_size: int = DEFAULT_MAX_LINE,
        analysis: AnalysisGuard | None = None,
    ) -> None:
        self.inner = inner
        self.inner_ready = inner_ready
        """Set once INNER listens: a client that comes earlier waits for it (the TUI starts
        while the app-server does)."""
        self.mapping = mapping
        self.links = ClientLinks()
        self.connections = 0
        """Client connections accepted so far."""
        self.client_came = anyio.Event()
        """Set once the first client connection is accepted."""
        self._on_transition = on_transition
        self._clock = clock
        self._recorder = recorder
        self._max_size = max_size
        self.analysis = analysis if analysis is not None else AnalysisGuard(mapping.close)
        self._said_unreadable = False
        self.unsubscribed: str | None = None
        """The thread the client last unsubscribed from (the TUI does so from its main
        thread on /exit), its title threads aside (it leaves one after every prompt): the
        one its parting hint says to resume."""

    async def serve(self, listener: socket.socket) -> None:
        """Accept client connections on ``listener`` until cancelled."""
        listener.setblocking(False)
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.wait_readable(listener)
                try:
                    client, _ = listener.accept()
                except BlockingIOError:
                    continue
                except OSError as exc:  # out of descriptors, say: the client waits
                    logger.warning("cannot accept a client connection: %s", exc)
                    await anyio.sleep(0.1)
                    continue
                client.setblocking(False)
                self.client_came.set()
                self.connections += 1
                tg.start_soon(self._serve_connection, self.connections, client)

    # -- one connection ----------------------------------------------------------------------

    async def _serve_connection(self, number: int, client: socket.socket) -> None:
        server: socket.socket | None = None
        opened = hung_up = lost = False

        def end() -> None:
            """A side of the connection ended, or it failed: lost, unless hung up."""
            nonlocal lost
            if opened and not (hung_up or lost):
                lost = True
                self._connection_event(number, "lost")

        try:
            head = RequestHead()
            forward = None
            while forward is None:
                forward = head.feed(await _receive(client))
            first, rest = forward
            if not first:
                return  # the client left before saying anything
            if self.inner_ready is not None:
                await self.inner_ready.wait()
            try:
                server = await _connect(self.inner)
            except OSError as exc:
                logger.warning(
                    "connection %d: cannot reach the app-server (%s); closing the client's "
                    "connection, as the app-server would",
                    number,
                    exc.strerror or exc,
                )
                return
            logger.debug(
                "connection %d: %s%s",
                number,
                head.target.decode("latin-1") or "not an upgrade",
                ", compression offer stripped" if head.stripped else "",
            )
            opened = True
            self._connection_event(number, "open")
            client_reader = MessageReader("client", max_size=self._max_size)
            server_reader = MessageReader("server", max_size=self._max_size)
            if not head.upgrade:
                client_reader.failed = server_reader.failed = "not a websocket upgrade"

            turn = anyio.Lock()  # the two directions' reading, in the order written
            client_pace, server_pace = _Pace(), _Pace()

            async def read_client(data: bytes) -> None:
                nonlocal hung_up
                await self._read_in_turn(turn, client_reader, client_pace, data)
                if client_reader.closed and not (hung_up or lost):
                    hung_up = True
                    self._connection_event(number, "hangup")

            async def read_server(data: bytes) -> None:
                if not hung_up:  # after it, for a client that left
                    await self._read_in_turn(turn, server_reader, server_pace, data)

            async def client_ended() -> None:
                end()  # each of its chunks was read before the next was taken

            async def server_ended() -> None:
                """The client's bytes already written to the app-server are read first (a
                close frame among them may be waiting for its turn), then the end counts."""
                async with turn:
                    end()

            if not await _send(server, first, None) or not await _send(server, rest, read_client):
                return
            async with anyio.create_task_group() as tg:
                tg.start_soon(_pump, client, server, read_client, client_ended)
                tg.start_soon(_pump, server, client, read_server, server_ended)
        finally:
            for sock in (client, server):
                if sock is not None:
                    sock.close()
            end()
            logger.debug("connection %d: ended", number)

    # -- reading, after writing ----------------------------------------------------------------

    async def _read_in_turn(
        self, turn: anyio.Lock, reader: MessageReader, pace: _Pace, data: bytes
    ) -> None:
        """Read bytes just written on, a slice at a time, letting the other connections
        run whenever :data:`BUDGET` is spent (see the module doc)."""
        if len(data) <= pace.slice and not turn.locked():
            self._read_timed(reader, pace, data)  # the usual case: at once, no wait
            return
        async with turn:
            spent, start = 0.0, 0
            while start < len(data) and not (reader.done or self.analysis.failed):
                if spent >= BUDGET:
                    await anyio.lowlevel.checkpoint()
                    spent = 0.0
                end = start + pace.slice
                spent += self._read_timed(reader, pace, data[start:end])
                start = end

    def _read_timed(self, reader: MessageReader, pace: _Pace, data: bytes) -> float:
        began = time.perf_counter()
        self._read(reader, data)
        took = time.perf_counter() - began
        pace.took(took)
        return took

    def _read(self, reader: MessageReader, data: bytes) -> None:
        """Read bytes just written on (a bug in it must never stop the bytes)."""
        if reader.done or self.analysis.failed:
            return
        for transition in self.analysis.run(self._analyse, reader, data):
            self._on_transition(transition)
        if reader.failed is not None:
            # Presence cannot follow what it cannot read: said once a session, out loud.
            level = logging.DEBUG if self._said_unreadable else logging.WARNING
            self._said_unreadable = True
            logger.log(
                level,
                "%s; its bytes are relayed, not read (presence does not see this connection)",
                reader.failed,
            )

    def _analyse(self, reader: MessageReader, data: bytes) -> list[Transition]:
        """The messages completed by ``data``, dated now (the recording's clock), recorded,
        and fed to the mapping; the transitions they caused."""
        direction: Direction = reader.sender
        messages = reader.feed(data)
        t = self._clock() if messages else 0.0
        out: list[Transition] = []
        for payload in messages:
            if self._recorder is not None:
                if b"\n" in payload:
                    self._recorder.add_line(encode_entry(t, direction, payload))
                else:
                    self._recorder.add(t, direction, payload + b"\n")
            transition = self.mapping.feed_line(direction, payload)
            if transition is not None:
                out.append(transition)
            if direction == "client" and b'"thread/unsubscribe"' in payload:
                self._note_unsubscribe(payload)
        return out

    def _note_unsubscribe(self, payload: bytes) -> None:
        try:
            message = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(message, dict) or message.get("method") != "thread/unsubscribe":
            return  # the method's name in another message, or in no object at all
        params = message.get("params")
        thread = params.get("threadId") if isinstance(params, dict) else None
        if isinstance(thread, str) and not self.mapping.is_title_thread(thread):
            self.unsubscribed = thread

    def _connection_event(self, number: int, event: ConnectionEvent) -> None:
        t = self._clock()
        if self._recorder is not None:
            self._recorder.add_line(encode_connection(t, number, event))
        logger.debug("connection %d: %s", number, event)
        if self.links.apply(number, event):
            for transition in self.analysis.run(self.mapping.close, HANGUP):
                self._on_transition(transition)


Reader = Callable[[bytes], Awaitable[None]]
"""Reads the bytes just written on (see :meth:`WsRelay._read`)."""


async def _pump(
    src: socket.socket, dst: socket.socket, read: Reader, ended: Callable[[], Awaitable[None]]
) -> None:
    """``src`` → ``dst`` until ``src`` ends or ``dst`` is gone; then ``ended()`` is told, and
    ``dst`` gets the end."""
    try:
        while data := await _receive(src):
            if not await _send(dst, data, read):
                return
    finally:
        try:
            await ended()
        finally:
            with suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


async def _receive(sock: socket.socket) -> bytes:
    """The next bytes from ``sock``; ``b""`` at its end (or when it broke)."""
    while True:
        try:
            return sock.recv(CHUNK)
        except BlockingIOError:
            await anyio.wait_readable(sock)
        except OSError:
            return b""


async def _send(sock: socket.socket, data: bytes, read: Reader | None) -> bool:
    """Write all of ``data``, handing each part written to ``read`` at once; False if
    ``sock`` can no longer be written (its reader is gone)."""
    view, pos = memoryview(data), 0
    while pos < len(data):
        try:
            written = sock.send(view[pos:])
        except BlockingIOError:
            await anyio.wait_writable(sock)
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                logger.debug("writing to a relayed connection failed: %s", exc)
            return False
        if read is not None:
            await read(data if written == len(data) else data[pos : pos + written])
        pos += written
    return True


async def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        try:
            sock.connect(path)
        except BlockingIOError:  # the listener's backlog is full: wait for room
            await anyio.wait_writable(sock)
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                raise OSError(error, errno.errorcode.get(error, str(error))) from None
    except BaseException:
        sock.close()
        raise
    return sock
