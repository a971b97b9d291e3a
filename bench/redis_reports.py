"""What a report costs the broker in Redis mode: CPU microseconds per report through the
real :class:`~codex_presence.broker.redis.store.RedisStore` and a real ``redis-server``,
by kind of report, and against the same figures of another version of the code.

No HTTP and no streams: this isolates the Redis part of a report (the script call, its
reply, the echo of its event on the broker's own subscription, the mirror's update),
which ``bench/broker.py --redis`` measures together with everything else (and its
fan-out to a thousand streams, whose cost per report moves with the rate). Three kinds:

* ``heartbeat``: the same state again (working), no change;
* ``transition``: working <-> blocked, every report a change (no ``agent``: what
  ``bench/broker.py`` sends);
* ``agent``: the same transitions, each session's record holding an ``agent`` object (its
  client, project and what it waits on), reported once and carried by every event since
  (what runners send since issue 32).

``--concurrency`` reports are in flight at once (``bench/broker.py`` keeps 8). Each
measurement runs in a process of its own, pinned to one core (Redis on the others), and
CPU is that process's (user + system: the broker's side, not Redis's). With ``--baseline
PYTHON`` (another checkout's venv, e.g. a ``git worktree`` of the commit before a change),
each round measures both, alternating, so that other work on the machine weighs on both
alike; the verdict is the median over rounds of each round's ratio (this / baseline).
A baseline older than issue 32 has no ``agent`` kind.

``--offline`` measures the store's reading of each report alone (its reply and its echo,
synthetic events shaped as the scripts publish them, no socket): the part of a report that
the record's format decides, steadier than a round trip on a busy machine; and, under
``valgrind --tool=callgrind`` (``--worker offline --reps 0`` then ``--reps 1``, the
difference over 4,000 reports), in instructions, which no load moves.

``--callgrind N`` counts the instructions of the live path instead (the real store and
redis-server as above, N reports of each kind under callgrind minus a run of 0: the
broker's user-space side of the script call, round trip, reply and echo), steady to a
few hundred instructions between rounds where the CPU figure moved by half.

    .venv/bin/python bench/redis_reports.py [--members 1000] [--rounds 5] [--seconds 2]
        [--baseline /path/to/other/.venv/bin/python] [--offline | --callgrind 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

KINDS = ("heartbeat", "transition", "agent")
AGENT = {"client": "codex", "version": "0.171.0", "project": "api-server"}
WAITS = {"kind": "command", "tool": "shell", "program": "make"}


class _Quiet:
    def changed(self, name: str) -> None:
        pass

    def store_down(self, reason: str) -> None:
        sys.exit(f"redis down during the bench: {reason}")

    def store_back(self) -> None:
        pass


def _reports() -> dict[str, list[Any]] | None:
    """The reports of each kind as the store of the imported code takes them (each kind
    cycles through its list); None for the ``agent`` kind before issue 32."""
    from codex_presence._wire import ActivityState

    working, blocked = ActivityState.WORKING, ActivityState.BLOCKED
    try:
        from codex_presence.broker.record import KEEP, Report
    except ImportError:  # before issue 32: the store took the state alone
        return {"heartbeat": [working], "transition": [blocked, working]}
    return {
        "heartbeat": [Report(working)],
        "transition": [Report(blocked), Report(working)],
        "agent": [Report(blocked, agent=KEEP), Report(working, agent=KEEP)],
        "agent-set": [Report(blocked, agent={**AGENT, "waits": WAITS})],
    }


async def _measure(
    store: Any, names: list[str], reports: list[Any], seconds: float, concurrency: int
) -> float:
    """Reports for ``seconds`` from ``concurrency`` workers, member by member, each member's
    next report the next of ``reports``: CPU us per report (user + system)."""
    done = [0]

    async def worker(i: int, stop: float) -> None:
        k = i
        while time.perf_counter() < stop:
            name = names[k % len(names)]
            report = reports[(k // len(names)) % len(reports)]
            await store.report(name, report, int(time.time() * 1000))
            k += concurrency
            done[0] += 1

    before = resource.getrusage(resource.RUSAGE_SELF)
    stop = time.perf_counter() + seconds
    await asyncio.gather(*(worker(i, stop) for i in range(concurrency)))
    await asyncio.sleep(0.2)  # the echoes of the last reports, on the subscription
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu / done[0] * 1e6


async def _worker(url: str, team: str, args: argparse.Namespace) -> dict[str, float]:
    import anyio

    from codex_presence.broker.redis.link import RedisLink
    from codex_presence.broker.redis.store import RedisStore

    names = [f"m{i:04d}" for i in range(args.members)]
    kinds = _reports()
    assert kinds is not None
    costs: dict[str, float] = {}
    async with anyio.create_task_group() as tg:
        store = RedisStore(RedisLink(url, team=team), names=names)
        await tg.start(store.run, _Quiet())
        for kind in KINDS:
            if kind not in kinds:
                continue
            if kind == "agent":  # every session's record holds one: reported once
                await _measure(store, names, kinds["agent-set"], 0.5, args.concurrency)
            await _measure(store, names, kinds[kind], 0.3, args.concurrency)  # warm
            costs[kind] = await _measure(store, names, kinds[kind], args.seconds, args.concurrency)
        tg.cancel_scope.cancel()
    return costs


def _offline(kind: str, reps: int) -> float:
    """The broker's side of ``reps`` x 4,000 reports of ``kind`` with no socket: each
    report's reply and its echo, as the store reads them (synthetic events shaped as the
    scripts publish them, numbered in order): the min over reps of CPU us per report. Run
    under ``valgrind --tool=callgrind`` with ``--reps 0`` and ``--reps 1``, the difference
    is the instructions of 4,000 reports: a figure the machine's load does not move."""
    import orjson

    from codex_presence.broker.redis.link import RedisLink
    from codex_presence.broker.redis.store import RedisStore

    names = [f"m{i:04d}" for i in range(1000)]
    # The tracker's clock stands still (a C callable, as time.monotonic is): under
    # callgrind a run outlasts the TTL, and lapses coming due by the wall clock moved the
    # count by ~10% between runs.
    link_ = RedisLink("redis://127.0.0.1:1/0", team="offline")
    store: Any = RedisStore(link_, names=names, clock=itertools.repeat(1000.0).__next__)
    store._listener = _Quiet()
    link: Any = store._link
    named = _reports() is not None and "agent" in (_reports() or {})
    agent = {**AGENT, "waits": WAITS} if kind == "agent" else None
    seq = 0

    def events(rounds: int) -> list[bytes]:
        nonlocal seq
        made = []
        for r in range(rounds):
            state = "working" if kind == "heartbeat" or r % 2 else "blocked"
            for name in names:
                seq += 1
                now = 1764590000000 + seq
                since = 1764590000000 if kind == "heartbeat" else now
                if named:
                    record: Any = {"state": state, "since": since}  # 0s and nulls left out
                    if agent is not None:
                        record["agent"] = agent
                    event: Any = {"seq": seq, "kind": "s", "name": name, "session": "",
                                  "ttl": 30000, "createdAt": 1764590000000, "lastSeen": now,
                                  "record": record}  # fmt: skip
                else:  # before issue 32: the anonymous session's positional event
                    event = [seq, "a", name, state, 30000, since, 1764590000000, now]
                made.append(orjson.dumps(event))
        return made

    if named:
        from codex_presence.broker.redis.records import SEQ_MAX, number

        sessions = store._sessions

        def reply(event: bytes) -> None:  # SessionActivity.report, after the round trip
            data = orjson.loads(event)
            seq = number(data.get("seq"), SEQ_MAX, "seq")
            if sessions.heard(seq, data) is not None and hasattr(link, "expect_echo"):
                link.expect_echo(event, seq)
    else:

        def reply(event: bytes) -> None:
            store._apply_report(orjson.loads(event))

    deliver = link._deliver
    for event in events(2):  # every member held, every path warm
        reply(event)
        deliver(event)
    batches = [events(4) for _ in range(max(reps, 1))]
    costs = []
    for batch in batches[:reps]:
        started = time.process_time()
        for event in batch:
            reply(event)
            deliver(event)
        costs.append((time.process_time() - started) / len(batch) * 1e6)
    return min(costs, default=0.0)


