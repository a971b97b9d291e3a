"""The websocket relay of ``codex-presence codex`` on the wire (``agent/tui/ws_relay.py``).

Hand-made frames go in on both sides and what comes out is checked byte for byte, with a
frame codec of our own (:mod:`bench._ws_frames`); a fake app-server (``Inner``)
answers the upgrade like codex does (lowercase 101, the message-size header, no answer to a
close frame: it just ends the connection). The relay runs on its own event loop thread.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import orjson
import pytest

from bench._ws_frames import Frame, accept_key, decode, encode, upgrade_request
from codex_presence.agent.recorder import start_recorder
from codex_presence.agent.tui.ws_relay import WsRelay
from codex_presence.core.activity import Transition
from codex_presence.core.codex.mapping import CodexMapping
from codex_presence.core.recording import read_entries
from tests.support.tui_driver import short_tempdir
from tests.support.waiting import WAIT, eventually

RESPONSE_HEAD = (
    b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
    b"sec-websocket-accept: %s\r\n"
    b"x-codex-websocket-max-unfragmented-message-bytes: 16777216\r\n\r\n"
)


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """An HTTP head (with its blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "EOF inside the head"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def read_until_eof(sock: socket.socket, already: bytes = b"", timeout: float = WAIT) -> bytes:
    sock.settimeout(timeout)
    data = already
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _close_frame(data: bytes) -> Frame | None:
    try:
        frames = decode(data)
    except (AssertionError, IndexError):
        return None  # not all there yet
    return next((f for f in frames if f.opcode == 0x8), None)


class Inner:
    """A fake app-server on a unix socket: per connection, the 101 and ``frames`` at once,
    then it reads until the client's close frame and ends the connection without answering
    it (as codex does). What it got is kept, raw."""

    def __init__(
        self,
        path: Path,
        frames: list[bytes],
        *,
        on_frame: bytes = b"",
        on_close: bytes = b"",
        lingers: bool = False,
    ) -> None:
        self.path = path
        self.frames = frames
        self.on_frame = on_frame
        """Sent once the client's first data frame came (an answer that must wait)."""
        self.on_close = on_close
        """Sent once the client's close frame came (a turn's events already on their way)."""
        self.lingers = lingers
        """Each connection served at once, in a thread of its own; one whose client ended
        without a close frame is kept open until :meth:`close` (an app-server slow to let go
        of a dropped connection)."""
        self._closing = threading.Event()
        self.ended = threading.Event()
        """Set once a connection's end was sent (after the client's close frame)."""
        self.heads: list[bytes] = []
        self.received: list[bytes] = []
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                if self.lingers:
                    threading.Thread(target=self._own, args=(conn,), daemon=True).start()
                    continue
                with conn:
                    self._connection(conn)

    def _own(self, conn: socket.socket) -> None:
        with conn, suppress(OSError):
            self._connection(conn)

    def _connection(self, conn: socket.socket) -> None:
        head, got = read_head(conn)
        self.heads.append(head)
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        conn.sendall(RESPONSE_HEAD % accept_key(key) + b"".join(self.frames))
        answered = not self.on_frame
        while _close_frame(got) is None:
            if not answered and any(f.opcode in (0x1, 0x2) for f in _whole_frames(got)):
                conn.sendall(self.on_frame)
                answered = True
            chunk = conn.recv(65536)
            if not chunk:
                if self.lingers:
                    self._closing.wait()
                break
            got += chunk
        if self.on_close:
            conn.sendall(self.on_close)
        conn.shutdown(socket.SHUT_WR)
        self.ended.set()
        self.received.append(read_until_eof(conn, got))

    def close(self) -> None:
        self._closing.set()
        # shutdown() wakes the accept() of the serving thread; close() alone does not.
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=WAIT)
        self.listener.close()


def _whole_frames(data: bytes) -> list[Frame]:
    with suppress(AssertionError, IndexError):
        return decode(data)
    return []


@dataclass
class Relayed:
    relay: WsRelay
    transitions: list[Transition] = field(default_factory=list)

    @property
    def states(self) -> list[str]:
        return [t.state.value for t in self.transitions]


