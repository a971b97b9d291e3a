"""Benchmark the broker under the two load attacks of issue 14, each beside the same
broker unattacked, in one run.

Starts ``codex-presence broker`` (pinned to one core, this process and the attacker on the
other) with a team of ``--members`` members, and measures ``GET /roster`` latency for a
member on its own keep-alive connection:

* baseline: nobody attacking;
* ``pipelining``: one connection writes ``GET /healthz`` heads, 500 per write, for
  ``--seconds`` and never reads a byte (from a separate process). The broker's RSS is
  sampled from /proc throughout: goal, flat within 50 MB;
* ``pipeliners``: ``--pipeliners`` connections (4,000) that each write
  ``--pipelined-bytes`` (60 KB) of ``GET /healthz`` heads at once and never read, held
  ``--pipeliners-seconds``: the broker's RSS during, and 3 s after they all closed (goal:
  bounded, and given back);
* ``idle``: ``--idle`` connections (10,000 by default) opened as fast as possible and held
  for ``--idle-seconds`` (12: past the 10 s head deadline, so the broker's mass close is
  inside the window) without sending a byte, against the broker's default connection cap.
  Says how many the broker refused (503 and close) and how many it closed meanwhile.

``--before DIR`` runs the same attacks on the broker of another source tree too (in the
same run, same machine, same load), e.g. today's main for the before figures::

    mkdir /tmp/main && git archive main | tar -x -C /tmp/main
    .venv/bin/python bench/broker_abuse.py --before /tmp/main
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path

from broker import HOST, Conn, _get, _port_of, _raise_fd_limit, _start_broker, _stop

from codex_presence.broker.team import Role
from codex_presence.broker.team_file import render_team

PIPELINER = """
import socket, sys, time
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.settimeout(0.2)
burst = b"GET /healthz HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n" * 500
stop, sent = time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < stop:
    try:
        sent += sock.send(burst)
    except socket.timeout:
        pass
    except OSError:
        break
print(sent)
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentiles(latencies: list[float]) -> str:
    if not latencies:
        return "no answer at all"
    ordered = sorted(latencies)
    p99 = ordered[max(0, int(len(ordered) * 0.99) - 1)]
    return f"p50 {statistics.median(ordered):7.2f} ms  p99 {p99:8.2f} ms  (n={len(ordered)})"


async def roster_latency(
    port: int, token: str, seconds: float, conn: Conn | None = None
) -> list[float]:
    """Sequential ``GET /roster`` on one keep-alive connection (``conn``, or a new one)
    for ``seconds``; ms each."""
    conn = conn if conn is not None else await Conn.open(port)
    request = _get("/roster", token)
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    try:
        while time.perf_counter() < stop:
            start = time.perf_counter()
            status, _ = await asyncio.wait_for(conn.request(request), 30)
            latencies.append((time.perf_counter() - start) * 1000)
            assert status == 200, status
            await asyncio.sleep(0.005)
    finally:
        conn.close()
    return latencies


async def pipelining(pid: int, port: int, token: str, seconds: float) -> None:
    rss = [rss_mb(pid)]
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PIPELINER, str(port), str(seconds), stdout=subprocess.PIPE
    )

    async def sample() -> None:
        while attacker.returncode is None:
            rss.append(rss_mb(pid))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    latencies = await roster_latency(port, token, seconds)
    out, _ = await attacker.communicate()
    await sampler
    rss.append(rss_mb(pid))
    sent = int(out or 0) / 1e6
    print(
        f"  pipelining client ({sent:.0f} MB of heads sent in {seconds:g} s): "
        f"RSS {rss[0]:.0f} MB -> max {max(rss):.0f} MB (+{max(rss) - rss[0]:.0f} MB), "
        f"{rss[-1]:.0f} MB at the end"
    )
    print(f"  GET /roster meanwhile:  {percentiles(latencies)}")


