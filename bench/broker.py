"""Benchmark the reference broker from a separate process.

Starts ``codex-presence broker`` as a subprocess pinned to one core, with a team of
``--members`` (1,000) members, then drives it from this process (pinned to another core
when there is one) over raw HTTP/1.1 keep-alive connections:

* the streams: one quiet runner stream per member (``?quiet=1&session=…``: what wrap
  holds to be on the wire, keep-alives only), then ``--pages`` page streams (by default a
  million ÷ members, so that the rosters read at connect weigh about the same at every
  size) as the page holds them: light (``?light=1``: no roster on the stream, a
  ``changed`` event instead, after which the page reads ``GET /roster`` with
  ``If-None-Match`` and gzip; then every change) (``--full-pages``: the full stream, the
  roster first, then every change, as the page held it before): how long each set takes
  to open, the broker's CPU meanwhile, and its RSS before and after (bytes per idle
  stream);
* baseline: ``GET /healthz`` requests/s — the framework's floor, measured in the same run;
* ``POST /presence/activity`` requests/s: heartbeats (same state again: no fan-out) and
  transitions (working <-> blocked: every one is a change the page streams must carry);
* ``GET /roster`` latency p50/p99 as clients ask for it (gzip), revalidated (304 to its
  ETag), and plain;
* delivery latency p50/p99: a report POSTed → its ``presence`` event on a stream, with
  every stream still open, then again once they are closed (the figure measured before
  2026-12-03).

``--tree DIR`` runs the in-memory broker from another source tree (a git worktree of
main, say) with this bench: interleave runs with and without it for a baseline.

``--members N`` sets the brokers' ``--max-connections`` for N and raises the file
descriptor limit; a run past a limit of this machine (``ulimit -Hn``, the ephemeral
ports, ``--max-connections``) says which in one line before it starts (``_limits.py``),
and a stream that fails says why, not a traceback. The load average is printed beside the
figures (5 engineers share 2 cores here) and, at the end, the command to run again.

With ``--redis``, the same run then measures the broker with its state in a real
``redis-server`` (``--redis``; Debian's, started here on loopback with persistence off, on
the broker's core), and a second broker sharing it (there too): the same figures on the first
broker, Redis's memory, and the delivery latency from a report on the first to the event
on the second. Then Redis's share of in memory (issue 26's goals: heartbeats >= 0.6x,
transitions >= 0.7x): an in-memory broker and a Redis broker, both pinned to the broker's
core, with a quiet stream per member and ``--share-pages`` (10) page streams each, take
the same load in turn, ``--share-rounds`` times, and each round's ratio is per second of
that broker's CPU (``--only-share`` runs this part alone). (Measured as two separate runs
minutes apart, wall-clock, the ratio moved from 0.35x to 0.75x with the same code: the
machine's other work fell on one run and not the other, and the load generator shared its
core with redis-server and the second broker in the Redis run only.)

With ``--notify-failing``, it then measures ``GET /roster`` latency under a flood of
transitions (every member flipping blocked <-> working, so that every flip is a spell the
notifier sees) on a broker without notification targets (the baseline) and on one whose
one target (``--notify json://...``, delay 0) never answers: a loopback socket that
accepts and stays silent, so every delivery waits for its timeout (issue 25). No SSE
subscribers in that part: the roster and the notifier are what is measured.

Goals: in memory (issue 4) >= 2,000 POSTs/s on one core, roster p99 <= 10 ms; with Redis
(issue 18) >= 1,500 POSTs/s on one core, roster p99 <= 15 ms, cross-broker delivery
p99 <= 20 ms; (issue 26) Redis at a fair share of in memory, interleaved as above; (issue
37) 10,000 members: the streams open in <= 10 s, roster p99 <= 10 ms, RSS <= 300 MB. Each
rate is also printed per second of the broker's CPU (rate / its CPU share): on a machine
busy with other work, where the broker gets a fraction of its core, that is the figure
that still compares.

With ``--history`` (or ``--only-history``), it measures the cost of the members' history
(issue 36): transitions/s with it kept and with ``--history-hours 0``, interleaved in the
same run (in Redis too with ``--redis``), and the bytes one transition costs.

    .venv/bin/python bench/broker.py [--members 1000] [--pages P] [--seconds 5] [--redis]
        [--share-rounds 3] [--notify-failing] [--max-connections N]
    .venv/bin/python bench/broker.py --only-history --redis --seconds 3
    .venv/bin/python bench/broker.py --only-share --seconds 3 [--share-rounds 3] [--share-pages 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import errno
import gc
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from codex_presence.broker.team import Role
from codex_presence.broker.team_file import render_team

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _limits import SPARE_FDS, Needs, connections_for, where_it_stops
from _redis import RedisServer, find_redis_server

HOST = "127.0.0.1"
BROKER_PID = [0]
BROKER_SAID: dict[int, collections.deque[str]] = {}
"""Each broker's last lines on stderr."""
MAX_CONNECTIONS = [4096]
"""The brokers' ``--max-connections``, set for the run's members (:func:`connections_for`)."""
DEPTH = 8
_KEEPALIVE = b": keepalive\n\n"
_KEEPALIVE_CHUNK = len(b"d\r\n" + _KEEPALIVE + b"\r\n")
"""A keep-alive on the wire: sent alone, one chunk of the chunked stream."""
PAGES = [100]
"""Page streams (the roster, then every change) beside the runners' quiet ones."""
LIGHT = [True]
"""Page streams are light ones, the roster read with GET /roster (--full-pages: False)."""
READS: collections.Counter[int] = collections.Counter()
"""The light pages' GET /roster answers by status."""


def _load1() -> str:
    """The machine's load average over the last minute, for the figures beside it."""
    return f"{os.getloadavg()[0]:.2f}"