@contextmanager
def relaying(outer: Path, inner: Path, *, recording: Path | None = None) -> Iterator[Relayed]:
    """The relay serving ``outer`` on its own event loop thread, for the block."""
    start = time.monotonic()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(outer))
    listener.listen()
    relayed: Relayed

    def clock() -> float:
        return time.monotonic() - start

    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        stop = portal.call(anyio.Event)
        recorder = start_recorder(recording)
        transitions: list[Transition] = []
        relay = WsRelay(
            inner=str(inner),
            mapping=CodexMapping(),
            on_transition=transitions.append,
            clock=clock,
            recorder=recorder,
        )
        relayed = Relayed(relay, transitions)

        async def serve() -> None:
            async with anyio.create_task_group() as serving:
                serving.start_soon(relay.serve, listener)
                await stop.wait()
                serving.cancel_scope.cancel()
            if recorder is not None:
                recorder.finish(clock())
                assert await anyio.to_thread.run_sync(recorder.join, 10)

        future = portal.start_task_soon(serve)
        try:
            yield relayed
        finally:
            portal.call(stop.set)
            future.result(timeout=10)
            listener.close()


@pytest.fixture
def tmp() -> Iterator[Path]:
    with short_tempdir("cpw-") as path:
        yield path


def connect(path: Path, first: bytes) -> tuple[socket.socket, bytes, bytes]:
    """Connect, send ``first`` (the upgrade and maybe frames); the 101 head and the rest."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(path))
    sock.sendall(first)
    head, rest = read_head(sock)
    return sock, head, rest


def note(method: str, **params: object) -> bytes:
    return orjson.dumps({"method": method, "params": params})


TURN = {"threadId": "th", "turn": {"id": "tu"}}


def test_every_byte_passes_as_it_was_but_the_compression_offer(tmp: Path) -> None:
    """The frames reach the other side byte for byte (masking keys, fragments, control
    frames, binary, a 70 000-byte frame); the request head loses only the offer, the 101
    comes back as it was; the client's close frame is the hang-up that makes the member
    idle; the server's end of the connection reaches the client as an end of stream."""
    server_frames = [
        encode(0x1, note("turn/started", **TURN), mask=False),
        encode(0x1, b'{"method":"x","params":{"t":"\xe2', fin=False, mask=False),
        encode(0x0, b'\x82\xac"}}', mask=False),
        encode(0x9, b"srv-ping", mask=False),
        encode(0x2, b"\x00\xffbinary", mask=False),
    ]
    client_frames = [
        encode(0x1, b'{"id":1,"method":"initialize"}', mask=True),
        encode(0x1, b'{"id":2,', fin=False, mask=True),
        encode(0x9, b"cli-ping", mask=True),
        encode(0x0, b'"method":"a"}', mask=True),
        encode(0xA, b"srv-ping", mask=True),
        encode(0x1, b"x" * 70000, mask=True),
        encode(0x8, b"", mask=True),  # close, no status: the TUI's /exit
    ]
    inner = Inner(tmp / "inner.sock", server_frames)
    recording = tmp / "rec.jsonl"
    request = upgrade_request(b"x-other: kept")
    server_bytes = b"".join(server_frames)
    try:
        with relaying(tmp / "outer.sock", inner.path, recording=recording) as relayed:
            sock, head, got = connect(tmp / "outer.sock", request + b"".join(client_frames[:-1]))
            while len(got) < len(server_bytes):
                got += sock.recv(65536)
            sock.sendall(client_frames[-1])
            got = read_until_eof(sock, got)  # the server ended it: so does the relay
            sock.close()
            eventually(lambda: relayed.states == ["working", "idle"], what="working, then idle")
    finally:
        inner.close()
    key = request.split(b"Sec-WebSocket-Key: ")[1].split(b"\r\n")[0]
    assert head == RESPONSE_HEAD % accept_key(key)
    assert got == server_bytes
    offer = b"x-codex-app-server-compression: zstd-stream-v1\r\n"
    assert inner.heads == [request.replace(offer, b"")]
    assert inner.received == [b"".join(client_frames)]
    assert [t.cause for t in relayed.transitions] == ["turn/started", "hangup"]
    version, *entries = read_entries(recording.read_bytes().splitlines())
    assert version.version == 2
    assert [(e.direction, e.message, e.connection) for e in entries[:-1]] == [
        ("client", None, (1, "open")),
        ("client", {"id": 1, "method": "initialize"}, None),
        ("client", {"id": 2, "method": "a"}, None),
        ("client", None, None),  # not JSON: kept raw
        ("server", orjson.loads(note("turn/started", **TURN)), None),
        ("server", {"method": "x", "params": {"t": "€"}}, None),
        ("client", None, (1, "hangup")),
    ]
    assert entries[3].raw == b"x" * 70000
    assert entries[-1].end


