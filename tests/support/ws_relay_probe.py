"""A prototype websocket relay for codex's unix socket (issue 16), test side.

``codex --remote unix://OUTER`` → this relay → ``codex app-server --listen unix://INNER``.
Each client connection accepted on OUTER gets its own connection to INNER; the relay copies
the HTTP upgrade across (minus the ``x-codex-app-server-compression: zstd-stream-v1`` offer)
and then the websocket frames both ways, logging every complete text message to a
recording in the project's format (:func:`codex_presence.core.recording.encode_entry`).

How, and why:

* **The upgrade** is parsed with h11 (wsproto's own HTTP layer) but relayed as the head's
  own lines: the client's ``Sec-WebSocket-Key`` reaches the server and the server's
  ``Sec-WebSocket-Accept`` (computed from that key) reaches the client, so the handshake is
  end to end and every other header (the server's
  ``x-codex-websocket-max-unfragmented-message-bytes``) passes as it was. wsproto's own
  handshake objects would rebuild both heads and, server side, drop bytes pipelined after
  the request.
* **Frames** go through four :class:`wsproto.connection.Connection` objects per pair, one
  per side and direction: the side facing the client parses as a server (unmasks, insists
  on masked frames) and writes unmasked; the side facing the app-server parses as a client
  and writes frames masked with a fresh key. A receiving and a sending object per side keep
  the two directions apart: a close received does not stop data still going the other way.
* **Payloads are byte-exact; frame boundaries are kept.** Each frame is forwarded when it
  is complete, with the same FIN bit, so a message fragmented by its sender arrives
  fragmented the same way. (wsproto decodes text incrementally: a fragment that ends inside
  a UTF-8 sequence has that sequence's bytes moved to the next fragment. The message's
  bytes are the same.)
* **Control frames pass through**: pings and pongs to the other side, not answered here;
  a close frame is forwarded with its code and reason (no status code stays none: 1005);
  a connection that ends without a close frame is ended the same way on the other side.
* **Nothing here closes a client connection on its own**, except :meth:`RelayProbe.drop`,
  which exists only so that a test can provoke the TUI's reconnect.
* The recording is written in forwarding order, after the frame was written on; a
  sidecar *wire log* (JSON lines) keeps what the recording format cannot: connections,
  heads, close codes, pings, frame counts.

Run it by hand::

    python -m tests.support.ws_relay_probe --listen /tmp/outer.sock --connect /tmp/inner.sock \\
        --record rec.jsonl --wire-log wire.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import anyio.abc
import anyio.from_thread
import h11
import orjson
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from codex_presence.core.recording import encode_end, encode_entry

__all__ = ["RelayProbe", "measure_round_trips", "running_relay", "strip_compression_offer"]

CHUNK = 256 * 1024
COMPRESSION_HEADER = b"x-codex-app-server-compression"
COMPRESSION_OFFER = b"zstd-stream-v1"
MAX_HEAD = 64 * 1024


def strip_compression_offer(
    headers: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """``headers`` without the ``zstd-stream-v1`` token of the compression header (the
    header goes when no other token is left); and whether anything was stripped."""
    kept: list[tuple[bytes, bytes]] = []
    stripped = False
    for name, value in headers:
        if name.lower() != COMPRESSION_HEADER:
            kept.append((name, value))
            continue
        tokens = [t.strip() for t in value.split(b",")]
        others = [t for t in tokens if t and t.lower() != COMPRESSION_OFFER]
        if len(others) != len([t for t in tokens if t]):
            stripped = True
        if others:
            kept.append((name, b", ".join(others)))
    return kept, stripped


def _head(start_line: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [start_line, *(name + b": " + value for name, value in headers)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


class _Recorder:
    """The recording (project format) and the wire log, both in forwarding order."""

    def __init__(self, recording: Path | None, wire_log: Path | None) -> None:
        self.start = time.monotonic()
        self._rec: BinaryIO | None = recording.open("wb") if recording else None
        self._wire: BinaryIO | None = wire_log.open("wb") if wire_log else None
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.start

    def message(self, direction: str, payload: bytes) -> None:
        if self._rec is not None:
            with self._lock:
                self._rec.write(encode_entry(self.now(), direction, payload))  # type: ignore[arg-type]
                self._rec.flush()

    def wire(self, conn: int, event: str, **fields: Any) -> None:
        if self._wire is not None:
            line = orjson.dumps({"t": round(self.now(), 6), "conn": conn, "event": event, **fields})
            with self._lock:
                self._wire.write(line + b"\n")
                self._wire.flush()

    def close(self) -> None:
        with self._lock:
            if self._rec is not None:
                self._rec.write(encode_end(self.now()))
                self._rec.close()
                self._rec = None
            if self._wire is not None:
                self._wire.close()
                self._wire = None


@dataclass
class _Side:
    """One end of a pair: its stream, a parser for what it sends, a writer for it."""

    name: str  # "client" or "server": who is on the other end of this stream
    stream: anyio.abc.SocketStream
    rx: Connection
    tx: Connection
    frames: int = 0
    messages: int = 0
    fragmented: int = 0
    eof: bool = False


@dataclass
class _Pair:
    number: int
    client: _Side
    server: _Side | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class _HeadReader:
    """Reads one HTTP head (and keeps what came after it) with h11."""

    def __init__(self, role: type[h11.CLIENT] | type[h11.SERVER]) -> None:
        self.h11 = h11.Connection(role, max_incomplete_event_size=MAX_HEAD)

    async def read(
        self, stream: anyio.abc.SocketStream
    ) -> h11.Request | h11.InformationalResponse | h11.Response | None:
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await stream.receive(CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    data = b""
                self.h11.receive_data(data)
                continue
            if isinstance(event, h11.Request | h11.InformationalResponse | h11.Response):
                return event
            return None


class RelayProbe:
    """The relay: serve OUTER until cancelled, one task group per client connection."""

    def __init__(
        self,
        outer: Path,
        inner: Path,
        *,
        recording: Path | None = None,
        wire_log: Path | None = None,
    ) -> None:
        self.outer = outer
        self.inner = inner
        self._recorder = _Recorder(recording, wire_log)
        self._numbers = itertools.count(1)
        self.pairs: dict[int, _Pair] = {}
        self.connections = 0
        self.stripped_offers = 0
        self.request_heads: list[list[tuple[str, str]]] = []
        self.response_heads: list[list[tuple[str, str]]] = []
        self.close_frames: list[dict[str, Any]] = []
        self.on_message: Callable[[str, bytes], None] | None = None
        """Called with (direction, payload) of every text message, after forwarding."""

    # -- serving ---------------------------------------------------------------------------

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with suppress(FileNotFoundError):
            self.outer.unlink()
        listener = await anyio.create_unix_listener(self.outer, mode=0o600)
        async with listener, anyio.create_task_group() as tg:
            task_status.started()
            while True:
                stream = await listener.accept()
                tg.start_soon(self._serve_pair, stream)

    def now(self) -> float:
        """Seconds on the recording's clock."""
        return self._recorder.now()

    def close(self) -> None:
        self._recorder.close()
        with suppress(FileNotFoundError):
            self.outer.unlink()

    def drop(self) -> int:
        """Test only: abort every live pair, both sides, as a broken connection would
        (no close frame). Returns how many pairs were dropped."""
        dropped = 0
        for pair in list(self.pairs.values()):
            pair.scope.cancel()
            dropped += 1
        return dropped

    async def _serve_pair(self, client_stream: anyio.abc.SocketStream) -> None:
        number = next(self._numbers)
        self.connections += 1
        rec = self._recorder
        client = _Side(
            "client",
            client_stream,
            Connection(ConnectionType.SERVER),
            Connection(ConnectionType.SERVER),
        )
        pair = _Pair(number, client)
        self.pairs[number] = pair
        rec.wire(number, "accept")
        try:
            with pair.scope:
                await self._run_pair(pair)
            if pair.scope.cancelled_caught:
                rec.wire(number, "dropped")
        finally:
            del self.pairs[number]
            with anyio.CancelScope(shield=True):
                await client_stream.aclose()
                if pair.server is not None:
                    await pair.server.stream.aclose()
            rec.wire(number, "closed")

    async def _run_pair(self, pair: _Pair) -> None:
        rec = self._recorder
        number = pair.number
        reader = _HeadReader(h11.SERVER)
        request = await reader.read(pair.client.stream)
        if not isinstance(request, h11.Request):
            rec.wire(number, "no-request")
            return
        raw = list(request.headers.raw_items())
        self.request_heads.append([(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw])
        headers, stripped = strip_compression_offer(raw)
        self.stripped_offers += stripped
        rec.wire(
            number,
            "request",
            target=request.target.decode("latin-1"),
            headers=[[n.decode("latin-1"), v.decode("latin-1")] for n, v in raw],
            stripped=stripped,
        )
        try:
            server_stream = await anyio.connect_unix(self.inner)
        except OSError as exc:
            # The app-server is gone: the client sees its connection end, as with a dead
            # daemon (the TUI then reports the failure itself).
            rec.wire(number, "inner-unreachable", error=str(exc))
            return
        server = _Side(
            "server",
            server_stream,
            Connection(ConnectionType.CLIENT),
            Connection(ConnectionType.CLIENT),
        )
        pair.server = server
        line = b"GET " + request.target + b" HTTP/" + request.http_version
        await server_stream.send(_head(line, headers))
        client_early = reader.h11.trailing_data[0]

        response_reader = _HeadReader(h11.CLIENT)
        # h11 needs to have "sent" a request before it parses a response.
        response_reader.h11.send(h11.Request(method=b"GET", target=request.target, headers=headers))
        response = await response_reader.read(server_stream)
        if response is None:
            rec.wire(number, "no-response")
            await pair.client.stream.send_eof()
            return
        raw_response = list(response.headers.raw_items())
        self.response_heads.append(
            [(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw_response]
        )
        rec.wire(
            number,
            "response",
            status=response.status_code,
            headers=[[n.decode("latin-1"), v.decode("latin-1")] for n, v in raw_response],
        )
        status_line = b"HTTP/%s %d %s" % (
            response.http_version,
            response.status_code,
            response.reason,
        )
        await pair.client.stream.send(_head(status_line, raw_response))
        if response.status_code != 101:
            # Not an upgrade: pass the rest of the answer on as it comes, then end.
            rest = response_reader.h11.trailing_data[0]
            if rest:
                await pair.client.stream.send(rest)
            await self._copy_raw(server_stream, pair.client.stream)
            return
        server_early = response_reader.h11.trailing_data[0]
        if client_early:
            pair.client.rx.receive_data(client_early)
        if server_early:
            server.rx.receive_data(server_early)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump, pair, pair.client, server, "client")
            tg.start_soon(self._pump, pair, server, pair.client, "server")
        rec.wire(
            number,
            "frames",
            client_frames=pair.client.frames,
            client_messages=pair.client.messages,
            client_fragmented=pair.client.fragmented,
            server_frames=server.frames,
            server_messages=server.messages,
            server_fragmented=server.fragmented,
        )

    async def _copy_raw(self, src: anyio.abc.SocketStream, dst: anyio.abc.SocketStream) -> None:
        while True:
            try:
                data = await src.receive(CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
            await dst.send(data)
        with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await dst.send_eof()

    async def _pump(self, pair: _Pair, src: _Side, dst: _Side, direction: str) -> None:
        """Frames read from ``src`` (sent by ``direction``) are written to ``dst``."""
        rec = self._recorder
        frame: list[str | bytes] = []
        message: list[str | bytes] = []
        fragments = 0
        # Events already parsed from bytes that came with the head.
        pending_events = True
        while True:
            data: bytes | None = b""
            if not pending_events:
                try:
                    data = await src.stream.receive(CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    data = None
                if src.rx.state is ConnectionState.CLOSED:
                    if data is None:
                        break
                    continue  # bytes after a close are nobody's business
                try:
                    src.rx.receive_data(data)
                except RemoteProtocolError as exc:
                    rec.wire(pair.number, "protocol-error", side=src.name, error=str(exc))
                    data = None
            pending_events = False
            out = bytearray()
            texts: list[bytes] = []
            try:
                for event in src.rx.events():
                    if isinstance(event, TextMessage | BytesMessage):
                        frame.append(event.data)
                        if not event.frame_finished:
                            continue
                        whole: str | bytes = (
                            "".join(frame)  # type: ignore[arg-type]
                            if isinstance(event, TextMessage)
                            else b"".join(frame)  # type: ignore[arg-type]
                        )
                        frame.clear()
                        src.frames += 1
                        fragments += 1
                        out += dst.tx.send(
                            Message(data=whole, message_finished=event.message_finished)
                        )
                        message.append(whole)
                        if event.message_finished:
                            src.messages += 1
                            if fragments > 1:
                                src.fragmented += 1
                                rec.wire(
                                    pair.number, "fragmented", side=direction, frames=fragments
                                )
                            fragments = 0
                            if isinstance(event, TextMessage):
                                texts.append("".join(message).encode())  # type: ignore[arg-type]
                            else:
                                payload = b"".join(message)  # type: ignore[arg-type]
                                rec.wire(pair.number, "binary", side=direction, size=len(payload))
                                texts.append(payload)
                            message.clear()
                    elif isinstance(event, Ping):
                        rec.wire(pair.number, "ping", side=direction, payload=event.payload.hex())
                        out += dst.tx.send(Ping(payload=event.payload))
                    elif isinstance(event, Pong):
                        rec.wire(pair.number, "pong", side=direction, payload=event.payload.hex())
                        out += dst.tx.send(Pong(payload=event.payload))
                    elif isinstance(event, CloseConnection):
                        if data is None:
                            continue  # wsproto's 1006 for a connection lost: no frame came
                        close = {"side": direction, "code": int(event.code), "reason": event.reason}
                        self.close_frames.append({"conn": pair.number, **close})
                        rec.wire(pair.number, "close", **close)
                        if dst.tx.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
                            out += dst.tx.send(
                                CloseConnection(code=event.code, reason=event.reason)
                            )
            except LocalProtocolError as exc:
                rec.wire(pair.number, "not-forwarded", side=direction, error=str(exc))
            if out:
                try:
                    await dst.stream.send(bytes(out))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    rec.wire(pair.number, "write-failed", side=dst.name, error=repr(exc))
                    data = None
                    texts.clear()
            for payload in texts:
                rec.message(direction, payload)
                if self.on_message is not None:
                    self.on_message(direction, payload)
            if data is None:
                src.eof = True
                rec.wire(pair.number, "eof", side=direction)
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    await dst.stream.send_eof()
                return


@contextmanager
def running_relay(
    outer: Path,
    inner: Path,
    *,
    recording: Path | None = None,
    wire_log: Path | None = None,
) -> Iterator[tuple[RelayProbe, anyio.from_thread.BlockingPortal]]:
    """The relay serving on its own event loop thread for the duration of the block."""
    relay = RelayProbe(outer, inner, recording=recording, wire_log=wire_log)
    with anyio.from_thread.start_blocking_portal("asyncio") as portal:
        future, _ = portal.start_task(relay.serve)
        try:
            yield relay, portal
        finally:
            future.cancel()
            with suppress(BaseException):
                future.result(timeout=10)
            relay.close()


# -- a minimal blocking websocket client, for latency and framing checks ------------------


class BlockingClient:
    """A websocket client over a unix socket (wsproto, blocking I/O)."""

    def __init__(
        self, path: Path, target: str = "/rpc", headers: list[tuple[str, str]] | None = None
    ) -> None:
        from wsproto import WSConnection
        from wsproto.events import AcceptConnection, Request

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(str(path))
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(
            self.ws.send(Request(host="localhost", target=target, extra_headers=headers or []))
        )
        self.accept: AcceptConnection | None = None
        while self.accept is None:
            self._fill()
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    self.accept = event
                else:
                    raise RuntimeError(f"handshake failed: {event}")
        self._texts: list[str] = []
        self._pending: list[Any] = []

    def _fill(self) -> None:
        data = self.sock.recv(CHUNK)
        self.ws.receive_data(data or None)

    def send_text(self, text: str) -> None:
        self.sock.sendall(self.ws.send(Message(data=text)))

    def receive_text(self) -> str:
        while True:
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    self._texts.append(event.data)
                    if event.message_finished:
                        text = "".join(self._texts)
                        self._texts.clear()
                        return text
                elif isinstance(event, Ping):
                    self.sock.sendall(self.ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    raise EOFError(f"closed {event.code}")
            self._fill()

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Send a request and read until its response (notifications are skipped)."""
        self.send_text(orjson.dumps(payload).decode())
        while True:
            msg = orjson.loads(self.receive_text())
            if isinstance(msg, dict) and msg.get("id") == payload["id"] and "method" not in msg:
                return msg

    def close(self) -> None:
        with suppress(OSError, LocalProtocolError):
            self.sock.sendall(self.ws.send(CloseConnection(code=1000)))
        self.sock.close()


def measure_round_trips(
    direct: Path, relayed: Path, *, rounds: int = 400, warmup: int = 20
) -> dict[str, dict[str, float]]:
    """Round trips of a cheap request, direct and through the relay, interleaved so that
    the machine's load falls on both alike. Times in milliseconds."""
    clients = {"direct": BlockingClient(direct), "relay": BlockingClient(relayed)}
    init = {
        "method": "initialize",
        "id": 0,
        "params": {
            "clientInfo": {"name": "relay_probe", "title": None, "version": "0.0.1"},
            "capabilities": {"experimentalApi": True},
        },
    }
    for client in clients.values():
        client.request(init)
        client.send_text('{"method":"initialized"}')
    samples: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for n in range(1, warmup + rounds + 1):
            order = list(clients.items()) if n % 2 else list(reversed(clients.items()))
            for name, client in order:
                started = time.perf_counter_ns()
                client.request({"method": "thread/loaded/list", "id": n, "params": {}})
                elapsed = (time.perf_counter_ns() - started) / 1e6
                if n > warmup:
                    samples[name].append(elapsed)
    finally:
        for client in clients.values():
            client.close()
    result: dict[str, dict[str, float]] = {}
    for name, values in samples.items():
        values.sort()
        result[name] = {
            "p50": statistics.median(values),
            "p99": values[min(len(values) - 1, int(len(values) * 0.99))],
            "mean": statistics.fmean(values),
            "n": float(len(values)),
        }
    added = sorted(r - d for r, d in zip(samples["relay"], samples["direct"], strict=True))
    result["added"] = {
        "p50": statistics.median(added),
        "p99": added[min(len(added) - 1, int(len(added) * 0.99))],
        "mean": statistics.fmean(added),
        "n": float(len(added)),
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=Path, required=True)
    parser.add_argument("--connect", type=Path, required=True)
    parser.add_argument("--record", type=Path)
    parser.add_argument("--wire-log", type=Path)
    args = parser.parse_args()
    relay = RelayProbe(args.listen, args.connect, recording=args.record, wire_log=args.wire_log)
    try:
        anyio.run(relay.serve)
    except KeyboardInterrupt:
        pass
    finally:
        relay.close()


if __name__ == "__main__":
    os.umask(0o077)
    main()
