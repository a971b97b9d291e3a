"""What another local user's flood of connections costs claude's hooks.

The hook server of ``codex-presence claude`` listens on 127.0.0.1, where every local user
can reach it. This runs the server (:class:`~codex_presence.agent.hooks.hook_server.HookServer`,
in its own process, ``-v`` logging into a file whose lines are counted) and a claude-like
client in this process that POSTs one hook per new connection every 20 ms, timing each
from ``connect`` to the whole answer. Phases, each measured against the first (the
baseline, in the same run):

* ``quiet``: no flood.
* ``secret``: N flooders of another uid (``--uid``, 65534 by default; this needs root),
  each connecting in a loop and sending a request with a wrong secret.
* ``idle``: N flooders of another uid, each holding up to 200 idle connections and
  opening new ones in a loop (the oldest closed).

Per phase: the hooks' p50 / p90 / max (ms), how many passed claude's 2 s hook timeout,
the server's CPU seconds and the log lines it wrote.

    .venv/bin/python bench/hooks.py [--hooks 150] [--flooders 4] [--uid 65534] [--seconds 40]

To measure another checkout's server, put it first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BODY = b'{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Bash","tool_input":{}}'
HOOK_TIMEOUT = 2.0

_SERVE = """
import logging, sys, anyio
from codex_presence.agent.hooks.hook_server import HookServer
handler = logging.FileHandler(sys.argv[1])
root = logging.getLogger("codex_presence")
root.handlers[:] = [handler]
root.setLevel(logging.DEBUG)
async def main():
    server = HookServer(lambda message: None)
    async with anyio.create_task_group() as tg:
        url = await tg.start(server.serve)
        print(url, flush=True)
        await anyio.sleep_forever()
anyio.run(main)
"""


def flood(mode: str, port: int) -> None:
    """Run as another uid, until killed."""
    rst = struct.pack("ii", 1, 0)
    if mode == "secret":
        request = b"POST /wrong/hook HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
        while True:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, rst)  # no TIME_WAIT
            try:
                sock.connect(("127.0.0.1", port))
                sock.send(request)
            except OSError:
                pass
            sock.close()
    held: list[socket.socket] = []
    while True:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, rst)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            sock.close()
            continue
        held.append(sock)
        if len(held) > 200:
            held.pop(0).close()


def spawn_flooder(mode: str, port: int, uid: int) -> int:
    """A forked flooder running as ``uid``; its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            flood(mode, port)
        finally:
            os._exit(1)
    return pid


def hook(port: int, path: str) -> float:
    """One hook on a new connection, as claude sends it; seconds."""
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(BODY)}\r\n\r\n"
    ).encode()
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + BODY)
        answer = b""
        while not answer.endswith(b"{}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    took = time.perf_counter() - start
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer: {answer[:80]!r}")
    return took


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hooks", type=int, default=150)
    parser.add_argument("--flooders", type=int, default=4)
    parser.add_argument("--uid", type=int, default=65534)
    parser.add_argument("--phase", action="append", choices=["secret", "idle"])
    parser.add_argument("--seconds", type=float, default=40.0, help="at most, per phase")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="bench-hooks-")) / "hooks.log"
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(log)], stdout=subprocess.PIPE, cwd=ROOT
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().decode().strip()
        port = int(url.split(":")[2].split("/")[0])
        path = "/" + url.split("/", 3)[3]
        for _ in range(20):  # warm-up
            hook(port, path)
        print(f"hook server {server.pid}; {args.hooks} hooks per phase, one every 20 ms")
        baseline: float | None = None
        for phase in ["quiet", *(args.phase or ["secret", "idle"])]:
            flooders = [
                spawn_flooder(phase, port, args.uid)
                for _ in range(args.flooders if phase != "quiet" else 0)
            ]
            try:
                time.sleep(1.0 if flooders else 0)
                lines_before = len(log.read_bytes().splitlines())
                cpu_before = cpu_seconds(server.pid)
                started = time.monotonic()
                took = []
                failed = 0
                for _ in range(args.hooks):
                    if time.monotonic() - started > args.seconds:
                        break
                    try:
                        took.append(hook(port, path))
                    except OSError:  # reset, refused: claude's hook fails
                        failed += 1
                        continue
                    if os.environ.get("BENCH_TRACE"):
                        print(f"{took[-1] * 1000:.1f}", end=" ", flush=True)
                    time.sleep(0.02)
                elapsed = time.monotonic() - started
                cpu = cpu_seconds(server.pid) - cpu_before
                lines = len(log.read_bytes().splitlines()) - lines_before
            finally:
                for flooder in flooders:
                    os.kill(flooder, signal.SIGKILL)
                    os.waitpid(flooder, 0)
            ms = sorted(t * 1000 for t in took)
            p50 = statistics.median(ms)
            baseline = baseline or p50
            late = sum(t > HOOK_TIMEOUT for t in took)
            print(
                f"  {phase:<7} x{len(flooders)}  n={len(ms):<4}"
                f" p50 {p50:8.2f} ms ({p50 / baseline:6.1f}x)"
                f"   p90 {statistics.quantiles(ms, n=10)[8]:8.2f} ms   max {ms[-1]:8.2f} ms"
                f"   >2s: {late:<3} failed: {failed:<3} server CPU {cpu / elapsed:5.0%}"
                f"   log lines {lines} in {elapsed:.1f} s"
            )
            time.sleep(1.0)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(log.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
