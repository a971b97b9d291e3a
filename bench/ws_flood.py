"""What a second connection's fragment flood costs the user's own connection through the
TUI relay of ``codex-presence codex`` (agent/tui/ws_relay.py), latency and memory.

Three processes: the relay (:class:`~codex_presence.agent.tui.ws_relay.WsRelay` with the
codex mapping, serving OUTER), a stand-in app-server on INNER (it echoes each text message
of a connection, and drops unread whatever comes on a connection to ``/flood``), and this
script: the user's client sends one small request every 10 ms and times each until its
echo comes back. Phases, the first the baseline of the same run:

* ``quiet``: the user's connection alone;
* ``empty`` / ``euro``: a second connection (a forked process) opens a text message and
  sends continuation frames without end, empty or one "€" each, as fast as it can;
* ``whole``: the same with whole empty text messages (no fragment to count).

Per phase: the round trip's p50 / p99 / max (ms), and the relay's peak memory (VmHWM).

    .venv/bin/python bench/ws_flood.py [--messages 300] [--seconds 20]
                                       [--phase empty|euro|whole ...]

To measure another checkout's relay, run this file from that checkout.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from bench._ws_frames import encode  # noqa: E402

_RELAY = """
import socket, sys, time, anyio
from codex_presence.agent.tui.ws_relay import WsRelay
from codex_presence.core.codex.mapping import CodexMapping
outer, inner = sys.argv[1], sys.argv[2]
listener = socket.socket(socket.AF_UNIX)
listener.bind(outer)
listener.listen(16)
relay = WsRelay(inner=inner, mapping=CodexMapping(), on_transition=lambda t: None,
                clock=time.monotonic)
print("ready", flush=True)
anyio.run(relay.serve, listener)
"""

_SERVER = """
import base64, hashlib, socket, sys, threading
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import TextMessage
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(16)
def serve(conn):
    head = b""
    while b"\\r\\n\\r\\n" not in head:
        head += conn.recv(65536)
    head, rest = head.split(b"\\r\\n\\r\\n", 1)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\\r\\n")
           if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nupgrade: websocket\\r\\n"
                 b"connection: upgrade\\r\\nsec-websocket-accept: " + accept + b"\\r\\n\\r\\n")
    if b" /flood " in head.split(b"\\r\\n")[0]:
        while conn.recv(1 << 20):
            pass
        return
    ws = Connection(ConnectionType.SERVER)
    ws.receive_data(rest)
    parts = []
    while True:
        for event in ws.events():
            if isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    conn.sendall(ws.send(TextMessage(data="".join(parts))))
                    parts = []
        data = conn.recv(65536)
        if not data:
            return
        ws.receive_data(data)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def upgrade(sock: socket.socket, target: str) -> bytes:
    sock.sendall(
        f"GET {target} HTTP/1.1\r\nhost: localhost\r\nupgrade: websocket\r\n"
        "connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "sec-websocket-version: 13\r\n\r\n".encode()
    )
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(65536)
    return got.split(b"\r\n\r\n", 1)[1]


def flood(outer: str, kind: str) -> None:
    """Forked: a second connection's endless continuation frames."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(outer)
    upgrade(sock, "/flood")
    payload = "€".encode() if kind == "euro" else b""
    if kind == "whole":  # whole empty messages, no fragments at all
        frame = encode(0x1, b"", mask=True)
    else:
        frame = encode(0x0, payload, fin=False, mask=True)
        sock.sendall(encode(0x1, b"{", fin=False, mask=True))
    batch = frame * ((256 * 1024) // len(frame))
    while True:
        sock.sendall(batch)


def round_trip(sock: socket.socket, n: int, pending: bytearray) -> float:
    message = b'{"id":%d,"method":"thread/loaded/list","params":{}}' % n
    start = time.perf_counter()
    sock.sendall(encode(0x1, message, mask=True))
    while True:  # the echo: an unmasked text frame of the same length
        if len(pending) >= 2 and len(pending) >= 2 + (pending[1] & 0x7F):
            size = 2 + (pending[1] & 0x7F)
            del pending[:size]
            return time.perf_counter() - start
        pending += sock.recv(65536)


def peak_memory_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--phase", action="append", choices=["empty", "euro", "whole"])
    parser.add_argument("--seconds", type=float, default=20.0, help="at most, per phase")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wsf-", dir="/tmp"))
    outer, inner = str(tmp / "outer.sock"), str(tmp / "inner.sock")
    server = subprocess.Popen([sys.executable, "-c", _SERVER, inner], stdout=subprocess.PIPE)
    relay = subprocess.Popen(
        [sys.executable, "-c", _RELAY, outer, inner], stdout=subprocess.PIPE, cwd=ROOT
    )
    flooders: list[int] = []
    try:
        for proc in (server, relay):
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        user = socket.socket(socket.AF_UNIX)
        user.connect(outer)
        user.settimeout(args.seconds)
        pending = bytearray(upgrade(user, "/rpc"))
        for n in range(50):  # warm-up
            round_trip(user, n, pending)
        print(f"relay {relay.pid}; {args.messages} round trips per phase, one every 10 ms")
        baseline: float | None = None
        for phase in ["quiet", *(args.phase or ["empty", "euro", "whole"])]:
            if phase != "quiet":
                pid = os.fork()
                if pid == 0:
                    try:
                        flood(outer, phase)
                    finally:
                        os._exit(0)
                flooders.append(pid)
                time.sleep(1.0)
            took = []
            ends = time.monotonic() + args.seconds
            for n in range(args.messages):
                try:
                    took.append(round_trip(user, n, pending) * 1000)
                except TimeoutError:  # stalled: counted as the time waited, and stop
                    took.append(args.seconds * 1000)
                    break
                if time.monotonic() > ends:
                    break
                time.sleep(0.01)
            for pid in flooders:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            flooders.clear()
            ms = sorted(took)
            p50 = statistics.median(ms)
            baseline = baseline or p50
            p99 = statistics.quantiles(ms, n=100)[98] if len(ms) > 1 else ms[-1]
            print(
                f"  {phase:<6} n={len(ms):<4} p50 {p50:8.2f} ms ({p50 / baseline:6.1f}x)"
                f"   p99 {p99:8.2f} ms"
                f"   max {ms[-1]:8.2f} ms   relay peak memory {peak_memory_mb(relay.pid):6.1f} MB"
            )
            time.sleep(0.5)
    finally:
        for pid in flooders:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for proc in (relay, server):
            proc.kill()
            proc.wait()
        for path in (outer, inner):
            Path(path).unlink(missing_ok=True)
        tmp.rmdir()


if __name__ == "__main__":
    main()