def test_an_answer_is_read_after_the_request_it_answers(tmp: Path) -> None:
    approval = orjson.dumps(
        {
            "method": "item/commandExecution/requestApproval",
            "id": 0,
            "params": {"threadId": "th", "turnId": "tu", "itemId": "call"},
        }
    )
    completed = note("turn/completed", threadId="th", turn={"id": "tu", "status": "completed"})
    inner = Inner(
        tmp / "inner.sock",
        [encode(0x1, note("turn/started", **TURN), mask=False), encode(0x1, approval, mask=False)],
        on_frame=encode(0x1, completed, mask=False),
    )
    try:
        with relaying(tmp / "outer.sock", inner.path) as relayed:
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working", "blocked"], what="blocked")
            answer = b'{"id":0,"result":{"decision":"accept"}}'
            sock.sendall(encode(0x1, answer, mask=True))
            eventually(lambda: relayed.states[-1] == "idle", what="idle after turn/completed")
            sock.sendall(encode(0x8, b"", mask=True))
            read_until_eof(sock, rest)
            sock.close()
    finally:
        inner.close()
    assert [(t.state.value, t.cause) for t in relayed.transitions] == [
        ("working", "turn/started"),
        ("blocked", "item/commandExecution/requestApproval"),
        ("working", "response"),
        ("idle", "turn/completed"),
    ]


def test_a_dropped_connection_keeps_the_state_and_a_reconnect_is_a_new_pair(tmp: Path) -> None:
    inner = Inner(tmp / "inner.sock", [encode(0x1, note("turn/started", **TURN), mask=False)])
    recording = tmp / "rec.jsonl"
    try:
        with relaying(tmp / "outer.sock", inner.path, recording=recording) as relayed:
            first, _, _ = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working"], what="working")
            first.shutdown(socket.SHUT_RDWR)  # broken: no close frame
            first.close()
            second, _, rest = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: len(inner.received) == 1, what="the first pair's end")
            assert relayed.states == ["working"]
            second.sendall(encode(0x8, b"\x03\xe8", mask=True))  # a close with 1000
            read_until_eof(second, rest)
            second.close()
            eventually(lambda: relayed.states == ["working", "idle"], what="the hang-up")
    finally:
        inner.close()
    events = [e.connection for e in read_entries(recording.read_bytes().splitlines())]
    assert sorted(c for c in events if c is not None) == [  # each connection's in order
        (1, "lost"),
        (1, "open"),
        (2, "hangup"),
        (2, "open"),
    ]
    assert events.index((1, "open")) < events.index((1, "lost"))
    assert relayed.relay.connections == 2 and len(inner.heads) == 2


def test_a_hang_up_after_a_reconnect_ends_the_work_while_the_dropped_one_lingers(
    tmp: Path,
) -> None:
    """The first connection drops; the app-server keeps its side of it open. The client,
    reconnected, hangs up: nothing is left that could act on the work, so it ends. (Counting
    the dropped connection as live until the app-server let it go kept working for good.)"""
    inner = Inner(
        tmp / "inner.sock", [encode(0x1, note("turn/started", **TURN), mask=False)], lingers=True
    )
    try:
        with relaying(tmp / "outer.sock", inner.path) as relayed:
            first, _, _ = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working"], what="working")
            first.shutdown(socket.SHUT_RDWR)  # broken: no close frame
            first.close()
            second, _, rest = connect(tmp / "outer.sock", upgrade_request())
            second.sendall(encode(0x8, b"\x03\xe8", mask=True))  # a close with 1000
            read_until_eof(second, rest)
            second.close()
            eventually(lambda: relayed.states == ["working", "idle"], what="the hang-up")
            assert len(inner.heads) == 2
    finally:
        inner.close()


