"""The sans-I/O side of the TUI's websocket traffic (``core/codex/websocket.py``), with plain data:
the request head and its compression offer, each direction read into messages, the
hang-up rule, and the recording's connection lines replayed through the same rule.

Frames are made by a codec of our own (:mod:`bench._ws_frames`), not by the library
under test.
"""

from __future__ import annotations

import orjson
import pytest

from bench._ws_frames import encode, upgrade_request
from codex_presence.core.codex.websocket import (
    ClientLinks,
    MessageReader,
    RequestHead,
    strip_compression_offer,
)
from codex_presence.core.recording import (
    detect_format,
    encode_connection,
    encode_end,
    encode_entry,
    read_entries,
)
from codex_presence.core.timeline import timeline

MAX = 1 << 20


def test_only_the_compression_offer_is_stripped() -> None:
    head = (
        b"GET /rpc HTTP/1.1\r\nHost: localhost\r\n"
        b"x-codex-app-server-compression: zstd-stream-v1\r\n"
        b"X-Codex-App-Server-Compression:other-v2 ,  ZSTD-stream-v1\r\n"
        b"x-other:  zstd-stream-v1\r\n"
    )
    stripped, changed = strip_compression_offer(head)
    assert changed
    assert stripped == (
        b"GET /rpc HTTP/1.1\r\nHost: localhost\r\n"
        b"X-Codex-App-Server-Compression: other-v2\r\n"
        b"x-other:  zstd-stream-v1\r\n"
    )
    assert strip_compression_offer(stripped) == (stripped, False)


def test_the_request_head_is_given_back_stripped_with_the_frames_after_it() -> None:
    request = upgrade_request(b"X-Kept:  as  it  was")
    frame = encode(0x1, b'{"id":1,"method":"initialize"}', mask=True)
    head = RequestHead()
    assert head.feed(request[:10]) is None
    assert head.feed(request[10:-1]) is None
    got = head.feed(request[-1:] + frame)
    assert got is not None
    forwarded, rest = got
    assert rest == frame
    assert forwarded == request.replace(b"x-codex-app-server-compression: zstd-stream-v1\r\n", b"")
    assert head.upgrade and head.stripped and head.target == b"/rpc"


@pytest.mark.parametrize(
    "data",
    [
        b"\x16\x03\x01 not http at all\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n" + b"h: v\r\n" * 15000,
    ],
    ids=["garbage", "endless-head"],
)
def test_a_head_that_is_not_one_is_passed_on_as_it_came(data: bytes) -> None:
    head = RequestHead()
    got = None
    for at in range(0, len(data), 4096):
        got = head.feed(data[at : at + 4096])
        if got is not None:
            break
    assert got is not None
    forwarded, rest = got
    assert data.startswith(forwarded) and rest == b"" and not head.upgrade


def test_an_end_of_stream_inside_the_head_passes_on_what_came() -> None:
    head = RequestHead()
    assert head.feed(b"GET /rpc HT") is None
    assert head.feed(b"") == (b"GET /rpc HT", b"")
    assert not head.upgrade


def test_client_frames_become_whole_messages_and_a_close_is_a_hangup() -> None:
    euro = "€".encode()
    reader = MessageReader("client", max_size=MAX)
    data = b"".join(
        [
            encode(0x1, b'{"id":1,"method":"a"}', mask=True),
            encode(0x1, b'{"x":"' + euro[:1], fin=False, mask=True),
            encode(0x9, b"ping", mask=True),  # a control frame between the fragments
            encode(0x0, euro[1:] + b'"}', mask=True),
            encode(0x2, b"\x00\xff", mask=True),  # binary: not the mapping's
            encode(0x8, b"", mask=True),  # close, no status code (the TUI's /exit)
            encode(0x1, b'{"after":"close"}', mask=True),
        ]
    )
    got = [m for i in range(len(data)) for m in reader.feed(data[i : i + 1])]  # byte by byte
    assert got == [b'{"id":1,"method":"a"}', '{"x":"€"}'.encode()]
    assert reader.closed and reader.binary == 1 and reader.failed is None


def test_server_frames_come_after_a_101_and_unmasked() -> None:
    reader = MessageReader("server", max_size=MAX)
    head = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n"
    frame = encode(0x1, b'{"method":"turn/started"}', mask=False)
    assert reader.feed(head[:20]) == []
    assert reader.feed(head[20:] + frame[:3]) == []
    assert reader.feed(frame[3:]) == [b'{"method":"turn/started"}']
    assert not reader.done


