"""The issue-16 groundwork: the websocket relay probe on the wire, and the real TUI through it.

The wire tests put hand-made frames on both sides of :mod:`tests.support.ws_relay_probe` and parse
what comes out with a parser of their own (not wsproto's), so that masking, FIN bits,
opcodes and payload bytes are checked independently of the library under test.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from codex_presence.core.recording import read_entries
from tests.support.tui_driver import record, short_tempdir
from tests.support.ws_relay_probe import running_relay, strip_compression_offer

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# -- a frame codec of our own --------------------------------------------------------------


@dataclass
class Frame:
    fin: bool
    opcode: int
    masked: bool
    payload: bytes


def encode(opcode: int, payload: bytes, *, fin: bool = True, mask: bool) -> bytes:
    head = bytes([(0x80 if fin else 0) | opcode])
    length = len(payload)
    bit = 0x80 if mask else 0
    if length < 126:
        head += bytes([bit | length])
    elif length < 65536:
        head += bytes([bit | 126]) + struct.pack("!H", length)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", length)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def decode(data: bytes) -> list[Frame]:
    frames: list[Frame] = []
    at = 0
    while at < len(data):
        first, second = data[at], data[at + 1]
        length, at = second & 0x7F, at + 2
        if length == 126:
            (length,) = struct.unpack("!H", data[at : at + 2])
            at += 2
        elif length == 127:
            (length,) = struct.unpack("!Q", data[at : at + 8])
            at += 8
        masked = bool(second & 0x80)
        key = b""
        if masked:
            key, at = data[at : at + 4], at + 4
        body = data[at : at + length]
        assert len(body) == length, "a truncated frame"
        at += length
        if masked:
            body = bytes(b ^ key[i % 4] for i, b in enumerate(body))
        frames.append(Frame(bool(first & 0x80), first & 0x0F, masked, body))
    return frames


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """An HTTP head and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "EOF inside the head"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def read_until_eof(sock: socket.socket, already: bytes = b"", timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    data = already
    while chunk := sock.recv(65536):
        data += chunk
    return data


# -- a fake inner server: answers the upgrade, sends scripted frames, keeps what it got ----


class Inner:
    def __init__(self, path: Path, frames: list[bytes]) -> None:
        self.path = path
        self.frames = frames
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
                with conn:
                    head, rest = read_head(conn)
                    self.heads.append(head)
                    key = next(
                        line.split(b":", 1)[1].strip()
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"sec-websocket-key:")
                    )
                    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
                    conn.sendall(
                        b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\n"
                        b"upgrade: websocket\r\nsec-websocket-accept: " + accept + b"\r\n"
                        b"x-codex-websocket-max-unfragmented-message-bytes: 16777216\r\n\r\n"
                        + b"".join(self.frames)
                    )
                    got = rest
                    while (close := _close_frame(got)) is None:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                    if close is not None:  # answer a close as codex would not: with a close
                        conn.sendall(encode(0x8, close.payload, mask=False))
                    conn.shutdown(socket.SHUT_WR)
                    self.received.append(read_until_eof(conn, got))

    def close(self) -> None:
        # shutdown() wakes the accept() of the serving thread (close() alone does not, and
        # a later retry of that accept would use the descriptor number, maybe reused).
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
        self.listener.close()


def _close_frame(data: bytes) -> Frame | None:
    try:
        frames = decode(data)
    except (AssertionError, IndexError, struct.error):
        return None  # not all there yet
    return next((f for f in frames if f.opcode == 0x8), None)


@pytest.fixture
def tmp() -> Iterator[Path]:
    with short_tempdir("cpt-") as path:
        yield path


def connect(path: Path, extra: bytes = b"") -> tuple[socket.socket, bytes, bytes]:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(path))
    key = base64.b64encode(os.urandom(16))
    sock.sendall(
        b"GET /rpc HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n"
        b"x-codex-app-server-compression: zstd-stream-v1\r\nx-other: kept\r\n\r\n" + extra
    )
    head, rest = read_head(sock)
    return sock, head, rest + b""  # rest: frames that came with the 101


def test_compression_offer_is_the_only_thing_stripped() -> None:
    headers = [
        (b"Host", b"localhost"),
        (b"x-codex-app-server-compression", b"zstd-stream-v1"),
        (b"X-Codex-App-Server-Compression", b"other-v2, zstd-stream-v1"),
        (b"x-other", b"zstd-stream-v1"),
    ]
    kept, stripped = strip_compression_offer(headers)
    assert stripped
    assert kept == [
        (b"Host", b"localhost"),
        (b"X-Codex-App-Server-Compression", b"other-v2"),
        (b"x-other", b"zstd-stream-v1"),
    ]
    assert strip_compression_offer(kept) == (kept, False)