async def idle_connections(pid: int, port: int, token: str, count: int, seconds: float) -> None:
    rss = rss_mb(pid)
    writers: list[asyncio.StreamWriter] = []
    watchers: list[asyncio.Task[bytes]] = []
    failed = 0

    async def first_bytes(reader: asyncio.StreamReader) -> bytes:
        """What the broker says before it closes the connection (b"" if it just closes)."""
        with suppress(OSError):
            return await reader.read(64)
        return b""

    async def open_some(n: int) -> None:
        nonlocal failed
        for _ in range(n):
            try:
                reader, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                failed += 1
                continue
            writers.append(writer)
            watchers.append(asyncio.create_task(first_bytes(reader)))

    probe = await Conn.open(port)  # a member's connection, open before the flood
    measure = asyncio.create_task(roster_latency(port, token, seconds, probe))
    opening = time.perf_counter()
    await asyncio.gather(*(open_some(count // 50) for _ in range(50)))
    opened = time.perf_counter() - opening
    latencies = await measure
    peak = rss_mb(pid)
    ended = [w.result() for w in watchers if w.done()]
    refused = sum(1 for data in ended if data.startswith(b"HTTP/1.1 503"))
    for writer in writers:
        writer.close()
    for watcher in watchers:
        watcher.cancel()
    await asyncio.gather(*watchers, return_exceptions=True)
    print(
        f"  {len(writers)} idle connections opened in {opened:.1f} s ({failed} failed to "
        f"connect): {refused} refused with 503, {len(ended) - refused} closed otherwise within "
        f"{seconds:g} s; RSS {rss:.0f} -> {peak:.0f} MB"
    )
    print(f"  GET /roster meanwhile:  {percentiles(latencies)}")


async def many_pipeliners(
    pid: int, port: int, token: str, count: int, size: int, seconds: float
) -> None:
    """``count`` connections that each write ``size`` bytes of pipelined heads at once,
    never read, and are held ``seconds``; then all close. The RSS during, and 3 s after."""
    rss = [rss_mb(pid)]
    burst = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    burst *= size // len(burst)
    writers: list[asyncio.StreamWriter] = []
    failed = 0

    async def open_some(n: int) -> None:
        nonlocal failed
        for _ in range(n):
            try:
                _, writer = await asyncio.open_connection(HOST, port)
            except OSError:
                failed += 1
                continue
            writer.write(burst)
            writers.append(writer)

    async def sample() -> None:
        while True:
            rss.append(rss_mb(pid))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    probe = await Conn.open(port)
    await asyncio.gather(*(open_some(count // 50) for _ in range(50)))
    latencies = await roster_latency(port, token, seconds, probe)  # all of them open
    sampler.cancel()
    rss.append(rss_mb(pid))
    for writer in writers:
        writer.close()
    await asyncio.sleep(3.0)
    print(
        f"  {len(writers)} connections pipelining {len(burst) / 1000:.0f} KB each, never "
        f"reading ({failed} failed to connect): RSS {rss[0]:.0f} MB -> max {max(rss):.0f} MB, "
        f"{rss_mb(pid):.0f} MB 3 s after they closed"
    )
    print(f"  GET /roster meanwhile:  {percentiles(latencies)}")


async def attack(pid: int, port: int, token: str, args: argparse.Namespace) -> None:
    print(f"  baseline GET /roster:   {percentiles(await roster_latency(port, token, 3.0))}")
    if args.only in (None, "pipelining"):
        await pipelining(pid, port, token, args.seconds)
        await asyncio.sleep(1.0)
    if args.only in (None, "idle"):
        await idle_connections(pid, port, token, args.idle, args.idle_seconds)
        await asyncio.sleep(1.0)
    if args.only in (None, "pipeliners"):
        await many_pipeliners(
            pid, port, token, args.pipeliners, args.pipelined_bytes, args.pipeliners_seconds
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--idle-seconds", type=float, default=12.0)
    parser.add_argument("--pipeliners", type=int, default=4000)
    parser.add_argument("--pipelined-bytes", type=int, default=60_000)
    parser.add_argument("--pipeliners-seconds", type=float, default=6.0)
    parser.add_argument("--only", choices=["pipelining", "idle", "pipeliners"])
    parser.add_argument("--before", metavar="DIR", help="also attack the broker of this tree")
    args = parser.parse_args()
    _raise_fd_limit(max(args.idle, args.pipeliners) + 256)

    cpus = sorted(os.sched_getaffinity(0))
    broker_cpu = cpus[0] if len(cpus) > 1 else None
    if broker_cpu is not None:
        os.sched_setaffinity(0, set(cpus[1:]))
    where = f"broker pinned to CPU {broker_cpu}" if broker_cpu is not None else "one CPU"
    brokers = [("this checkout", None)]
    if args.before:
        brokers.insert(0, (f"before ({args.before})", str(Path(args.before).resolve())))
    with tempfile.TemporaryDirectory() as tmp:
        tokens = {f"m{i:04d}": f"cp_bench-token-{i:04d}" for i in range(args.members)}
        team_path = Path(tmp) / "team.toml"
        members = [(n, Role("engineer", ()), t) for n, t in tokens.items()]
        team_path.write_text(render_team("bench", members))
        token = next(iter(tokens.values()))
        for label, source in brokers:
            env = dict(os.environ)
            if source is not None:
                env["PYTHONPATH"] = source
            proc = _start_broker(team_path, broker_cpu, env=env, cwd=source)
            try:
                port = _port_of(proc)
                assert proc.stderr is not None
                threading.Thread(target=proc.stderr.read, daemon=True).start()  # never block
                load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                print(
                    f"{label}: {args.members} members, RSS {rss_mb(proc.pid):.0f} MB at start; "
                    f"{len(cpus)} CPUs, {where}, load average {load}"
                )
                asyncio.run(attack(proc.pid, port, token, args))
            finally:
                _stop(proc)


if __name__ == "__main__":
    main()
