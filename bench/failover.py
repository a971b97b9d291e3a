"""The failover timeline of brokers on Redis behind Sentinel (issue 26).

Starts a primary, a replica and three sentinels on loopback (``_sentinel.py``:
``down-after-milliseconds`` 1000, ``failover-timeout`` 5000, quorum 2), two real
``codex-presence broker --redis redis+sentinel://...`` commands sharing them, and
``--members`` reporters that each heartbeat ``working`` every ``--every`` s, alternately
to each broker, while ``/healthz`` of both is polled every 20 ms. Then SIGKILLs the primary
and prints, from the kill: the sentinels' ``+sdown``, ``+odown`` and ``+switch-master``,
each broker's first ``/healthz`` 200 and first report answered 204 after it, how many
reports got 503 meanwhile, and whether every member is still working on both brokers
(none lost). Goal: both brokers serve again <= 10 s after the kill.

    .venv/bin/python bench/failover.py [--members 20] [--every 0.5] [--after 5]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from codex_presence.broker.team_file import render_team

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _redis import find_redis_server
from _sentinel import DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, SentinelSetup, find_sentinel

GOAL = 10.0


class Watch:
    """What the load saw, by monotonic time."""

    def __init__(self) -> None:
        self.health: dict[str, list[tuple[float, int]]] = {}
        self.reports: dict[str, list[tuple[float, int]]] = {}

    def first(self, series: list[tuple[float, int]], status: int, after: float) -> float | None:
        return next((at for at, got in series if at >= after and got == status), None)


async def _poll_health(client: httpx.AsyncClient, url: str, watch: Watch, stop: asyncio.Event):
    series = watch.health.setdefault(url, [])
    while not stop.is_set():
        try:
            status = (await client.get(url + "/healthz", timeout=2)).status_code
        except httpx.HTTPError:
            status = 0
        series.append((time.monotonic(), status))
        await asyncio.sleep(0.02)


async def _heartbeat(
    client: httpx.AsyncClient,
    urls: list[str],
    token: str,
    every: float,
    watch: Watch,
    stop: asyncio.Event,
) -> None:
    turn = 0
    while not stop.is_set():
        url = urls[turn % len(urls)]
        turn += 1
        headers = {"authorization": f"Bearer {token}"}
        try:
            response = await client.post(
                url + "/presence/activity", json={"state": "working"}, headers=headers, timeout=5
            )
            status = response.status_code
        except httpx.HTTPError:
            status = 0
        watch.reports.setdefault(url, []).append((time.monotonic(), status))
        await asyncio.sleep(every)


def _roster(url: str, token: str) -> dict[str, str]:
    people = httpx.get(url + "/roster", headers={"authorization": f"Bearer {token}"}).json()
    return {p["name"]: p.get("activity", "idle") for p in people}


def _port_of(proc: subprocess.Popen[str]) -> int:
    assert proc.stderr is not None
    said = ""
    while "listening on" not in (line := proc.stderr.readline()):
        said += line
        if not line:
            sys.exit(f"broker did not start: {said}")
    return int(line.split("listening on http://")[1].split()[0].rsplit(":", 1)[1])


async def _run(args: argparse.Namespace, setup: SentinelSetup, urls: list[str], tokens: list[str]):
    watch = Watch()
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=args.members + 4)
    async with httpx.AsyncClient(limits=limits) as client:
        tasks = [asyncio.create_task(_poll_health(client, url, watch, stop)) for url in urls]
        tasks += [
            asyncio.create_task(_heartbeat(client, urls, token, args.every, watch, stop))
            for token in tokens
        ]
        await asyncio.sleep(2)
        before = [_roster(url, tokens[0]) for url in urls]
        killed = await asyncio.to_thread(setup.kill_primary)
        await asyncio.sleep(args.after)
        for _ in range(200):  # up to 20 s more, until both answer 200 again
            if all(watch.first(watch.health[url], 200, killed) for url in urls):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(2 * args.every)
        stop.set()
        await asyncio.gather(*tasks)
    after = [_roster(url, tokens[0]) for url in urls]
    return watch, killed, before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between heartbeats")
    parser.add_argument("--after", type=float, default=5.0, help="seconds watched after")
    args = parser.parse_args()
    server, sentinel = find_redis_server(), find_sentinel()
    if server is None or sentinel is None:
        sys.exit("needs redis-server and redis-sentinel (apt-get install redis-sentinel)")
    names = [f"m{i:03d}" for i in range(args.members)]
    tokens = [f"token-{name}-0123456789abcdef" for name in names]
    with tempfile.TemporaryDirectory(prefix="codex-presence-failover-") as workdir:
        team = Path(workdir) / "team.toml"
        team.write_text(
            render_team("bench", list(zip(names, [None] * len(names), tokens, strict=True)))
        )
        setup = SentinelSetup(server, sentinel, Path(workdir))
        procs: list[subprocess.Popen[str]] = []
        try:
            setup.start()
            env = {"CODEX_PRESENCE_REDIS": setup.url, "PATH": "/usr/bin:/bin"}
            command = [sys.executable, "-m", "codex_presence", "broker", "--team", str(team)]
            command += ["--port", "0", "--host", "127.0.0.1", "--activity-ttl", "10"]
            for _ in range(2):
                procs.append(subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env))
            urls = [f"http://127.0.0.1:{_port_of(proc)}" for proc in procs]
            replica = setup.replica
            assert replica is not None
            watch, killed, before, after = asyncio.run(_run(args, setup, urls, tokens))
            promoted = setup.primary_port() == replica.port
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
            setup.stop()

    def at(moment: float | None) -> str:
        return "never" if moment is None else f"{moment - killed:7.3f} s"

    print(
        f"Sentinel: down-after-milliseconds {DOWN_AFTER_MS}, failover-timeout "
        f"{FAILOVER_TIMEOUT_MS}, quorum 2 of 3; {args.members} members heartbeating every "
        f"{args.every:g} s to two brokers"
    )
    print(f"  kill -9 primary        {at(killed)}")
    for channel in ("+sdown", "+odown", "+switch-master"):
        print(f"  sentinel {channel:<14}{at(setup.event_time(channel, killed))}")
    served: list[float] = []
    for name, url in zip("AB", urls, strict=True):
        first_503 = watch.first(watch.health[url], 503, killed)
        health = watch.first(watch.health[url], 200, first_503 or killed)
        reports = watch.reports.get(url, [])
        refused = sum(1 for moment, status in reports if moment >= killed and status != 204)
        last_bad = max((m for m, s in reports if m >= killed and s != 204), default=killed)
        report = watch.first(reports, 204, last_bad)
        print(f"  broker {name} /healthz 503   {at(first_503)}")
        print(f"  broker {name} /healthz 200   {at(health)}  (first after the kill)")
        print(f"  broker {name} report 204     {at(report)}  ({refused} reports not 204 meanwhile)")
        served.append(max(health or 1e9, report or 1e9) - killed)
    lost = [(name, roster[name]) for roster in after for name in names if roster[name] != "working"]
    working_before = sum(v == "working" for r in before for v in r.values())
    working_after = sum(v == "working" for r in after for v in r.values())
    print(
        f"  working before: {working_before} of {2 * args.members} (both brokers' rosters); "
        f"after: {working_after}; lost: {lost or 'none'}"
    )
    print(f"  the replica was promoted: {promoted}")
    worst = max(served)
    ok = worst <= GOAL and not lost and promoted
    verdict = "met" if ok else "NOT met"
    print(
        f"goal: both serve again <= {GOAL:g} s after the kill, none lost: {worst:.3f} s: {verdict}"
    )


if __name__ == "__main__":
    main()