def test_a_hang_up_read_after_the_app_server_ended_the_connection_is_a_hang_up(
    tmp: Path,
) -> None:
    """/exit mid-turn: the close frame is written to the app-server before it is read, and
    its reading waits for the connection's turn, taken by a long read of the server's
    events. The app-server, told, ends the connection at once. Its end must not count
    before the close frame is read: that made the hang-up a drop, and the member stayed
    working until the TUI exited. The order is held, not hoped for: the server's reading
    keeps the turn (as it does between slices) until the app-server has ended."""
    inner = Inner(tmp / "inner.sock", [encode(0x1, note("turn/started", **TURN), mask=False)])
    holding = threading.Event()
    recording = tmp / "rec.jsonl"
    try:
        with relaying(tmp / "outer.sock", inner.path, recording=recording) as relayed:
            relay = relayed.relay
            read_in_turn = relay._read_in_turn

            async def long_server_read(
                turn: anyio.Lock, reader: Any, pace: Any, data: bytes
            ) -> None:
                if reader.sender != "server" or b"turn/started" not in data:
                    await read_in_turn(turn, reader, pace, data)
                    return
                async with turn:
                    relay._read(reader, data)
                    holding.set()
                    assert await anyio.to_thread.run_sync(inner.ended.wait, WAIT)

            relay._read_in_turn = long_server_read  # type: ignore[method-assign]
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            assert holding.wait(WAIT), "the server's events were not read"
            assert relayed.states == ["working"]
            sock.sendall(encode(0x8, b"\x03\xe8", mask=True))  # /exit: a close with 1000
            read_until_eof(sock, rest)  # the app-server's end, passed on once counted
            sock.close()
            assert [(t.state.value, t.cause) for t in relayed.transitions] == [
                ("working", "turn/started"),
                ("idle", "hangup"),
            ]
    finally:
        inner.close()
    events = [e.connection for e in read_entries(recording.read_bytes().splitlines())]
    assert [c for c in events if c is not None] == [(1, "open"), (1, "hangup")]


def test_unsubscribe_named_in_no_request_object_leaves_the_analysis_running(tmp: Path) -> None:
    """A client message that holds ``"thread/unsubscribe"`` but is no JSON object (a batch)
    is read as the mapping reads it. (Before: looking in it for the thread the TUI left
    raised AttributeError, a bug the analysis guard caught: the member was reported idle
    and presence given up for the rest of the session.)"""
    inner = Inner(tmp / "inner.sock", [encode(0x1, note("turn/started", **TURN), mask=False)])
    unsubscribe = {"id": 7, "method": "thread/unsubscribe", "params": {"threadId": "th"}}
    try:
        with relaying(tmp / "outer.sock", inner.path) as relayed:
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working"], what="working")
            sock.sendall(encode(0x1, orjson.dumps([unsubscribe]), mask=True))
            sock.sendall(encode(0x1, orjson.dumps(unsubscribe), mask=True))
            eventually(lambda: relayed.relay.unsubscribed == "th", what="the request read")
            assert not relayed.relay.analysis.failed
            assert relayed.states == ["working"]
            sock.sendall(encode(0x8, b"\x03\xe8", mask=True))
            read_until_eof(sock, rest)
            sock.close()
            eventually(lambda: relayed.states == ["working", "idle"], what="the hang-up")
    finally:
        inner.close()


def test_the_thread_to_resume_is_never_a_title_thread(tmp: Path) -> None:
    """The TUI leaves its title thread after every prompt (``thread/unsubscribe``, id
    ``temporary-structured-unsubscribe-…``), and its main thread only on /exit. A TUI that
    ended otherwise (Ctrl-C, a crash) left the title thread last: it is no session, and
    resuming it fails. (Before: the parting hint named it.)"""
    title = {"id": "title-th", "threadSource": "thread_title"}
    inner = Inner(
        tmp / "inner.sock",
        [
            encode(0x1, note("thread/started", thread=title), mask=False),
            encode(0x1, note("turn/started", **TURN), mask=False),
        ],
    )

    def unsubscribe(request: object, thread: str) -> bytes:
        message = {"id": request, "method": "thread/unsubscribe", "params": {"threadId": thread}}
        return encode(0x1, orjson.dumps(message), mask=True)

    try:
        with relaying(tmp / "outer.sock", inner.path) as relayed:
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working"], what="working")
            sock.sendall(unsubscribe(7, "th"))
            sock.sendall(unsubscribe("temporary-structured-unsubscribe-1", "title-th"))
            sock.sendall(encode(0x8, b"\x03\xe8", mask=True))  # read after both
            read_until_eof(sock, rest)
            sock.close()
            eventually(lambda: relayed.states == ["working", "idle"], what="the hang-up")
            assert relayed.relay.unsubscribed == "th"
    finally:
        inner.close()


