"""How fast wrap's and ``claude``'s reports reach the roster, and what an idle one costs
(issues 5, 17).

Starts a real broker (``create_app`` behind ``BrokerServer``, production defaults) in a
subprocess on a free loopback port, with one addition: an ASGI middleware that counts the
HTTP requests it receives, by method and path (read back at ``/_bench/requests``, which
counts nothing). This process holds one SSE subscription (as ``bob``) and timestamps every
``presence`` event with ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every process
on the machine).

(a) Latency, child write -> the new activity shown by the broker. A small child script
    (not codex) sits behind ``codex-presence wrap --broker URL --name alice``; on each
    command from us it stamps ``time.monotonic()`` into an app-server message that changes
    the state (``turn/started`` -> working, ``thread/status/changed`` with
    ``waitingOnApproval`` -> blocked, flags cleared -> working, status idle -> idle) and
    writes it. The latency is the SSE event's arrival minus that stamp: the relay, the
    mapping, the reporter's POST, the broker, its fan-out and the stream, end to end.
    Baseline, same run, same subscriber, each step interleaved with a wrap step (so both
    see the same machine): ``carol`` POSTs ``/presence/activity`` directly (no wrap),
    timed from just before the request to the event. Steps are ``--gap``
    seconds apart (more than the broker's 50 ms fan-out interval, so each change is its
    own batch, as one runner's transitions are in practice); the SSE event is sent after
    the broker's state changed, so a ``GET /roster`` at that moment shows the new activity
    (checked once at the end of each run).

(c) Latency, hook -> the new activity shown by the broker. A stand-in claude (not
    Claude Code) sits behind ``codex-presence claude --broker URL --name dave``: it reads
    its hooks from the ``--settings FILE`` it is given, as claude does, and on each
    command fires a hook that changes the state (UserPromptSubmit -> working,
    PermissionRequest -> blocked, PreToolUse -> working, Stop -> idle), stamping
    ``time.monotonic()`` just before: an async command hook is started with ``sh -c``, fed
    the payload and not waited for, as claude does; an HTTP hook is POSTed. The latency is
    the SSE event's arrival minus that stamp: the hook's process (the poster), the hook server,
    the Claude Code mapping, the reporter's POST, the broker, its fan-out and the stream.
    The same stand-in behind a second ``claude`` (``erin``, no bash or curl on its PATH: HTTP
    hooks) is the in-run comparison of the two kinds; both are interleaved with (a)'s
    steps and its baseline, the same direct POST. Also: how long claude waits for each
    hook (the HTTP answer; for an async hook, its start), stamped by the stand-in.

(b) Idle cost: the same wrap, its child idle (blocked on stdin), for ``--idle-seconds``.
    Requests: the broker's request counters just before and after the window (wrap's one
    long-lived ``GET /subscribe``, opened before, is held, not repeated: it counts once, at
    connect, outside the window). CPU: the wrap process's utime+stime from
    ``/proc/<pid>/stat`` (all its threads, clock-tick resolution) and, finer, the sum of
    ``/proc/<pid>/task/*/schedstat`` run times (nanoseconds; threads alive at both ends).

    The ``claude`` command, idle after its last Stop, is measured in the same window.

Goals: (a) p50 <= 5 ms, p99 <= 20 ms; (b) 0 requests, <= 5 ms CPU per minute; (c) p99 <= 20 ms.

    .venv/bin/python bench/latency.py [--transitions 400] [--gap 0.06] [--idle-seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
from httpx_sse import aconnect_sse

HOST = "127.0.0.1"
MEMBERS = ("alice", "bob", "carol", "dave", "erin")
"""dave: the claude section here (async command hooks), bench/tui.py's codex; erin: the
claude section's HTTP hooks (no bash or curl on its PATH)."""
CYCLE = ("work", "block", "unblock", "idle")
EXPECTED = {"work": "working", "block": "blocked", "unblock": "working", "idle": None}
BASELINE_STATE = {"work": "working", "block": "blocked", "unblock": "working", "idle": "idle"}


def token_of(name: str) -> str:
    return f"cp_bench-token-of-{name}"


