"""A websocket frame codec of our own (RFC 6455 §5.2), for tests that must not trust the
library under test (wsproto) to check what the relay reads and writes, and for
``bench/ws_flood.py`` (so it lives in ``bench/``, standard library only)."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from dataclasses import dataclass

__all__ = ["GUID", "Frame", "accept_key", "decode", "encode", "upgrade_request"]

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


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
    """Every whole frame in ``data`` (AssertionError on a truncated one)."""
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


def accept_key(key: bytes) -> bytes:
    return base64.b64encode(hashlib.sha1(key + GUID).digest())


def upgrade_request(*extra: bytes, key: bytes | None = None) -> bytes:
    """The TUI's upgrade request (docs/codex-tui.md §2), with ``extra`` header lines."""
    key = key or base64.b64encode(os.urandom(16))
    lines = [
        b"GET /rpc HTTP/1.1",
        b"Host: localhost",
        b"Connection: Upgrade",
        b"Upgrade: websocket",
        b"Sec-WebSocket-Version: 13",
        b"Sec-WebSocket-Key: " + key,
        b"x-codex-app-server-compression: zstd-stream-v1",
        *extra,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"
