"""What a report costs the broker in Redis mode: CPU microseconds per report through the
real :class:`~codex_presence.broker.redis.store.RedisStore` and a real ``redis-server``,
its script calls sent one by one (each its own ``EVALSHA`` round trip, as before issue 26)
vs batched per event-loop tick (``broker/redis/batch.py``), side by side in one run.

No HTTP: this isolates the Redis part of a report (the script call, its reply, and the
echo of its event on the broker's own subscription), which ``bench/broker.py --redis``
measures together with everything else. ``--concurrency`` reports are in flight at once
(``bench/broker.py`` keeps 8); rounds alternate between the two ways so that other work on
the machine weighs on both alike. CPU time is this process's (the broker's side), not
Redis's.

    .venv/bin/python bench/redis_reports.py [--members 1000] [--rounds 3] [--seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from codex_presence._wire import ActivityState
from codex_presence.broker.redis.link import RedisLink
from codex_presence.broker.redis.store import RedisStore

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _redis import RedisServer, find_redis_server


class _Quiet:
    def changed(self, name: str) -> None:
        pass

    def store_down(self, reason: str) -> None:
        sys.exit(f"redis down during the bench: {reason}")

    def store_back(self) -> None:
        pass


def _one_by_one(link: RedisLink) -> None:
    """The link's script calls as before issue 26: each its own call, round trip and
    pooled connection (redis-py's ``Script.__call__``)."""

    async def run_script(script: Any, args: list[Any]) -> Any:
        return await script(keys=[link.channel], args=[link.key(""), *args])

    link.run_script = run_script  # type: ignore[method-assign]


async def _measure(store: RedisStore, names: list[str], seconds: float, concurrency: int):
    """Reports for ``seconds`` from ``concurrency`` workers: (reports, CPU us per report)."""
    done = [0]

    async def worker(i: int, stop: float) -> None:
        k = i
        while time.perf_counter() < stop:
            now = int(time.time() * 1000)
            await store.report(names[k % len(names)], ActivityState.WORKING, now)
            k += concurrency
            done[0] += 1

    cpu = time.process_time()
    stop = time.perf_counter() + seconds
    await asyncio.gather(*(worker(i, stop) for i in range(concurrency)))
    await asyncio.sleep(0.2)  # the echoes of the last reports, on the subscription
    return done[0], (time.process_time() - cpu) / done[0] * 1e6


async def _run(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    names = [f"m{i:04d}" for i in range(args.members)]
    costs: dict[str, list[float]] = {"one by one": [], "batched": []}
    stores = {}
    async with anyio.create_task_group() as tg:
        for way in costs:
            link = RedisLink(url, team=way.replace(" ", "-"))
            if way == "one by one":
                _one_by_one(link)
            stores[way] = store = RedisStore(link, names=names)
            await tg.start(store.run, _Quiet())
            await _measure(store, names, 0.5, args.concurrency)  # warm: scripts loaded
        for _ in range(args.rounds):
            for way, store in stores.items():
                count, cost = await _measure(store, names, args.seconds, args.concurrency)
                costs[way].append(cost)
                print(f"  {way:10s}: {count:6d} reports, {cost:6.0f} us CPU each")
        tg.cancel_scope.cancel()
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    binary = find_redis_server()
    if binary is None:
        sys.exit("needs redis-server (apt-get install redis-server)")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"report cost in Redis mode, {args.concurrency} in flight; load average {load}")
    with tempfile.TemporaryDirectory() as workdir:
        server = RedisServer(binary, Path(workdir))
        server.start()
        try:
            costs = asyncio.run(_run(server.url, args))
        finally:
            server.stop()
    before, after = (statistics.median(costs[w]) for w in ("one by one", "batched"))
    print(
        f"median CPU per report: one by one {before:.0f} us, batched {after:.0f} us "
        f"({after / before:.2f} x)"
    )


if __name__ == "__main__":
    main()