# -- the child: a stand-in app-server that writes a state change when told to -------------

CHILD = r"""
import sys, time
import orjson

out, inp = sys.stdout.buffer, sys.stdin.buffer
turn = 0
for line in inp:
    do = orjson.loads(line)["params"]["do"]
    t = time.monotonic()
    if do == "work":
        turn += 1
        msg = {"method": "turn/started", "params": {"threadId": "th", "turn": {"id": f"tu{turn}",
               "items": [], "status": "inProgress"}, "benchT": t}}
    elif do in ("block", "unblock"):
        flags = ["waitingOnApproval"] if do == "block" else []
        msg = {"method": "thread/status/changed", "params": {"threadId": "th",
               "status": {"type": "active", "activeFlags": flags}, "benchT": t}}
    else:
        msg = {"method": "thread/status/changed", "params": {"threadId": "th",
               "status": {"type": "idle"}, "benchT": t}}
    out.write(orjson.dumps(msg) + b"\n")
    out.flush()
"""


# -- the stand-in claude: POSTs a hook that changes the state when told to ------------------

CLAUDE_CHILD = r"""
import http.client, json, subprocess, sys, time
from urllib.parse import urlsplit

assert sys.argv[1] == "--settings"
with open(sys.argv[2]) as f:
    hooks = json.load(f)["hooks"]
spec = hooks["Stop"][0]["hooks"][0]
url = urlsplit(hooks["SessionEnd"][0]["hooks"][0]["url"])  # an HTTP hook, whatever the rest
conn = http.client.HTTPConnection(url.hostname, url.port)
running = []
common = {"session_id": "bench", "transcript_path": "/nonexistent/bench.jsonl", "cwd": "/",
          "prompt_id": "p1"}
tool = 0
for line in sys.stdin:
    do = line.strip()
    if do == "work":
        body = {"hook_event_name": "UserPromptSubmit", "prompt": "go"}
    elif do == "block":
        tool += 1
        body = {"hook_event_name": "PermissionRequest", "tool_name": "Bash"}
    elif do == "unblock":
        body = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": f"t{tool}"}
    else:
        body = {"hook_event_name": "Stop", "background_tasks": []}
    data = json.dumps({**common, **body})
    running = [p for p in running if p.poll() is None]
    t = time.monotonic()
    if spec["type"] == "command":  # async, as claude runs it: started, fed, not waited for
        poster = subprocess.Popen(["sh", "-c", spec["command"]], stdin=subprocess.PIPE)
        poster.stdin.write(data.encode())
        poster.stdin.close()
        running.append(poster)
    else:
        conn.request("POST", url.path, data, {"content-type": "application/json"})
        answer = conn.getresponse()
        answer.read()
    answered = time.monotonic()
    sys.stdout.write(f"{t} {answered}\n")
    sys.stdout.flush()
"""


# -- the broker, in its own process, with request counters ---------------------------------