def test_a_server_that_does_not_switch_is_not_read() -> None:
    reader = MessageReader("server", max_size=MAX)
    assert reader.feed(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n") == []
    assert reader.failed is not None and "404" in reader.failed
    assert reader.feed(encode(0x1, b"{}", mask=False)) == []


def test_broken_frames_stop_the_reading_not_the_reader() -> None:
    reader = MessageReader("client", max_size=MAX)
    assert reader.feed(encode(0x1, b"{}", mask=False)) == []  # a client must mask
    assert reader.failed is not None
    assert reader.feed(encode(0x1, b"{}", mask=True)) == []


def test_a_message_over_the_limit_is_not_read() -> None:
    reader = MessageReader("client", max_size=10)
    data = encode(0x1, b"x" * 6, fin=False, mask=True) + encode(0x0, b"y" * 6, mask=True)
    assert reader.feed(data + encode(0x1, b"{}", mask=True)) == [b"{}"]
    assert reader.oversized == 1


def test_a_hangup_ends_the_work_only_when_no_other_connection_is_live() -> None:
    links = ClientLinks()
    assert not links.apply(1, "open")
    assert not links.apply(2, "open")  # a reconnect opens before the old one is seen lost
    assert not links.apply(1, "lost")
    assert links.apply(2, "hangup")
    assert not links.apply(2, "hangup")  # said once
    assert not links.apply(3, "hangup")  # a connection never opened
    links.apply(4, "open")
    links.apply(5, "open")
    assert not links.apply(4, "hangup")  # 5 is still there
    assert links.apply(5, "hangup")


def _approval(request_id: int = 0) -> bytes:
    return orjson.dumps(
        {
            "method": "item/commandExecution/requestApproval",
            "id": request_id,
            "params": {"threadId": "th", "turnId": "tu", "itemId": "call"},
        }
    )


TURN_STARTED = b'{"method":"turn/started","params":{"threadId":"th","turn":{"id":"tu"}}}'


def test_connection_lines_replay_through_the_same_rule() -> None:
    lines = [
        encode_connection(0.1, 1, "open"),
        encode_entry(0.2, "server", TURN_STARTED),
        encode_entry(0.3, "server", _approval()),
        encode_connection(0.4, 2, "open"),
        encode_connection(0.41, 1, "lost"),  # a drop keeps the state
        encode_entry(0.5, "server", _approval()),  # re-sent on the new connection, same id
        encode_connection(0.6, 2, "hangup"),  # /exit: idle, even with the turn running
        encode_end(0.7),
    ]
    assert detect_format(lines[0].strip()) == "recording"
    entries = list(read_entries(b"".join(lines).splitlines()))
    assert [e.connection for e in entries[:5]] == [
        (1, "open"),
        None,
        None,
        (2, "open"),
        (1, "lost"),
    ]
    rows = [(row.line, row.state, row.cause) for row in timeline(entries)]
    assert rows == [
        (2, "working", "turn/started"),
        (3, "blocked", "item/commandExecution/requestApproval"),
        (7, "idle", "hangup"),
    ]


def test_a_message_with_a_newline_inside_is_kept_raw_and_replays_alike() -> None:
    payload = b'{"method":"turn/started",\n"params":{"threadId":"th","turn":{"id":"tu"}}}'
    line = encode_entry(1.0, "server", payload)
    assert line.count(b"\n") == 1
    (entry,) = read_entries([line])
    assert entry.raw == payload
    assert [(row.state, row.cause) for row in timeline([entry])] == [
        ("working", "turn/started"),
        ("idle", "eof"),
    ]


@pytest.mark.parametrize("piece", [b"", "€".encode()], ids=["empty", "euro"])
def test_a_message_in_endless_tiny_fragments_ends_the_reading(piece: bytes) -> None:
    """Empty (or one "€") continuation frames never counted toward the cap: a second
    connection took the relay's memory from 44 to 234 MB and its time with it. Fragments
    are counted, empty ones too; past the cap the direction is no longer read, and
    nothing of the message is kept."""
    reader = MessageReader("client", max_size=MAX)
    fragment = encode(0x0, piece, fin=False, mask=True)
    assert reader.feed(encode(0x1, b"{", fin=False, mask=True)) == []
    for _ in range(20):
        assert reader.feed(fragment * 1000) == []
        if reader.done:
            break
    assert reader.failed is not None and "fragments" in reader.failed
    assert reader._parts == []
    assert reader.feed(encode(0x1, b"{}", mask=True)) == []  # no longer read