def test_frames_are_remasked_and_payloads_byte_exact(tmp: Path) -> None:
    """Client→server frames leave the relay masked (fresh key), server→client unmasked;
    every payload, FIN bit and opcode is as sent, fragmented messages included (one split
    inside a UTF-8 sequence), control frames pass, and the close code comes through."""
    euro = "€".encode()  # 3 bytes: split after the first
    server_frames = [
        (0x1, b'{"method":"turn/started","params":{}}', True),
        (0x1, b'{"method":"x","params":{"t":"' + euro[:1], False),
        (0x0, euro[1:] + b'"}}', True),
        (0x9, b"srv-ping", True),
        (0x2, b"\x00\xffbinary", True),
    ]
    client_frames = [
        (0x1, b'{"id":1,"method":"initialize"}', True),
        (0x1, b'{"id":2,', False),
        (0x9, b"cli-ping", True),  # a control frame between fragments
        (0x0, b'"method":"a"}', True),
        (0xA, b"srv-ping", True),
        (0x1, b"x" * 70000, True),  # the 8-byte length form
        (0x8, b"", True),  # close, no status: 1005
    ]
    inner = Inner(
        tmp / "inner.sock",
        [encode(op, body, fin=fin, mask=False) for op, body, fin in server_frames],
    )
    recording = tmp / "rec.jsonl"
    try:
        with running_relay(tmp / "outer.sock", inner.path, recording=recording) as (relay, _):
            sock, head, rest = connect(tmp / "outer.sock")
            assert head.startswith(b"HTTP/1.1 101 ")
            assert b"x-codex-websocket-max-unfragmented-message-bytes: 16777216" in head
            sock.sendall(
                b"".join(encode(op, body, fin=fin, mask=True) for op, body, fin in client_frames)
            )
            got = decode(read_until_eof(sock, rest))
            sock.close()
            deadline = time.monotonic() + 5
            while relay.pairs and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        inner.close()
    # What the client got: the server's frames, unmasked, FIN and opcodes as sent. The
    # fragment split inside "€" arrives with the whole character in the second fragment.
    assert [(f.opcode, f.fin, f.masked) for f in got] == [
        *((op, fin, False) for op, _, fin in server_frames),
        (0x8, True, False),  # the server's answer to the close, code-less like the client's
    ]
    assert got[-1].payload == b""
    got = got[:-1]
    assert got[1].payload + got[2].payload == server_frames[1][1] + server_frames[2][1]
    assert [f.payload for i, f in enumerate(got) if i not in (1, 2)] == [
        body for i, (_, body, _) in enumerate(server_frames) if i not in (1, 2)
    ]
    # What the server got: the client's frames, masked again, byte-exact.
    sent_head = inner.heads[0]
    assert b"zstd-stream-v1" not in sent_head and b"x-other: kept" in sent_head
    forwarded = decode(inner.received[0])
    assert all(f.masked for f in forwarded)
    assert [(f.opcode, f.payload, f.fin) for f in forwarded] == client_frames
    # The recording: text messages only, whole, in the order they were forwarded.
    entries = list(read_entries(recording.read_bytes().splitlines()))
    texts = [(e.direction, e.message) for e in entries if e.message is not None]
    assert ("client", {"id": 1, "method": "initialize"}) in texts
    assert ("client", {"id": 2, "method": "a"}) in texts
    assert ("server", {"method": "x", "params": {"t": "€"}}) in texts
    assert entries[-1].end


def test_every_connection_gets_its_own_and_a_dead_server_ends_them(tmp: Path) -> None:
    inner = Inner(tmp / "inner.sock", [encode(0x1, b'{"method":"hello"}', mask=False)])
    wire = tmp / "wire.jsonl"
    with running_relay(tmp / "outer.sock", inner.path, wire_log=wire) as (relay, _):
        for _ in range(2):  # a reconnect is a new pair with its own upgrade
            sock, head, rest = connect(tmp / "outer.sock")
            assert head.startswith(b"HTTP/1.1 101 ")
            sock.sendall(encode(0x8, struct.pack("!H", 1000) + b"bye", mask=True))
            frames = decode(read_until_eof(sock, rest))
            assert [(f.opcode, f.payload) for f in frames] == [
                (0x1, b'{"method":"hello"}'),
                (0x8, struct.pack("!H", 1000) + b"bye"),
            ]
            sock.close()
        inner.close()
        (tmp / "inner.sock").unlink()
        # The server is gone: the client's connection ends, nothing is invented for it.
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(10)
        sock.connect(str(tmp / "outer.sock"))
        sock.sendall(
            b"GET /rpc HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n"
        )
        assert read_until_eof(sock) == b""
        sock.close()
        assert relay.connections == 3
    assert len(inner.heads) == 2
    assert [(c["side"], c["code"]) for c in relay.close_frames] == [
        ("client", 1000),
        ("server", 1000),
    ] * 2
    events = [orjson.loads(line)["event"] for line in wire.read_bytes().splitlines()]
    assert events.count("inner-unreachable") == 1