class CountRequests:
    """ASGI middleware: count every HTTP request by ``METHOD path``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if scope["path"] == "/_bench/requests":
                body = orjson.dumps(self.counts)
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            self.counts[f"{scope['method']} {scope['path']}"] += 1
        await self.app(scope, receive, send)


def serve_broker() -> None:
    import uvicorn

    from codex_presence.broker.config import build_broker
    from codex_presence.broker.server import BrokerServer, listen_socket
    from codex_presence.broker.team import Member, Team, hash_token

    members = tuple(Member(n, None, hash_token(token_of(n))) for n in MEMBERS)
    built = build_broker(Team(name="bench", members=members))
    broker, app = built.broker, built.app
    sock = listen_socket(HOST, 0)
    config = uvicorn.Config(
        CountRequests(app), log_config=None, log_level="warning", lifespan="on",
        timeout_graceful_shutdown=3,
    )  # fmt: skip

    def announce() -> None:
        sys.stdout.write(f"{sock.getsockname()[1]}\n")
        sys.stdout.flush()

    BrokerServer(config, broker=broker, on_started=announce).run(sockets=[sock])


# -- measuring ------------------------------------------------------------------------------


class Watch:
    """Our SSE subscription: the latest activity per member, and when each event came."""

    def __init__(self) -> None:
        self.activity: dict[str, str | None] = {}
        self.connected: dict[str, int] = {}
        self.changed = asyncio.Condition()
        self.events = 0
        self.at = 0.0

    async def run(self, client: httpx.AsyncClient) -> None:
        timeout = httpx.Timeout(5.0, read=None)
        async with aconnect_sse(
            client, "GET", "/subscribe", params={"name": "bob"}, timeout=timeout
        ) as source:
            source.response.raise_for_status()
            async for event in source.aiter_sse():
                now = time.monotonic()
                if event.event == "roster":
                    rows = orjson.loads(event.data)["members"]
                elif event.event == "presence":
                    rows = [orjson.loads(event.data)]
                else:
                    continue
                async with self.changed:
                    self.events += 1
                    for row in rows:
                        self.activity[row["name"]] = row.get("activity")
                        self.connected[row["name"]] = row["connected"]
                    self.at = now
                    self.changed.notify_all()

    async def until(self, name: str, activity: str | None, within: float = 5.0) -> float:
        """Wait for ``name`` to show ``activity``; the arrival time of that event."""
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: self.activity.get(name, "?") == activity), within
            )
            return self.at

    async def until_connected(self, name: str, count: int, within: float = 10.0) -> None:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: self.connected.get(name) == count), within
            )


def summary(label: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return (
        f"  {label:<34} n={len(ms):<4} p50 {statistics.median(ms):6.2f} ms   "
        f"p90 {q[89]:6.2f} ms   p99 {q[98]:6.2f} ms   max {max(ms):6.2f} ms"
    )


async def roster_activity(client: httpx.AsyncClient, name: str) -> str | None:
    rows = (await client.get("/roster")).json()
    (row,) = [r for r in rows if r["name"] == name]
    activity: str | None = row.get("activity")
    return activity


async def direct_step(carol: httpx.AsyncClient, watch: Watch, do: str) -> float:
    """carol POSTs her activity herself: the broker's own POST -> SSE latency (ms)."""
    t0 = time.monotonic()
    post = asyncio.create_task(carol.post("/presence/activity", json={"state": BASELINE_STATE[do]}))
    seen = await watch.until("carol", EXPECTED[do])
    (await post).raise_for_status()
    return (seen - t0) * 1000


async def wrap_step(wrap: asyncio.subprocess.Process, watch: Watch, do: str) -> float:
    """The child behind wrap writes a state change: child write -> SSE latency (ms)."""
    assert wrap.stdin is not None and wrap.stdout is not None
    wrap.stdin.write(orjson.dumps({"method": "bench/emit", "params": {"do": do}}) + b"\n")
    await wrap.stdin.drain()
    written = orjson.loads(await wrap.stdout.readline())["params"]["benchT"]
    seen = await watch.until("alice", EXPECTED[do])
    return float(seen - written) * 1000


async def claude_step(
    claude: asyncio.subprocess.Process, watch: Watch, do: str, member: str = "dave"
) -> tuple[float, float]:
    """The stand-in claude fires a hook: (hook -> SSE latency, claude's wait) in ms."""
    assert claude.stdin is not None and claude.stdout is not None
    claude.stdin.write(do.encode() + b"\n")
    await claude.stdin.drain()
    sent, answered = map(float, (await claude.stdout.readline()).split())
    seen = await watch.until(member, EXPECTED[do])
    return (seen - sent) * 1000, (answered - sent) * 1000


def cpu_ticks_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_schedstat(pid: int) -> dict[str, tuple[int, int]]:
    """Run time in ns and times scheduled in, of each thread of ``pid``
    (``/proc/<pid>/task/<tid>/schedstat``: every scheduling is a wake-up of an idle thread)."""
    out: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
            out[task.name] = (int(fields[0]), int(fields[2]))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