def test_a_client_the_app_server_cannot_take_is_closed_as_it_would_be(tmp: Path) -> None:
    with relaying(tmp / "outer.sock", tmp / "nobody.sock") as relayed:
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(10)
        sock.connect(str(tmp / "outer.sock"))
        sock.sendall(upgrade_request())
        assert read_until_eof(sock) == b""
        sock.close()
    assert relayed.transitions == []


def test_frames_that_cannot_be_read_are_relayed_all_the_same(tmp: Path) -> None:
    """Unmasked client frames break the protocol (the reader gives up); the bytes pass."""
    inner = Inner(tmp / "inner.sock", [])
    bad = encode(0x1, note("turn/started", **TURN), mask=False)
    try:
        with relaying(tmp / "outer.sock", inner.path) as relayed:
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            sock.sendall(bad)
            sock.sendall(encode(0x8, b"", mask=True))
            sock.shutdown(socket.SHUT_WR)
            read_until_eof(sock, rest)
            sock.close()
            eventually(lambda: len(inner.received) == 1, what="the server's end")
    finally:
        inner.close()
    assert inner.received[0].startswith(bad)
    assert relayed.transitions == []


def test_what_the_server_writes_after_a_hang_up_is_relayed_not_read(tmp: Path) -> None:
    """/exit mid-turn: idle at the hang-up, and it holds, though the app-server's events of
    the turn (a command starting) still come on that connection."""
    late = note(
        "item/started", threadId="th", turnId="tu", item={"type": "commandExecution", "id": "c"}
    )
    inner = Inner(
        tmp / "inner.sock",
        [encode(0x1, note("turn/started", **TURN), mask=False)],
        on_close=encode(0x1, late, mask=False),
    )
    recording = tmp / "rec.jsonl"
    try:
        with relaying(tmp / "outer.sock", inner.path, recording=recording) as relayed:
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working"], what="working")
            sock.sendall(encode(0x8, b"", mask=True))
            got = read_until_eof(sock, rest)
            sock.close()
            eventually(lambda: len(inner.received) == 1, what="the server's end")
    finally:
        inner.close()
    assert got.endswith(encode(0x1, late, mask=False))  # relayed all the same
    assert [(t.state.value, t.cause) for t in relayed.transitions] == [
        ("working", "turn/started"),
        ("idle", "hangup"),
    ]
    messages = [e.message for e in read_entries(recording.read_bytes().splitlines())]
    assert orjson.loads(late) not in messages  # the recording replays as the relay saw it