ROOT = Path(__file__).resolve().parent.parent
TUI_VERSIONS = sorted(p.name.removeprefix("codex-tui-") for p in ROOT.glob("fixtures/codex-tui-*"))


def tui_codex(version: str) -> Path:
    """The codex binary of ``version`` that tests/run.sh installs; a failure under CI."""
    binary = Path.home() / f".cache/codex-presence/codex-{version}/node_modules/.bin/codex"
    if not os.access(binary, os.X_OK):
        message = f"codex {version} not found at {binary} (bash tests/run.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return binary


def _entries(path: Path) -> list[tuple[str, dict[str, object]]]:
    return [
        (e.direction, e.message)
        for e in read_entries(path.read_bytes().splitlines())
        if isinstance(e.message, dict)
    ]


@pytest.mark.codex
@pytest.mark.parametrize("version", TUI_VERSIONS)
def test_the_real_tui_through_the_relay(version: str, tmp: Path) -> None:
    """An approval answered yes, then /exit, with the real TUI in tmux: the relay's
    recording holds the approval, its answer and the unsubscribe; the close is code-less."""
    result = record("approval_accepted", tmp / "out", binary=tui_codex(version))
    assert result.exit_status == 0 and result.version == version
    entries = _entries(result.recording)
    methods = [(direction, msg.get("method")) for direction, msg in entries]
    assert ("server", "item/commandExecution/requestApproval") in methods
    assert ("server", "serverRequest/resolved") in methods
    assert ("client", "thread/unsubscribe") in methods
    answers = [msg["result"] for d, msg in entries if d == "client" and "decision" in str(msg)]
    assert answers == [{"decision": "accept"}]
    wire = [orjson.loads(line) for line in result.wire_log.read_bytes().splitlines()]
    assert [w["code"] for w in wire if w["event"] == "close"] == [1005]
    request = next(w for w in wire if w["event"] == "request")
    assert request["target"] == "/rpc" and request["stripped"]
    assert ["x-codex-app-server-compression", "zstd-stream-v1"] in request["headers"]


@pytest.mark.codex
@pytest.mark.parametrize("version", TUI_VERSIONS)
def test_a_dropped_connection_resends_the_pending_approval_with_its_id(
    version: str, tmp: Path
) -> None:
    """The TUI reconnects at once (a new upgrade, initialize, thread/resume) and the server
    sends the pending approval again on the new connection, with the same request id."""
    result = record("reconnect_pending_approval", tmp / "out", binary=tui_codex(version))
    assert result.exit_status == 0
    entries = _entries(result.recording)
    approvals = [
        msg["id"]
        for d, msg in entries
        if d == "server" and msg.get("method") == "item/commandExecution/requestApproval"
    ]
    assert len(approvals) == 2 and approvals[0] == approvals[1]
    assert [msg.get("method") for d, msg in entries if d == "client"].count("initialize") == 2
    drop = next(t for t, what in result.marks if what == "drop")
    again = next(t for t, what in result.marks if what == "reconnected")
    assert again - drop < 1.0


@pytest.mark.parametrize("version", TUI_VERSIONS)
def test_the_candidate_fixtures_are_whole_recordings(version: str) -> None:
    """Every recording of fixtures/codex-tui-VERSION/ replays in the project's format and
    ends with its end line; its wire log and screens are beside it."""
    folder = ROOT / "fixtures" / f"codex-tui-{version}"
    names = sorted(p.name.removesuffix(".jsonl") for p in folder.glob("*.jsonl"))
    names = [n for n in names if not n.endswith(".wire")]
    assert "approval_accepted" in names and "exit_while_working" in names
    for name in names:
        entries = list(read_entries((folder / f"{name}.jsonl").read_bytes().splitlines()))
        assert entries[-1].end, name
        assert all(e.message is not None for e in entries[:-1]), name
        assert (folder / f"{name}.wire.jsonl").is_file() and (
            folder / f"{name}.screens.txt"
        ).is_file()