def _raise_fd_limit(need: int) -> None:
    """The soft limit on descriptors up to ``need`` (the brokers started inherit it);
    :func:`_limits.where_it_stops` said already whether the hard limit allows it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, need)) if hard != resource.RLIM_INFINITY else max(soft, need)
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _somaxconn() -> int:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return 4096


def _listen_overflows() -> int:
    """The kernel's count of connections dropped for a full listen queue (machine-wide)."""
    try:
        lines = Path("/proc/net/netstat").read_text().splitlines()
    except OSError:
        return 0
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            table = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(table.get("ListenOverflows", 0))
    return 0


def _port_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _rss_mb(pid: int) -> float:
    """A process's resident memory now (MB), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    """One keep-alive HTTP/1.1 connection that sends a request and reads one response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer)

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        self.writer.write(raw)
        return await self.response()

    async def pipeline(self, raws: list[bytes]) -> list[tuple[int, bytes]]:
        self.writer.write(b"".join(raws))
        return [await self.response() for _ in raws]

    async def request_head(self, raw: bytes) -> bytes:
        """Send ``raw``; its response's head (the body read and dropped)."""
        self.writer.write(raw)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = _header(head, b"content-length")
        if length:
            await self.reader.readexactly(int(length))
        return head

    async def response(self) -> tuple[int, bytes]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await self.reader.readexactly(length) if length else b""
        return status, body

    def close(self) -> None:
        self.writer.close()


