"""What another local user's flood of connections costs a runner's hooks, by way of delivery.

A hook-driven runner gets its client's hooks one of two ways: POSTed to its loopback hook
server (:class:`~codex_presence.agent.hooks.hook_server.HookServer`, where every local user
can connect), or written into its private spool
(:class:`~codex_presence.agent.hooks.spool.HookSpool`, Linux, where no other user can reach).
This runs both readers in one process of their own (``-v`` logging into a file whose lines
are counted) and delivers one hook every 20 ms the way the client's command hook does,
``bash POSTER`` with the payload on its stdin, alternating between the two posters
(``loopback``: bash's ``/dev/tcp`` to the server; ``spool``: bash writes the file), each
timed from the poster's start until the reader says it handed the hook on. Phases, each
against the quiet one (the baseline, in the same run):

* ``quiet``: no flood.
* ``secret``: N flooders of another uid (``--uid``, 65534 by default; this needs root),
  each connecting in a loop to the server's port and sending a request with a wrong secret.
* ``idle``: N flooders of another uid, each holding up to 200 idle connections to the
  port and opening new ones in a loop (the oldest closed).

Per phase and way: the hooks' p50 / p90 / max (ms), how many took past claude's 2 s hook
timeout (or never came), the readers' CPU and the log lines they wrote, the load average.

    .venv/bin/python bench/hooks.py [--hooks 150] [--flooders 4] [--uid 65534] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import select
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

from codex_presence.core.hooks.poster import poster_script, spool_script

ROOT = Path(__file__).resolve().parent.parent
HOOK_TIMEOUT = 2.0
WAYS = ("loopback", "spool")

_SERVE = """
import logging, os, sys, anyio
from pathlib import Path
from codex_presence.agent.hooks.hook_server import HookServer
from codex_presence.agent.hooks.spool import HookSpool
handler = logging.FileHandler(sys.argv[1])
root = logging.getLogger("codex_presence")
root.handlers[:] = [handler]
root.setLevel(logging.DEBUG)
def handed_on(message, seq):
    os.write(1, b"%d\\n" % message["n"])
async def main():
    server = HookServer(handed_on)
    spool = HookSpool(Path(sys.argv[2]), handed_on)
    async with anyio.create_task_group() as tg:
        url = await tg.start(server.serve)
        await tg.start(spool.serve)
        os.write(1, url.encode() + b"\\n")
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


class Readers:
    """The readers' process: its stdout says each hook it handed on (its ``n``)."""

    def __init__(self, log: Path, spool: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(log), str(spool)], stdout=subprocess.PIPE, cwd=ROOT
        )
        assert self.process.stdout is not None
        self._out = self.process.stdout.fileno()
        self._buffer = b""
        self.url = self._line(30.0).decode()
        self.seen: set[int] = set()

    def _line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                raise TimeoutError
            self._buffer += os.read(self._out, 4096)
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def wait_for(self, n: int, timeout: float) -> bool:
        """Until hook ``n`` was handed on (True), or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while n not in self.seen:
            try:
                self.seen.add(int(self._line(max(0.0, deadline - time.monotonic()))))
            except TimeoutError:
                return False
        return True

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def hook(readers: Readers, bash: str, poster: Path, n: int) -> float | None:
    """One hook as the client's command hook delivers it (``bash POSTER``, the payload on
    its stdin); seconds from the poster's start until it was handed on (None: not within
    10 s)."""
    body = b'{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Bash","n":%d}' % n
    start = time.perf_counter()
    proc = subprocess.Popen([bash, str(poster)], stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(body)
    proc.stdin.close()
    came = readers.wait_for(n, 10.0)
    took = time.perf_counter() - start
    proc.wait()
    return took if came else None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hooks", type=int, default=150, help="per phase, both ways")
    parser.add_argument("--flooders", type=int, default=4)
    parser.add_argument("--uid", type=int, default=65534)
    parser.add_argument("--phase", action="append", choices=["secret", "idle"])
    parser.add_argument("--seconds", type=float, default=60.0, help="at most, per phase")
    args = parser.parse_args()
    bash, cat = shutil.which("bash"), shutil.which("cat")
    assert bash is not None and cat is not None
    work = Path(tempfile.mkdtemp(prefix="bench-hooks-"))
    log, spool = work / "hooks.log", work / "spool"
    spool.mkdir(mode=0o700)
    readers = Readers(log, spool)
    try:
        port = int(readers.url.split(":")[2].split("/")[0])
        posters = {"loopback": work / "loopback.sh", "spool": work / "spool.sh"}
        posters["loopback"].write_text(poster_script(readers.url, cat=cat))
        posters["spool"].write_text(spool_script(str(spool), cat=cat))
        n = 0
        for _ in range(10):  # warm-up
            for way in WAYS:
                n += 1
                hook(readers, bash, posters[way], n)
        print(
            f"readers {readers.process.pid}; {args.hooks} hooks per phase, one every 20 ms,"
            " the two ways taking turns"
        )
        baseline: dict[str, float] = {}
        for phase in ["quiet", *(args.phase or ["secret", "idle"])]:
            flooders = [
                spawn_flooder(phase, port, args.uid)
                for _ in range(args.flooders if phase != "quiet" else 0)
            ]
            try:
                time.sleep(1.0 if flooders else 0)
                lines_before = len(log.read_bytes().splitlines())
                cpu_before = cpu_seconds(readers.process.pid)
                started = time.monotonic()
                took: dict[str, list[float]] = {way: [] for way in WAYS}
                lost = dict.fromkeys(WAYS, 0)
                for i in range(args.hooks):
                    if time.monotonic() - started > args.seconds:
                        break
                    way = WAYS[i % 2]
                    n += 1
                    seconds = hook(readers, bash, posters[way], n)
                    if seconds is None:
                        lost[way] += 1
                    else:
                        took[way].append(seconds)
                    time.sleep(0.02)
                elapsed = time.monotonic() - started
                cpu = cpu_seconds(readers.process.pid) - cpu_before
                lines = len(log.read_bytes().splitlines()) - lines_before
                load = os.getloadavg()[0]
            finally:
                for flooder in flooders:
                    os.kill(flooder, signal.SIGKILL)
                    os.waitpid(flooder, 0)
            for way in WAYS:
                ms = sorted(t * 1000 for t in took[way]) or [float("nan")]
                p50 = statistics.median(ms)
                baseline.setdefault(way, p50)
                late = sum(t > HOOK_TIMEOUT for t in took[way]) + lost[way]
                p90 = statistics.quantiles(ms, n=10)[8] if len(ms) > 1 else ms[0]
                print(
                    f"  {phase:<6} x{len(flooders)} {way:<8} n={len(ms):<4}"
                    f" p50 {p50:8.2f} ms ({p50 / baseline[way]:6.1f}x)"
                    f"   p90 {p90:8.2f} ms   max {ms[-1]:8.2f} ms   >2s or lost: {late:<3}"
                )
            print(
                f"  {phase:<6} readers' CPU {cpu / elapsed:5.0%}, log lines {lines} in"
                f" {elapsed:.1f} s, load average {load:.1f}"
            )
            time.sleep(1.0)
    finally:
        readers.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