async def bench(url: str, args: argparse.Namespace, tmp: Path) -> None:
    bob = {"authorization": f"Bearer {token_of('bob')}"}
    async with httpx.AsyncClient(base_url=url, headers=bob, trust_env=False) as client:
        watch = Watch()
        watcher = asyncio.create_task(watch.run(client))
        await watch.until_connected("bob", 1)

        child = tmp / "child.py"
        child.write_text(CHILD)
        token_file = tmp / "alice.token"
        token_file.write_text(token_of("alice") + "\n")
        token_file.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
        wrap = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "codex_presence", "wrap", "-q",
            "--broker", url, "--name", "alice", "--token-file", str(token_file),
            "--", sys.executable, str(child),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )  # fmt: skip
        assert wrap.stdin is not None and wrap.stdout is not None
        await watch.until_connected("alice", 1)

        stand_in = tmp / "claude"
        stand_in.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp / "claude.py"} "$@"\n')
        stand_in.chmod(0o755)
        (tmp / "claude.py").write_text(CLAUDE_CHILD)
        dave_token = tmp / "dave.token"
        dave_token.write_text(token_of("dave") + "\n")
        dave_token.chmod(0o600)
        claude = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "codex_presence", "claude", "-q",
            "--broker", url, "--name", "dave", "--token-file", str(dave_token),
            "--", str(stand_in),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )  # fmt: skip
        assert claude.stdin is not None
        await watch.until_connected("dave", 1)
        erin_token = tmp / "erin.token"
        erin_token.write_text(token_of("erin") + "\n")
        erin_token.chmod(0o600)
        claude_http = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "codex_presence", "claude", "-q",
            "--broker", url, "--name", "erin", "--token-file", str(erin_token),
            "--", str(stand_in),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**env, "PATH": "/nonexistent"},
        )  # fmt: skip
        assert claude_http.stdin is not None
        await watch.until_connected("erin", 1)

        # (a) baseline and wrap steps interleaved, so that both see the same machine.
        carol_auth = {"authorization": f"Bearer {token_of('carol')}"}
        base: list[float] = []
        through: list[float] = []
        hooked: list[float] = []
        answers: list[float] = []
        hooked_http: list[float] = []
        answers_http: list[float] = []
        async with httpx.AsyncClient(base_url=url, headers=carol_auth, trust_env=False) as carol:
            await carol.get("/healthz")  # the connection is open before the first timing
            for i in range(args.transitions):
                do = CYCLE[i % len(CYCLE)]
                base.append(await direct_step(carol, watch, do))
                await asyncio.sleep(args.gap)
                through.append(await wrap_step(wrap, watch, do))
                await asyncio.sleep(args.gap)
                latency, answer = await claude_step(claude, watch, do)
                hooked.append(latency)
                answers.append(answer)
                await asyncio.sleep(args.gap)
                latency, answer = await claude_step(claude_http, watch, do, "erin")
                hooked_http.append(latency)
                answers_http.append(answer)
                await asyncio.sleep(args.gap)
        assert await roster_activity(client, "alice") is None
        assert await roster_activity(client, "carol") is None
        assert await roster_activity(client, "dave") is None

        gap_ms = args.gap * 1000
        print(f"(a) child write -> activity shown by the broker (SSE), gap {gap_ms:.0f} ms")
        print(summary("baseline: direct POST (no wrap)", base))
        print(summary("through wrap (child -> broker)", through))
        p50, p99 = statistics.median(through), statistics.quantiles(through, n=100)[98]
        print(
            f"  wrap adds p50 {p50 - statistics.median(base):+.2f} ms; "
            f"ratio p50 {p50 / statistics.median(base):.2f}x baseline"
        )
        print(
            f"  goal p50 <= 5 ms: {'met' if p50 <= 5 else 'MISSED'}; "
            f"p99 <= 20 ms: {'met' if p99 <= 20 else 'MISSED'}"
        )

        print(f"(c) hook POST -> activity shown by the broker (SSE), gap {gap_ms:.0f} ms")
        print(summary("baseline: direct POST (no claude)", base))
        print(summary("through `claude`, HTTP hooks (no bash)", hooked_http))
        print(summary("  the HTTP hook's answer, as claude waits", answers_http))
        print(summary("through `claude` (async hook -> broker)", hooked))
        print(summary("  the async hook's start, as claude waits", answers))
        added = statistics.median(hooked) - statistics.median(hooked_http)
        print(f"  async hooks add p50 {added:+.2f} ms to HTTP hooks' (same run, interleaved)")
        p50, p99 = statistics.median(hooked), statistics.quantiles(hooked, n=100)[98]
        print(
            f"  claude adds p50 {p50 - statistics.median(base):+.2f} ms; "
            f"ratio p50 {p50 / statistics.median(base):.2f}x baseline"
        )
        print(f"  goal p99 <= 20 ms: {'met' if p99 <= 20 else 'MISSED'}")

        # (b) the same wrap, idle. Let the last report and any retry settle first (and
        # `claude`'s view of the session file, which its stand-in never writes).
        await asyncio.sleep(2.0)
        before: Counter[str] = Counter((await client.get("/_bench/requests")).json())
        events_before = watch.events
        pid = wrap.pid
        ticks0, sched0 = cpu_ticks_seconds(pid), cpu_schedstat(pid)
        claude_sched0 = cpu_schedstat(claude.pid)
        await asyncio.sleep(args.idle_seconds)
        ticks1, sched1 = cpu_ticks_seconds(pid), cpu_schedstat(pid)
        claude_sched1 = cpu_schedstat(claude.pid)
        after: Counter[str] = Counter((await client.get("/_bench/requests")).json())
        during = after - before
        run_ns = sum(sched1[t][0] - sched0[t][0] for t in sched1 if t in sched0)
        wakes = {t: sched1[t][1] - sched0[t][1] for t in sched1 if t in sched0}
        per_minute = 60 / args.idle_seconds
        print(f"(b) idle wrap (child idle, broker configured) over {args.idle_seconds:g} s")
        print(
            f"  requests the broker received: {sum(during.values())} "
            f"{dict(during) or ''}(wrap's one GET /subscribe is held from before the window)"
        )
        print(
            f"  wrap CPU: {(ticks1 - ticks0) * 1000:.0f} ms utime+stime (/proc stat, "
            f"{1000 / os.sysconf('SC_CLK_TCK'):.0f} ms ticks); {run_ns / 1e6:.2f} ms run time "
            f"(schedstat, {len(sched1)} threads) = {run_ns / 1e6 * per_minute:.2f} ms/min"
        )
        print(
            f"  wrap threads scheduled {sum(wakes.values())} times "
            f"({sum(wakes.values()) / args.idle_seconds:.1f}/s; per thread: "
            f"{sorted(wakes.values(), reverse=True)})"
        )
        claude_ns = sum(
            claude_sched1[t][0] - claude_sched0[t][0] for t in claude_sched1 if t in claude_sched0
        )
        claude_wakes = sum(
            claude_sched1[t][1] - claude_sched0[t][1] for t in claude_sched1 if t in claude_sched0
        )
        print(
            f"  `claude` idle in the same window: {claude_ns / 1e6 * per_minute:.2f} ms/min run "
            f"time, scheduled {claude_wakes} times ({claude_wakes / args.idle_seconds:.1f}/s)"
        )
        print(f"  SSE events to our subscriber meanwhile: {watch.events - events_before}")
        print(
            f"  goal 0 requests: {'met' if not during else 'MISSED'}; <= 5 ms CPU/min: "
            f"{'met' if run_ns / 1e6 * per_minute <= 5 else 'MISSED'}"
        )

        wrap.stdin.close()
        claude.stdin.close()
        claude_http.stdin.close()
        await asyncio.wait_for(wrap.wait(), 10)
        await asyncio.wait_for(claude.wait(), 10)
        await asyncio.wait_for(claude_http.wait(), 10)
        watcher.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transitions", type=int, default=400)
    parser.add_argument("--gap", type=float, default=0.06, help="seconds between transitions")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--serve-broker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_broker:
        serve_broker()
        return
    broker = subprocess.Popen(
        [sys.executable, __file__, "--serve-broker"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert broker.stdout is not None
        port = int(broker.stdout.readline())
        print(f"broker pid {broker.pid} on {HOST}:{port}; {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(bench(f"http://{HOST}:{port}", args, Path(tmp)))
    finally:
        broker.terminate()
        broker.wait(10)


if __name__ == "__main__":
    main()