def _get(path: str, token: str | None = None, extra: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{auth}{extra}\r\n".encode()


def _header(head: bytes, name: bytes) -> str:
    for line in head.split(b"\r\n"):
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    return ""


async def _roster_latency(probe: Conn, raw: bytes) -> tuple[int, int, float, float]:
    """``GET /roster`` as ``raw`` asks, 50 times to warm up and 1,000 measured: how many
    were 304 (a revalidation whose roster changed meanwhile gets 200, the new one: a
    Redis broker's changes as the other broker's counts come in), the last body's bytes,
    p50 and p99 (ms)."""
    for _ in range(50):
        await probe.request(raw)
    lat = []
    body = b""
    unchanged = 0
    for _ in range(1000):
        t = time.perf_counter()
        status, body = await probe.request(raw)
        lat.append((time.perf_counter() - t) * 1000)
        if status not in (200, 304):
            raise StreamsFailed(f"GET /roster answered {status}")
        unchanged += status == 304
    lat.sort()
    return unchanged, len(body), statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


def _post(token: str, state: str) -> bytes:
    body = b'{"state":"%s"}' % state.encode()
    return (
        f"POST /presence/activity HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class StreamsFailed(Exception):
    """A stream could not be opened: the first reason, said in one line."""


def _why_refused(exc: BaseException) -> str:
    """Which limit an error opening a stream ran into, in one line."""
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        return "out of file descriptors in the load generator (ulimit -n)"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL:
        return "out of ephemeral ports (net.ipv4.ip_local_port_range)"
    if isinstance(exc, (ConnectionResetError, asyncio.IncompleteReadError, BrokenPipeError)):
        return (
            "the broker reset connections (its file descriptors, ulimit -n, or its listen "
            f"backlog, net.core.somaxconn): {type(exc).__name__}"
        )
    return f"{type(exc).__name__}: {exc}"


async def _subscriber(
    port: int,
    name: str,
    token: str,
    got: list[int],
    ready: asyncio.Event,
    failed: list[str],
    opening: asyncio.Semaphore,
    *,
    quiet: bool,
) -> None:
    """One stream: a runner's (``quiet``: keep-alives only, bound to a session, as wrap's
    is) or a page's (the roster first, then every change). ``got``: bytes read, streams
    open, streams wanted; the first failure's reason goes to ``failed``. ``opening`` bounds
    the streams being opened at once (see :func:`_open_streams`)."""
    query = f"name={name}&session=bench&quiet=1" if quiet else f"name={name}"
    light = not quiet and LIGHT[0]
    if light:
        query += "&light=1"
    reading: list[asyncio.Task[None]] = []
    again = [False]

    async def read_roster() -> None:
        """The page's reads: one at a time, again while a change came meanwhile."""
        conn = await Conn.open(port)
        etag = ""
        try:
            while again[0]:
                again[0] = False
                extra = "Accept-Encoding: gzip\r\n" + (f"If-None-Match: {etag}\r\n" if etag else "")
                head = await conn.request_head(_get("/roster", token, extra))
                READS[int(head[9:12])] += 1
                etag = _header(head, b"etag") or etag
                got[0] += len(head) + int(_header(head, b"content-length") or 0)
        finally:
            conn.close()

    await opening.acquire()
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError as exc:
        opening.release()
        failed.append(_why_refused(exc))
        ready.set()
        return
    writer.write(_get(f"/subscribe?{query}", token))
    first = True
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                if first:
                    failed.append("the broker closed a stream before it opened")
                    ready.set()
                return
            if not quiet:  # the changes carried: keep-alives (a lane's every moment) not
                got[0] += len(chunk) - _KEEPALIVE_CHUNK * chunk.count(_KEEPALIVE)
            if light and b"event: changed" in chunk:
                again[0] = True
                if not reading or reading[0].done():
                    reading[:] = [asyncio.create_task(read_roster())]
            if first:
                if chunk.startswith(b"HTTP/1.1 503"):
                    failed.append(
                        "the broker refused a stream: 503, past its --max-connections "
                        f"({MAX_CONNECTIONS[0]})"
                    )
                    ready.set()
                    return
                if b"retry: 2000" in chunk:
                    first = False
                    opening.release()
                    got[1] += 1
                    if got[1] == got[2]:
                        ready.set()
    except OSError as exc:
        if first:
            failed.append(_why_refused(exc))
            ready.set()
    finally:
        if first:
            opening.release()
        for task in reading:
            task.cancel()
        writer.close()


async def _open_streams(
    port: int, names: list[str], tokens: dict[str, str], got: list[int], *, quiet: bool
) -> tuple[list[asyncio.Task[None]], float, float]:
    """Open a stream per name; the tasks, the seconds it took and the broker's CPU
    seconds meanwhile. Raises :class:`StreamsFailed` with the first reason one failed."""
    ready = asyncio.Event()
    failed: list[str] = []
    got[1], got[2] = 0, len(names)
    # At most half the kernel's listen queue in handshake at once: 10,000 connections at
    # the same instant overflowed it (net.core.somaxconn, 4,096 here), and the dropped
    # handshakes came back a SYN retransmission later (1 s, 3 s, 7 s): the run measured
    # the kernel's timers, not the broker. Runners reconnect with jitter, not all at once.
    opening = asyncio.Semaphore(max(64, _somaxconn() // 2))
    overflows = _listen_overflows()
    cpu = _cpu_seconds(BROKER_PID[0]) if BROKER_PID[0] else 0.0
    t0 = time.perf_counter()
    subs = [
        asyncio.create_task(
            _subscriber(port, n, tokens[n], got, ready, failed, opening, quiet=quiet)
        )
        for n in names
    ]
    try:
        await asyncio.wait_for(ready.wait(), 300)
    except TimeoutError:
        failed.append(f"only {got[1]} of {len(names)} streams opened within 300 s")
    elapsed = time.perf_counter() - t0
    cpu = (_cpu_seconds(BROKER_PID[0]) - cpu) if BROKER_PID[0] else 0.0
    dropped = _listen_overflows() - overflows
    if dropped > 0:
        print(f"(the kernel's listen queue overflowed {dropped} times meanwhile, machine-wide)")
    if failed:
        for task in subs:
            task.cancel()
        await asyncio.gather(*subs, return_exceptions=True)
        said = " / ".join(
            line.strip() for line in BROKER_SAID.get(BROKER_PID[0], ()) if "listening" not in line
        )
        raise StreamsFailed(
            f"stopped at {got[1]} of {len(names)} streams: {failed[0]}"
            + (f" (the broker's last words: {said})" if said else "")
        )
    return subs, elapsed, cpu


async def _load(
    port: int, requests: list[bytes], seconds: float, concurrency: int, pid: int = 0
) -> tuple[float, int, float]:
    """Send ``requests`` round-robin over ``concurrency`` connections for ``seconds``;
    return requests/s, errors, and the broker's (``pid``, by default the one measured)
    CPU share over the run."""
    pid = pid or BROKER_PID[0]
    conns = [await Conn.open(port) for _ in range(concurrency)]
    done = 0
    bad = 0
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        # HTTP/1.1 pipelining (DEPTH requests per write) keeps this client's own cost per
        # request low, so that the broker, not the client, is what is measured.
        nonlocal done, bad
        conn = conns[i]
        k = i
        while time.perf_counter() < stop:
            batch = [requests[(k + j * concurrency) % len(requests)] for j in range(DEPTH)]
            k += DEPTH * concurrency
            for status, _ in await conn.pipeline(batch):
                done += 1
                if status >= 300:
                    bad += 1

    cpu = _cpu_seconds(pid)
    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - start
    cpu = _cpu_seconds(pid) - cpu
    for conn in conns:
        conn.close()
    return done / elapsed, bad, cpu / elapsed


async def _each_once(port: int, requests: list[bytes], concurrency: int) -> int:
    """Send every one of ``requests`` once, spread over ``concurrency`` pipelining
    connections, and read every answer; how many were not 2xx. (The warm-up before the
    heartbeats was a second of load: under load it reached part of the members, and the
    "heartbeats" measured next were partly transitions, fanned out to every page.)"""
    conns = [await Conn.open(port) for _ in range(concurrency)]
    bad = 0

    async def worker(i: int) -> None:
        nonlocal bad
        mine = requests[i::concurrency]
        for at in range(0, len(mine), DEPTH):
            for status, _ in await conns[i].pipeline(mine[at : at + DEPTH]):
                bad += status >= 300

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    for conn in conns:
        conn.close()
    return bad


async def _drained(got: list[int], still: float = 0.5, at_most: float = 60.0) -> None:
    """Wait until the streams received nothing for ``still`` s: the fan-out is over. (A
    fixed pause was too short on a busy machine: the heartbeats were then measured while
    the broker was still fanning out the transitions before them.)"""
    deadline = time.perf_counter() + at_most
    last = -1
    while got[0] != last and time.perf_counter() < deadline:
        last = got[0]
        await asyncio.sleep(still)


async def _bench(
    port: int, tokens: dict[str, str], seconds: float, concurrency: int, samples: int = 0
) -> dict[str, float]:
    """The throughput and roster figures of the broker on ``port``, printed and returned;
    with ``samples``, the delivery latency too, while every stream is still open."""
    names = list(tokens)
    pages = names[: PAGES[0]]
    got = [0, 0, 0]
    rss0 = _rss_mb(BROKER_PID[0]) if BROKER_PID[0] else 0.0
    subs, took, cpu_open = await _open_streams(port, names, tokens, got, quiet=True)
    rss1 = _rss_mb(BROKER_PID[0]) if BROKER_PID[0] else 0.0
    print(
        f"{len(names)} runner streams (quiet, one per member) open in {took:.1f} s "
        f"(broker CPU {cpu_open:.1f} s; load {_load1()})"
    )
    before = got[0]
    more, took_p, cpu_p = await _open_streams(port, pages, tokens, got, quiet=False)
    subs += more
    # This process holds the other end of every stream: its own full collections (a
    # second each, under load, with 10,100 streams) delayed the reads, and were counted
    # as the broker's delivery latency.
    gc.collect()
    gc.freeze()
    await _drained(got)  # the pages' rosters read: no longer in the broker's buffers
    rss2 = _rss_mb(BROKER_PID[0]) if BROKER_PID[0] else 0.0
    how = (
        "light: GET /roster, then every change"
        if LIGHT[0]
        else "the roster first, then every change"
    )
    print(
        f"{len(pages)} page streams ({how}) open in "
        f"{took_p:.1f} s (broker CPU {cpu_p:.1f} s; "
        f"{(got[0] - before) / max(1, len(pages)) / 1e3:.0f} kB each first)"
    )
    if BROKER_PID[0]:
        per_stream = (rss1 - rss0) * 1024 * 1024 / max(1, len(names))
        print(
            f"broker RSS {rss0:.0f} MB before the streams, {rss1:.0f} MB with the runner "
            f"streams ({per_stream / 1e3:.1f} kB each), {rss2:.0f} MB with the pages too"
        )

    probe = await Conn.open(port)
    status, body = await probe.request(_get("/roster", tokens[names[0]]))
    absent = body.count(b'"connected":0,')
    print(f"roster: HTTP {status}, {len(body)} bytes, {absent} members with connected=0")

    base, _, cpu = await _load(port, [_get("/healthz")], seconds, concurrency)
    print(f"baseline GET /healthz:                 {base:8.0f} req/s  (broker CPU {cpu:.0%})")

    beats = [_post(tokens[n], "working") for n in names]
    await _each_once(port, beats, concurrency)  # everyone working: later beats change nothing
    await _drained(got)  # that fan-out: a change per member to every page
    rate, bad, cpu_h = await _load(port, beats, seconds, concurrency)
    print(
        f"POST /presence/activity (heartbeats):  {rate:8.0f} req/s  (broker CPU {cpu_h:.0%};"
        f" {rate / base:.2f} x baseline; {bad} errors)"
    )

    await asyncio.sleep(1.0)  # quiet: every member working, nothing to fan out
    probe.close()
    probe = await Conn.open(port)  # the first one idled past uvicorn's keep-alive timeout
    token = tokens[names[0]]
    identity = _get("/roster", token)
    gzipped = _get("/roster", token, "Accept-Encoding: gzip\r\n")
    _, size_gz, p50, p99 = await _roster_latency(probe, gzipped)
    print(
        f"GET /roster ({len(names)} members, n=1000, gzip as clients ask, {size_gz} bytes): "
        f"p50 {p50:.2f} ms  p99 {p99:.2f} ms  (load {_load1()})"
    )
    etag = _header(await probe.request_head(identity), b"etag")
    unchanged, _, r50, r99 = await _roster_latency(
        probe, _get("/roster", token, f"If-None-Match: {etag}\r\n")
    )
    _, size, i50, i99 = await _roster_latency(probe, identity)
    print(
        f"GET /roster revalidated ({unchanged} of 1000 were 304): p50 {r50:.2f} ms  "
        f"p99 {r99:.2f} ms; without gzip "
        f"({size} bytes): p50 {i50:.2f} ms  p99 {i99:.2f} ms"
    )

    before = got[0]
    flips = [_post(tokens[n], s) for s in ("blocked", "working") for n in names]
    rate_t, bad, cpu = await _load(port, flips, seconds, concurrency)
    streamed = (got[0] - before) / seconds / 1e6
    print(
        f"POST /presence/activity (transitions): {rate_t:8.0f} req/s  (broker CPU {cpu:.0%};"
        f" {rate_t / base:.2f} x baseline; {bad} errors; streams got {streamed:.1f} MB/s)"
    )
    if LIGHT[0]:
        print(
            "the pages' GET /roster reads: "
            + ", ".join(f"{n} x {status}" for status, n in sorted(READS.items()))
        )

    print(
        f"one-core capacity (rate / broker CPU share): heartbeats {rate / cpu_h:.0f}/s, "
        f"transitions {rate_t / cpu:.0f}/s"
    )
    probe.close()
    d50 = d99 = 0.0
    if samples:
        await _drained(got)  # the transitions' fan-out over
        d50, d99 = await _delivery(port, port, tokens, samples)
        print(
            f"delivery, report -> event, the {len(subs)} streams open: p50 {d50:.2f} ms  "
            f"p99 {d99:.2f} ms  (load {_load1()})"
        )
    for task in subs:
        task.cancel()
    await asyncio.gather(*subs, return_exceptions=True)
    return {
        "delivery p50": d50,
        "delivery p99": d99,
        "heartbeats": rate,
        "transitions": rate_t,
        "heartbeats per CPU": rate / cpu_h if cpu_h else 0.0,
        "transitions per CPU": rate_t / cpu if cpu else 0.0,
        "p50": p50,
        "p99": p99,
        "open": took,
        "rss": rss2,
        "stream bytes": (rss1 - rss0) * 1024 * 1024 / max(1, len(names)),
    }


async def _delivery(
    post_port: int, stream_port: int, tokens: dict[str, str], samples: int
) -> tuple[float, float]:
    """Report -> event latency: a member flips state by a POST to ``post_port``; the time
    until a stream on ``stream_port`` carries it. One flip at a time, spaced past the
    fan-out's coalescing pause, so that each sample is one delivery."""
    watcher, mover = list(tokens)[:2]
    reader, writer = await asyncio.open_connection(HOST, stream_port)
    writer.write(_get(f"/subscribe?name={watcher}", tokens[watcher]))
    arrived: asyncio.Queue[tuple[str, float]] = asyncio.Queue()
    needle = f'"name":"{mover}"'.encode()

    async def read() -> None:
        buffer = b""
        while chunk := await reader.read(65536):
            now = time.perf_counter()
            buffer += chunk
            *blocks, buffer = buffer.split(b"\n\n")
            for block in blocks:
                if b"event: presence" in block and needle in block:  # (chunk sizes too)
                    state = "blocked" if b'"activity":"blocked"' in block else "other"
                    arrived.put_nowait((state, now))

    task = asyncio.create_task(read())
    poster = await Conn.open(post_port)
    await poster.request(_post(tokens[mover], "idle"))  # from a known state
    await asyncio.sleep(0.5)
    while not arrived.empty():
        arrived.get_nowait()
    lat = []
    for i in range(samples + 1):
        state = "working" if i % 2 == 0 else "blocked"
        sent = time.perf_counter()
        status, _ = await poster.request(_post(tokens[mover], state))
        assert status == 204, status
        while True:
            got, at = await asyncio.wait_for(arrived.get(), 10)
            if got == ("blocked" if state == "blocked" else "other"):
                break
        if i:  # the first one may meet a stream still settling
            lat.append((at - sent) * 1000)
        await asyncio.sleep(0.07)
    poster.close()
    task.cancel()
    writer.close()
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _start_broker(
    team_path: Path,
    cpu: int | None,
    *extra: str,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.Popen[str]:
    """The broker command; ``cwd`` (a source tree) is where ``-m`` finds its package first
    (``PYTHONPATH`` alone loses to the current directory)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "codex_presence", "broker", "--team", str(team_path),
         "--port", "0", "--host", HOST, "--max-connections", str(MAX_CONNECTIONS[0]), *extra],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )  # fmt: skip
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    return proc


def _port_of(proc: subprocess.Popen[str]) -> int:
    assert proc.stderr is not None
    said = ""
    while "listening on" not in (line := proc.stderr.readline()):
        said += line
        if not line:
            sys.exit(f"broker did not start: {said}")
    # Read the rest as it comes: a broker whose stderr pipe filled (a warning per refused
    # connection, past --max-connections) would block on its next word. Its last words
    # are kept, for a run that stops to say what the broker said.
    said = BROKER_SAID.setdefault(proc.pid, collections.deque(maxlen=3))
    threading.Thread(target=said.extend, args=(proc.stderr,), daemon=True).start()
    return int(line.split("listening on http://")[1].split()[0].rsplit(":", 1)[1])


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--samples", type=int, default=300, help="delivery latency samples")
    parser.add_argument("--redis", action="store_true", help="also with the state in Redis")
    parser.add_argument(
        "--full-pages",
        action="store_true",
        help="page streams as full ones (the roster, then every change), not light ones "
        "that read GET /roster",
    )
    parser.add_argument(
        "--notify-failing",
        action="store_true",
        help="also: roster p99 under a POST flood, with a notification target that never "
        "answers vs none",
    )
    parser.add_argument(
        "--only-notify", action="store_true", help="skip the rest: --notify-failing alone"
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="also: transitions/s with the history kept vs --history-hours 0, interleaved "
        "(with --redis, in Redis too), and the bytes a transition costs",
    )
    parser.add_argument(
        "--only-history", action="store_true", help="skip the rest: --history alone"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--history: rounds of off, on")
    parser.add_argument(
        "--pages",
        type=int,
        default=None,
        help="page streams (the roster, then every change) beside the members' quiet runner "
        "streams (default: a million / members, at most --members: 1,000 at 1,000 members, "
        "100 at 10,000, about the same roster bytes at every size)",
    )
    parser.add_argument(
        "--share-rounds",
        type=int,
        default=3,
        help="--redis: interleaved rounds of Redis's share of in memory (default 3)",
    )
    parser.add_argument(
        "--share-pages",
        type=int,
        default=10,
        help="--redis: page streams on each broker during the share rounds (default 10)",
    )
    parser.add_argument(
        "--only-share",
        action="store_true",
        help="skip the rest: Redis's share of in memory alone (implies --redis)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="the brokers' --max-connections (default: 2 per member + 512)",
    )
    parser.add_argument(
        "--tree",
        default=None,
        help="run the in-memory broker from this source tree (a git worktree of another "
        "commit, e.g. main's), with this bench and this venv: a baseline measured the same "
        "way, to interleave with runs of this tree",
    )
    args = parser.parse_args()
    LIGHT[0] = not args.full_pages
    pages = args.pages if args.pages is not None else 1_000_000 // max(1, args.members)
    PAGES[0] = min(pages, args.members)
    reads = PAGES[0] if LIGHT[0] else 0  # a light page's connection for GET /roster
    MAX_CONNECTIONS[0] = args.max_connections or connections_for(args.members) + reads
    needs = Needs(streams=args.members + PAGES[0] + reads, load=args.concurrency + 8)
    stop = where_it_stops(
        needs,
        fd_hard_limit=resource.getrlimit(resource.RLIMIT_NOFILE)[1],
        port_range=_port_range(),
        max_connections=MAX_CONNECTIONS[0],
    )
    if stop is not None:
        sys.exit(f"bench/broker.py: {args.members} members stop at {stop}")
    _raise_fd_limit(needs.connections + SPARE_FDS)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the brokers stop with us
    try:
        _main(args)
    except StreamsFailed as exc:
        sys.exit(f"bench/broker.py: {args.members} members: {exc}")
    except (OSError, TimeoutError, asyncio.IncompleteReadError, AssertionError) as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        reason = _why_refused(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}"
        sys.exit(
            f"bench/broker.py: {args.members} members: stopped in {where.name} (line "
            f"{where.lineno}): {reason} {exc}".rstrip()
        )
    print(
        f"\nload average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}; on a "
        f"quieter machine, run again: .venv/bin/python {' '.join(sys.argv)}"
    )


def _main(args: argparse.Namespace) -> None:

    cpus = sorted(os.sched_getaffinity(0))
    broker_cpu = cpus[0] if len(cpus) > 1 else None
    if broker_cpu is not None:
        os.sched_setaffinity(0, set(cpus[1:]))
    with tempfile.TemporaryDirectory() as tmp:
        tokens = {f"m{i:04d}": f"cp_bench-token-{i:04d}" for i in range(args.members)}
        members = [(n, Role("engineer", ()), t) for n, t in tokens.items()]
        team_path = Path(tmp) / "team.toml"
        team_path.write_text(render_team("bench", members))
        where = f"broker pinned to CPU {broker_cpu}" if broker_cpu is not None else "one CPU"
        print(
            f"broker bench: {args.members} members, {args.members} quiet runner streams and "
            f"{PAGES[0]} page streams, {where}; --max-connections {MAX_CONNECTIONS[0]}"
        )
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"machine: {len(cpus)} CPUs, load average {load} (other work skews the figures)")

        if args.history or args.only_history:
            _bench_history(args, tokens, team_path, broker_cpu)
            if args.only_history:
                return
        if args.only_share:
            _only_share(args, tokens, team_path, broker_cpu)
            return
        if args.notify_failing or args.only_notify:
            _bench_notify(args, tokens, team_path, broker_cpu)
            if args.only_notify:
                return
        print("\n== in memory (the default)")
        if args.tree:
            print(f"(the broker from {args.tree})")
        proc = _start_broker(team_path, broker_cpu, cwd=args.tree)
        BROKER_PID[0] = proc.pid
        try:
            port = _port_of(proc)
            memory = asyncio.run(_bench(port, tokens, args.seconds, args.concurrency, args.samples))
            d50, d99 = asyncio.run(_delivery(port, port, tokens, args.samples))
            print(
                "delivery, report -> event on the same broker, the streams closed: "
                f"p50 {d50:.2f} ms  p99 {d99:.2f} ms"
            )
        finally:
            _stop(proc)
        print(
            f"goals: >= 2000 POSTs/s -> heartbeats {_met(memory['heartbeats'] >= 2000)}, "
            f"transitions {_met(memory['transitions'] >= 2000)}; "
            f"roster p99 <= 10 ms -> {_met(memory['p99'] <= 10)}"
        )
        print(
            f"{args.members} members (issue 37): streams open in {memory['open']:.1f} s, "
            f"<= 10 s -> {_met(memory['open'] <= 10)}; RSS {memory['rss']:.0f} MB, "
            f"<= 300 MB -> {_met(memory['rss'] <= 300)}; "
            f"{memory['stream bytes'] / 1e3:.1f} kB per idle stream"
        )
        if args.redis:
            _bench_redis(args, tokens, team_path, broker_cpu)


def _only_share(
    args: argparse.Namespace, tokens: dict[str, str], team_path: Path, broker_cpu: int | None
) -> None:
    binary = find_redis_server()
    if binary is None:
        sys.exit("--only-share needs redis-server (apt-get install redis-server)")
    with tempfile.TemporaryDirectory() as workdir:
        server = RedisServer(binary, Path(workdir))
        server.start()
        _pin(server, broker_cpu)
        try:
            _bench_share(args, tokens, team_path, broker_cpu, server.url)
        finally:
            server.stop()


def _pin(server: RedisServer, cpu: int | None) -> None:
    """redis-server on the brokers' core: what is measured there, the load generator alone
    on the other. (With redis-server and the second broker on the load generator's core,
    in the Redis runs only, the load generator read the page streams late under load, they
    fell behind the fan-out's log and were sent the whole roster again: the transitions
    with Redis collapsed to 0.1x-0.4x in some rounds and not others.)"""
    if cpu is not None and server.proc is not None:
        os.sched_setaffinity(server.proc.pid, {cpu})


def _redis_used_mb(url: str) -> float:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"]) / 1e6
    finally:
        client.close()


def _bench_share(
    args: argparse.Namespace,
    tokens: dict[str, str],
    team_path: Path,
    broker_cpu: int | None,
    url: str,
) -> None:
    """Redis's share of in memory (issue 26's goals), interleaved: an in-memory broker M
    and a Redis broker A, both pinned to the broker's core and both with the run's streams
    open, take the same load in turn, phase by phase, ``--share-rounds`` times (B, the
    second Redis broker, and redis-server on the load generator's core, as above). Each
    round's ratio compares two phases seconds apart, not two runs minutes apart: the
    machine's other work (5 engineers' tests here) falls on both alike. With
    ``--share-pages`` page streams (10), not a thousand: a batch of the fan-out costs a
    write per page whatever it holds, and batches come at a fixed pace, so with many pages
    the CPU per transition grows as the rate falls (fewer transitions share each batch's
    writes), and the ratio said more about the rate (the load, the latency) than about
    what Redis adds to a report. The ratio is per
    second of the broker's own CPU (/proc); the wall-clock ratio is printed beside it.
    redis-server and B share the brokers' core, so that the load generator has the other
    core to itself in both modes alike."""
    if args.share_rounds <= 0:
        return
    names = list(tokens)
    pages = names[: args.share_pages]
    need = 2 * (len(names) + len(pages)) + args.concurrency + SPARE_FDS
    if need > resource.getrlimit(resource.RLIMIT_NOFILE)[1]:
        print(
            f"\n== Redis's share: skipped: the streams of two brokers need {need} file "
            "descriptors, past the hard limit (ulimit -Hn); run it with fewer --members"
        )
        return
    _raise_fd_limit(need)
    print(
        f"\n== Redis's share of in memory, {args.share_rounds} interleaved rounds "
        "(M in memory, A on Redis, B and redis-server all on the broker's core; on M and A "
        f"a quiet stream per member and {len(pages)} page streams)"
    )
    m = _start_broker(team_path, broker_cpu)
    a = _start_broker(team_path, broker_cpu, "--redis", url)
    b = _start_broker(team_path, broker_cpu, "--redis", url)
    try:
        port_m, port_a = _port_of(m), _port_of(a)
        _port_of(b)
        ratios = asyncio.run(
            _share_rounds({"M": (port_m, m.pid), "A": (port_a, a.pid)}, tokens, args)
        )
    finally:
        for proc in (m, a, b):
            _stop(proc)
    for key, goal in (("heartbeats", 0.6), ("transitions", 0.7)):
        per_cpu = [r[key][0] for r in ratios]
        wall = [r[key][1] for r in ratios]
        median = statistics.median(per_cpu)
        print(
            f"{key} with Redis / in memory, per broker CPU-second: median {median:.2f} x "
            f"(rounds {' '.join(f'{x:.2f}' for x in per_cpu)}); wall-clock "
            f"{' '.join(f'{x:.2f}' for x in wall)}; goal >= {goal:g} x -> {_met(median >= goal)}"
        )


async def _share_rounds(
    brokers: dict[str, tuple[int, int]], tokens: dict[str, str], args: argparse.Namespace
) -> list[dict[str, tuple[float, float]]]:
    """Per round, for heartbeats and transitions: (per-CPU ratio, wall ratio) of A to M."""
    names = list(tokens)
    subs: list[asyncio.Task[None]] = []
    got = [0, 0, 0]
    for port, pid in brokers.values():
        BROKER_PID[0] = pid
        more, _, _ = await _open_streams(port, names, tokens, got, quiet=True)
        subs += more
        more, _, _ = await _open_streams(port, names[: args.share_pages], tokens, got, quiet=False)
        subs += more
    beats = [_post(tokens[n], "working") for n in names]
    flips = [_post(tokens[n], s) for s in ("blocked", "working") for n in names]
    rounds = []
    for i in range(args.share_rounds):
        order = list(brokers.items()) if i % 2 == 0 else list(reversed(brokers.items()))
        figures: dict[str, dict[str, tuple[float, float]]] = {}
        for key, requests in (("heartbeats", beats), ("transitions", flips)):
            for label, (port, pid) in order:
                if key == "heartbeats":  # everyone working (again): beats change nothing
                    await _each_once(port, beats, args.concurrency)
                    await _drained(got)
                rate, bad, cpu = await _load(port, requests, args.seconds, args.concurrency, pid)
                await _drained(got)
                figures.setdefault(key, {})[label] = (rate / cpu if cpu else 0.0, rate)
                print(
                    f"round {i + 1} {key:11s} {label}: {rate:6.0f}/s, broker CPU {cpu:4.0%}, "
                    f"{rate / cpu if cpu else 0:6.0f} per CPU-second ({bad} errors; load "
                    f"{_load1()})"
                )
        rounds.append(
            {
                key: (
                    f["A"][0] / f["M"][0] if f["M"][0] else 0.0,
                    f["A"][1] / f["M"][1] if f["M"][1] else 0.0,
                )
                for key, f in figures.items()
            }
        )
    for task in subs:
        task.cancel()
    await asyncio.gather(*subs, return_exceptions=True)
    return rounds


def _bench_redis(
    args: argparse.Namespace,
    tokens: dict[str, str],
    team_path: Path,
    broker_cpu: int | None,
) -> None:
    binary = find_redis_server()
    if binary is None:
        sys.exit("--redis needs redis-server (apt-get install redis-server)")
    print("\n== with Redis (--redis): broker A under load, broker B sharing its state")
    with tempfile.TemporaryDirectory() as workdir:
        server = RedisServer(binary, Path(workdir))
        server.start()
        _pin(server, broker_cpu)
        a = _start_broker(team_path, broker_cpu, "--redis", server.url)
        b = _start_broker(team_path, broker_cpu, "--redis", server.url)
        BROKER_PID[0] = a.pid
        try:
            port_a, port_b = _port_of(a), _port_of(b)
            shared = asyncio.run(_bench(port_a, tokens, args.seconds, args.concurrency))
            d50, d99 = asyncio.run(_delivery(port_a, port_b, tokens, args.samples))
            print(f"delivery, report on A -> event on B:   p50 {d50:.2f} ms  p99 {d99:.2f} ms")
            print(f"Redis memory: {_redis_used_mb(server.url):.1f} MB (INFO used_memory)")
        finally:
            _stop(a)
            _stop(b)
        try:
            _bench_share(args, tokens, team_path, broker_cpu, server.url)
        finally:
            server.stop()
    print(
        f"goals: >= 1500 POSTs/s -> heartbeats {_met(shared['heartbeats'] >= 1500)}, "
        f"transitions {_met(shared['transitions'] >= 1500)}; "
        f"roster p99 <= 15 ms -> {_met(shared['p99'] <= 15)}; "
        f"cross-broker delivery p99 <= 20 ms -> {_met(d99 <= 20)}"
    )


async def _roster_under_flood(
    port: int, tokens: dict[str, str], seconds: float, concurrency: int
) -> tuple[float, float, float]:
    """Roster latency p50/p99 (ms) while ``concurrency`` connections flood transitions;
    and the POST rate meanwhile."""
    names = list(tokens)
    flips = [_post(tokens[n], s) for s in ("blocked", "working") for n in names]
    roster = _get("/roster", tokens[names[0]])
    probe = await Conn.open(port)
    for _ in range(50):
        await probe.request(roster)
    lat: list[float] = []

    async def sample() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            status, _ = await probe.request(roster)
            lat.append((time.perf_counter() - t) * 1000)
            assert status == 200
            await asyncio.sleep(0.002)

    flood = asyncio.create_task(_load(port, flips, seconds, concurrency))
    await sample()
    rate, _, _ = await flood
    probe.close()
    lat.sort()
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1], rate


def _bench_notify(
    args: argparse.Namespace, tokens: dict[str, str], team_path: Path, broker_cpu: int | None
) -> None:
    import socket
    import threading

    silent = socket.socket()
    silent.bind((HOST, 0))
    silent.listen(4096)  # accepts (the kernel does) and never answers: every send times out
    target = f"json://{HOST}:{silent.getsockname()[1]}/hook"
    print("\n== roster under a POST flood, without and with a failing notification target")
    figures = {}
    for label, extra in (
        ("no target", ()),
        ("a target that never answers", ("--notify", target, "--notify-after", "0")),
    ):
        proc = _start_broker(team_path, broker_cpu, *extra)
        BROKER_PID[0] = proc.pid
        try:
            port = _port_of(proc)
            assert proc.stderr is not None
            said: list[str] = []
            threading.Thread(target=said.extend, args=(proc.stderr,), daemon=True).start()
            p50, p99, rate = asyncio.run(
                _roster_under_flood(port, tokens, args.seconds, args.concurrency)
            )
        finally:
            _stop(proc)
        figures[label] = p99
        dropped = sum("dropping new ones" in line for line in said)
        print(
            f"{label:28s}: GET /roster p50 {p50:.2f} ms  p99 {p99:.2f} ms  "
            f"(POSTs meanwhile {rate:.0f}/s; log lines {len(said)}, overflow warnings {dropped})"
        )
    silent.close()
    ratio = figures["a target that never answers"] / figures["no target"]
    print(f"roster p99 with the failing target / without: {ratio:.2f}")


def _bench_history(
    args: argparse.Namespace, tokens: dict[str, str], team_path: Path, broker_cpu: int | None
) -> None:
    """Transitions/s (every POST a change of state, so every one a transition the history
    keeps) with the history on (the default, 24 h) and off (``--history-hours 0``), in
    rounds that alternate the two in the same run; in memory, and with ``--redis`` in a
    real redis-server too. No SSE subscribers: the fan-out's writes would hide what the
    history costs. Then the bytes one transition costs, in memory and in Redis."""
    names = list(tokens)
    flips = [_post(tokens[n], s) for s in ("blocked", "working") for n in names]
    stores: list[tuple[str, tuple[str, ...]]] = [("in memory", ())]
    server = None
    workdir = tempfile.TemporaryDirectory()
    if args.redis:
        binary = find_redis_server()
        if binary is None:
            sys.exit("--redis needs redis-server (apt-get install redis-server)")
        server = RedisServer(binary, Path(workdir.name))
        server.start()
        stores.append(("Redis", ("--redis", server.url)))
    print("\n== transitions/s with the history kept (24 h) vs off, interleaved")
    try:
        for store, extra in stores:
            rates: dict[str, list[float]] = {"off": [], "on": []}
            per_cpu: dict[str, list[float]] = {"off": [], "on": []}
            for _ in range(args.rounds):
                for label, hours in (("off", ("--history-hours", "0")), ("on", ())):
                    proc = _start_broker(team_path, broker_cpu, *extra, *hours)
                    BROKER_PID[0] = proc.pid
                    try:
                        port = _port_of(proc)
                        asyncio.run(_load(port, flips, 1.0, args.concurrency))  # warm up
                        rate, bad, cpu = asyncio.run(
                            _load(port, flips, args.seconds, args.concurrency)
                        )
                    finally:
                        _stop(proc)
                    assert bad == 0, f"{bad} errors"
                    rates[label].append(rate)
                    per_cpu[label].append(rate / cpu if cpu else 0.0)
            on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
            on_cpu, off_cpu = statistics.median(per_cpu["on"]), statistics.median(per_cpu["off"])
            print(
                f"{store:9s}: off {off:.0f}/s, on {on:.0f}/s ({on / off:.2f} x off); "
                f"per broker CPU-second off {off_cpu:.0f}, on {on_cpu:.0f} "
                f"({on_cpu / off_cpu if off_cpu else 0:.2f} x); rounds "
                + " ".join(
                    f"{a:.0f}/{b:.0f}" for a, b in zip(rates["off"], rates["on"], strict=True)
                )
            )
        if server is not None:
            _redis_bytes_per_transition(server.url)
    finally:
        if server is not None:
            server.stop()
        workdir.cleanup()
    _memory_bytes_per_transition(len(names))


def _redis_bytes_per_transition(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    key = "codex-presence:{bench}:history"
    length = client.xlen(key)
    size = client.memory_usage(key, samples=0) or 0
    last = client.memory_usage(key + ":last", samples=0) or 0
    print(
        f"Redis: the stream holds {length} transitions in {size / 1e6:.1f} MB: "
        f"{size / max(1, length):.0f} bytes each; the members' last states {last / 1e3:.0f} kB"
    )
    client.close()


def _memory_bytes_per_transition(members: int) -> None:
    import tracemalloc

    from codex_presence.broker.history import MemoryHistory, Transition

    history = MemoryHistory()
    count = 100_000
    names = [f"m{i:04d}" for i in range(members)]
    start = 1_767_225_600_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):
        state = ("working", "blocked", "idle", "offline")[(i // members) % 4]
        history.add(names[i % members], Transition(start + i * 37, state))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(
        f"in memory: {count} transitions of {members} members take "
        f"{(after - before) / 1e6:.1f} MB: {(after - before) / count:.0f} bytes each"
    )


if __name__ == "__main__":
    main()