def test_a_bug_in_the_analysis_ends_in_idle_and_the_bytes_go_on(
    tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A mapping that raises: the member shown working must not stay so (the reporter
    would heartbeat it for the rest of the session); idle, said once, and every byte still
    relayed."""
    answer = encode(0x1, note("item/agentMessage/delta", delta="after the bug"), mask=False)
    inner = Inner(
        tmp / "inner.sock",
        [encode(0x1, note("turn/started", **TURN), mask=False)],
        on_frame=answer,
    )
    try:
        with relaying(tmp / "outer.sock", inner.path) as relayed:
            sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
            eventually(lambda: relayed.states == ["working"], what="working")

            def broken(direction: object, line: bytes) -> None:
                raise RuntimeError("a bug")

            relayed.relay.mapping.feed_line = broken  # type: ignore[method-assign]
            sock.sendall(encode(0x1, b'{"id":1,"result":{}}', mask=True))
            eventually(lambda: relayed.states == ["working", "idle"], what="idle")
            while not rest.endswith(answer):
                rest += sock.recv(65536)
            sock.sendall(encode(0x8, b"", mask=True))
            read_until_eof(sock, rest)
            sock.close()
    finally:
        inner.close()
    assert relayed.transitions[-1].cause == "analysis failed"
    assert relayed.relay.analysis.failed
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "analysis failed" in record.getMessage() and record.exc_info is not None


def test_one_connections_reading_never_holds_back_another_connections_bytes(
    tmp: Path,
) -> None:
    """A second connection's flood of tiny whole messages (no fragment to count) was read
    a chunk at a time, each chunk tens of thousands of frames, while the user's own bytes
    waited. Now a connection's reading gives way every half millisecond: the user's message
    goes through while the flood's first chunk is still being read.

    Decided by the relay's own order, not by a clock: the flood's frames come with its
    upgrade (so its first chunk is large), its reading is held at its first slice until the
    user's message is in the user's socket, and the flood frames read by the time the relay
    reads the user's message are counted on the relay's thread."""
    flood_messages = 20_000  # 120 kB with the upgrade: one chunk, or two, of the relay's reads
    heads = threading.Event()
    flood_started, user_sent = threading.Event(), threading.Event()

    def app_server(listener: socket.socket) -> None:
        def one(conn: socket.socket) -> None:
            with conn, suppress(OSError, AssertionError):
                head, _ = read_head(conn)
                key = next(
                    (
                        line.split(b":", 1)[1].strip()
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"sec-websocket-key:")
                    ),
                    b"",
                )
                conn.sendall(RESPONSE_HEAD % accept_key(key))
                if b" /flood " in head.split(b"\r\n")[0]:
                    heads.set()
                    while conn.recv(1 << 20):
                        pass
                    return
                if conn.recv(65536):  # the user's message: answered at once
                    conn.sendall(encode(0x1, b'{"id":1,"result":{}}', mask=False))
                read_until_eof(conn)

        with suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=one, args=(conn,), daemon=True).start()

    inner = socket.socket(socket.AF_UNIX)
    inner.bind(str(tmp / "inner"))
    inner.listen()
    threading.Thread(target=app_server, args=(inner,), daemon=True).start()
    with relaying(tmp / "outer", tmp / "inner") as relayed:
        flood_read = 0
        at_user: list[int] = []
        readers: list[object] = []
        analyse = relayed.relay._analyse

        def counting(reader: Any, data: bytes) -> list[Transition]:
            nonlocal flood_read
            out = analyse(reader, data)
            if reader.sender != "client":
                return out
            if not readers:
                readers.append(reader)  # the flood's: the user sends nothing before it
            if reader is readers[0]:
                flood_read += data.count(b"\x81\x80")
                if not flood_started.is_set():
                    flood_started.set()
                    assert user_sent.wait(WAIT), "the user's message was not sent"
            elif not at_user:
                at_user.append(flood_read)
            return out

        user, _, _ = connect(tmp / "outer", upgrade_request())
        relayed.relay._analyse = counting  # type: ignore[method-assign]
        flood = socket.socket(socket.AF_UNIX)  # its 101 comes once its first chunk is read
        flood.settimeout(10)
        flood.connect(str(tmp / "outer"))
        sender = threading.Thread(  # what the socket's buffer does not hold waits for reads
            target=flood.sendall,
            args=(
                upgrade_request().replace(b"GET /rpc ", b"GET /flood ", 1)
                + encode(0x1, b"", mask=True) * flood_messages,
            ),
        )
        sender.start()
        assert heads.wait(WAIT) and flood_started.wait(WAIT)
        user.sendall(encode(0x1, b'{"id":1,"method":"thread/loaded/list"}', mask=True))
        user_sent.set()
        answer = user.recv(65536)
        assert answer.startswith(b"\x81")
        eventually(lambda: bool(at_user), what="the user's message read")
        assert at_user[0] < flood_messages // 4, (
            f"the user's bytes waited for {at_user[0]} of the flood's {flood_messages} frames"
        )
        sender.join(WAIT)
        flood.close()
        user.close()
    inner.close()


def compressed(frame: bytes) -> bytes:
    """``frame`` with RSV1 set: a permessage-deflate frame, as far as a reader can tell."""
    return bytes([frame[0] | 0x40]) + frame[1:]


def test_a_direction_that_cannot_be_read_is_warned_about_once(
    tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A TUI and an app-server agreeing on permessage-deflate left presence idle for the
    whole session, said only at debug. A direction that cannot be read is a warning, once
    a session, naming the compression; the bytes pass all the same."""
    import logging

    caplog.set_level(logging.DEBUG, logger="codex_presence")
    server_frame = compressed(encode(0x1, b"\x00\x01deflated", mask=False))
    inner = Inner(tmp / "inner.sock", [server_frame])
    try:
        with relaying(tmp / "outer.sock", inner.path):
            for _ in range(2):
                sock, _, rest = connect(tmp / "outer.sock", upgrade_request())
                sock.sendall(compressed(encode(0x1, b"\x00\x02deflated", mask=True)))
                sock.sendall(encode(0x8, b"", mask=True))
                sock.shutdown(socket.SHUT_WR)
                assert server_frame in read_until_eof(sock, rest)
                sock.close()
            eventually(lambda: len(inner.received) == 2, what="the server's ends")
    finally:
        inner.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert "cannot be read" in warnings[0] and "permessage-deflate" in warnings[0]