async def _counted(url: str, team: str, kind: str, count: int, args: argparse.Namespace) -> None:
    """``count`` reports of ``kind`` (after every member's first ones, and 2,000 more to
    warm up), ``--concurrency`` in flight, then their echoes: what ``--callgrind``
    counts the instructions of (a run of 0 reports is subtracted)."""
    import anyio

    from codex_presence.broker.redis.link import RedisLink
    from codex_presence.broker.redis.store import RedisStore

    names = [f"m{i:04d}" for i in range(args.members)]
    kinds = _reports() or {}
    numbers = itertools.count()

    async def report(reports: list[Any], until: int) -> None:
        while (k := next(numbers)) < until:
            name, nth = names[k % len(names)], (k // len(names)) % len(reports)
            await store.report(name, reports[nth], 1764590000000 + k)

    async def reports(of: list[Any], how_many: int) -> None:
        nonlocal numbers
        numbers = itertools.count()
        await asyncio.gather(*(report(of, how_many) for _ in range(args.concurrency)))
        await asyncio.sleep(0.5)  # the echoes of the last ones, on the subscription

    async with anyio.create_task_group() as tg:
        store = RedisStore(RedisLink(url, team=team), names=names)
        await tg.start(store.run, _Quiet())
        await reports(kinds["agent-set" if kind == "agent" else kind], len(names))
        await reports(kinds[kind], 2000)
        await reports(kinds[kind], count)
        tg.cancel_scope.cancel()


def _instructions(python: str, url: str, team: str, kind: str, count: int, args: Any) -> int:
    """The instructions of a :func:`_counted` run, in a process of ``python`` under
    ``valgrind --tool=callgrind`` (user space: the broker's side, not Redis's)."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg", python, __file__,
            "--worker", url, "--team", team, "--kind", kind, "--count", str(count),
            "--members", str(args.members), "--concurrency", str(args.concurrency),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, cwd=out, env=env, timeout=900)
        if done.returncode != 0:
            sys.exit(f"{python}: the counted run failed: {done.stderr.decode()[-400:]}")
        for line in Path(out, "cg").read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    sys.exit("callgrind wrote no totals")


def _run_worker(python: str, url: str, team: str, args: argparse.Namespace, cpu: int | None) -> Any:
    """One measurement in a process of ``python`` (pinned to ``cpu``): its costs."""
    command = [
        python, __file__, "--worker", url, "--team", team, "--members", str(args.members),
        "--seconds", str(args.seconds), "--concurrency", str(args.concurrency),
        "--reps", str(args.reps),
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir())
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        sys.exit(f"{python}: the measurement failed")
    return json.loads(out.splitlines()[-1])


@contextmanager
def _redis_server(workdir: Path, args: argparse.Namespace, cpus: list[int]) -> Iterator[str]:
    """A redis-server on the cores but the first (the measured process's), and its URL;
    ``offline`` without one (``--offline``)."""
    if args.offline:
        yield "offline"
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _redis import RedisServer, find_redis_server

    binary = find_redis_server()
    if binary is None:
        sys.exit("needs redis-server (apt-get install redis-server)")
    server = RedisServer(binary, workdir)
    server.start()
    if len(cpus) > 1 and server.proc is not None:
        os.sched_setaffinity(server.proc.pid, set(cpus[1:]))
    try:
        yield server.url
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--baseline", metavar="PYTHON", help="another checkout's python")
    parser.add_argument(
        "--offline",
        action="store_true",
        help="the store's reading of each report alone (reply and echo), no socket",
    )
    parser.add_argument("--reps", type=int, default=7, help="--offline: repetitions")
    parser.add_argument(
        "--callgrind",
        type=int,
        metavar="N",
        help="instructions per report instead of CPU: N reports of each kind under "
        "valgrind's callgrind (minus a run of 0), a figure the machine's load barely moves",
    )
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--team", default="bench", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "offline":
        kinds = _reports() or {}
        print(json.dumps({k: _offline(k, args.reps) for k in KINDS if k in kinds}))
        return
    if args.worker and args.count is not None:
        asyncio.run(_counted(args.worker, args.team, args.kind, args.count, args))
        return
    if args.worker:
        print(json.dumps(asyncio.run(_worker(args.worker, args.team, args))))
        return
    if args.callgrind:
        _callgrind(args)
        return
    ways = {"this": sys.executable}
    if args.baseline:
        ways["baseline"] = args.baseline
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[0] if len(cpus) > 1 else None
    what = "the store's reading alone, no socket" if args.offline else "in Redis mode"
    print(
        f"CPU per report {what}, {args.concurrency} in flight, {args.members} members; "
        + ", ".join(f"{w}: {p}" for w, p in ways.items())
    )
    costs: dict[str, dict[str, list[float]]] = {way: {k: [] for k in KINDS} for way in ways}
    ratios: dict[str, list[float]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory() as workdir, _redis_server(Path(workdir), args, cpus) as url:
        for round_ in range(args.rounds):
            load = os.getloadavg()[0]
            got = {}
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for way in order:
                got[way] = _run_worker(ways[way], url, f"{way}-{round_}", args, cpu)
                for kind, us in got[way].items():
                    costs[way][kind].append(us)
            line = "  ".join(
                f"{way} " + " ".join(f"{k} {us:5.1f}" for k, us in got[way].items()) for way in ways
            )
            if "baseline" in got:
                for kind in KINDS:
                    if kind in got["this"] and kind in got["baseline"]:
                        ratios[kind].append(got["this"][kind] / got["baseline"][kind])
            print(f"round {round_ + 1} (load {load:.1f}): {line}  (us CPU per report)")
    for kind in KINDS:
        medians = {w: statistics.median(c[kind]) for w, c in costs.items() if c[kind]}
        said = ", ".join(f"{w} {us:.1f} us" for w, us in medians.items())
        if ratios[kind]:
            ratio = statistics.median(ratios[kind])
            said += f"; median of the rounds' ratios this/baseline {ratio:.2f} x"
        if medians:
            print(f"{kind}: median {said}")


def _callgrind(args: argparse.Namespace) -> None:
    """``--callgrind N``: instructions per report of each kind, this and the baseline
    alternating by round, against one redis-server."""
    ways = {"this": sys.executable}
    if args.baseline:
        ways["baseline"] = args.baseline
    print(
        f"instructions per report in Redis mode (callgrind, {args.callgrind} reports), "
        f"{args.concurrency} in flight, {args.members} members; "
        + ", ".join(f"{w}: {p}" for w, p in ways.items())
    )
    kinds = {way: _kinds_of(python) for way, python in ways.items()}
    got: dict[str, dict[str, list[float]]] = {way: {k: [] for k in KINDS} for way in ways}
    with tempfile.TemporaryDirectory() as workdir, _redis_server(Path(workdir), args, []) as url:
        zero = {
            (way, kind): _instructions(ways[way], url, f"{way}-{kind}-0", kind, 0, args)
            for way in ways
            for kind in kinds[way]
        }
        for round_ in range(args.rounds):
            load = os.getloadavg()[0]
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for way in order:
                for kind in kinds[way]:
                    team = f"{way}-{kind}-{round_ + 1}"
                    total = _instructions(ways[way], url, team, kind, args.callgrind, args)
                    got[way][kind].append((total - zero[way, kind]) / args.callgrind)
            line = "  ".join(
                f"{way} " + " ".join(f"{k} {c[-1]:,.0f}" for k, c in got[way].items() if c)
                for way in ways
            )
            print(f"round {round_ + 1} (load {load:.1f}): {line}")
    for kind in KINDS:
        medians = {w: statistics.median(c[kind]) for w, c in got.items() if c[kind]}
        said = ", ".join(f"{w} {n:,.0f}" for w, n in medians.items())
        if len(medians) == 2:
            said += f"; this/baseline {medians['this'] / medians['baseline']:.3f} x"
        if medians:
            print(f"{kind}: median {said} instructions per report")


def _kinds_of(python: str) -> list[str]:
    """The kinds the code of ``python`` knows (no ``agent`` before issue 32)."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import redis_reports as r; "
    code += "print(' '.join(k for k in r.KINDS if k in (r._reports() or {})))"
    here = str(Path(__file__).resolve().parent)
    out = subprocess.run([python, "-c", code, here], capture_output=True, text=True, cwd="/")
    return out.stdout.split()


if __name__ == "__main__":
    main()
