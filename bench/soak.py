"""Soak: 50 members, each a real ``codex-presence wrap`` around the scripted app-server,
running turns, approvals, long turns and crashes for minutes against one broker.

Set-up: ``codex-presence team init`` makes a team of N members; ``codex-presence broker``
serves it (a subprocess, default TTL 30 s); every member is a ``codex-presence wrap -v
--broker URL --name mNN -- python bench/_fake_app_server.py`` subprocess, driven by one
thread of this script acting as its IDE (it starts turns, answers approvals after a think
time, restarts the wrap when a crash ended it). One more thread holds an SSE subscription
to the broker and records every activity change it shows, with its arrival time; the
daemons' transitions are read from each wrap's stderr log, timestamped on arrival with
the same clock. At the end the drivers freeze (no new turns; a member waiting on an
approval is left blocked), then every wrap is closed.

Printed figures, and what they mean exactly:

* **transitions sent**: state changes the daemons derived (``codex-presence: <state>
  (<cause>)`` log lines, all wraps); **POSTs accepted**: ``reported <state>`` debug lines
  (heartbeats counted apart).
* **transitions shown**: activity changes of any member seen on the SSE stream.
* **lost**: a daemon state held for longer than ``HOLD`` (1.0 s: the fan-out interval,
  0.05 s, plus a POST and plenty of margin on a loaded machine) that the roster never
  showed for that member between the moment it began and ``GRACE`` (1.0 s) after it
  ended. Shorter states may be superseded before they are sent, by design. Goal: 0.
* **stuck at freeze**: ``HEARTBEAT + SETTLE`` (10 + 2 s) after the freeze, a member whose
  ``GET /roster`` activity differs from its daemon's last logged state. **stuck after
  exit**: ``SETTLE`` s after every wrap was closed, a member the roster does not show idle
  and disconnected. Goal: 0 for both.
* **memory**: RSS (from /proc) of the broker, and of every wrap that lived through the
  whole run, once all members are connected (start) and at the freeze (end). Goal: flat.

    .venv/bin/python bench/soak.py [--minutes 3] [--members 50] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import queue
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from httpx_sse import connect_sse

ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(ROOT / "bench" / "_fake_app_server.py")]
CLI = [sys.executable, "-m", "codex_presence"]
HOLD = 1.0
GRACE = 1.0
HEARTBEAT = 10.0
SETTLE = 2.0
_TRANSITION = re.compile(r"codex-presence: (idle|working|blocked) \(")
_REPORTED = re.compile(r"codex-presence: reported (idle|working|blocked)( \(heartbeat\))?")


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    turns: int = 0
    approvals: int = 0
    crashes: int = 0
    long_turns: int = 0
    sessions: int = 0
    transitions: int = 0
    posts: int = 0
    heartbeats: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, **counts: int) -> None:
        with self.lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)


class Session:
    """One ``codex-presence wrap`` process with this thread as its client."""

    def __init__(self, name: str, url: str, token: str, stats: Stats, timeline: list[Any]):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
        env["CODEX_PRESENCE_TOKEN"] = token
        self.proc = subprocess.Popen(
            [*CLI, "wrap", "-v", "--broker", url, "--name", name, "--", *FAKE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
        )
        self.messages: queue.Queue[Any] = queue.Queue()
        self.stats = stats
        self.timeline = timeline  # (t, state) of this member's daemon, shared across sessions
        self.started = time.monotonic()
        self.rss_start: int | None = None
        self.log: list[str] = []
        self.rss: list[int] = []  # sampled every 30 s while it lives, and at the freeze
        self._threads = [
            threading.Thread(target=self._out, daemon=True),
            threading.Thread(target=self._err, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(orjson.JSONDecodeError):
                self.messages.put(orjson.loads(line))
        self.messages.put(None)  # EOF

    def _err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            now = time.monotonic()
            if m := _TRANSITION.search(line):
                self.timeline.append((now, m.group(1)))
                self.stats.add(transitions=1)
            elif m := _REPORTED.search(line):
                self.stats.add(posts=1, heartbeats=1 if m.group(2) else 0)
            elif "Traceback" in line or " ERROR " in line:
                with self.stats.lock:
                    self.stats.errors.append(line.strip())
            self.log.append(line)

    def send(self, message: Any) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(orjson.dumps(message) + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            return False
        return True

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float) -> Any:
        """The first matching message; None on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                return None
            if message is None:
                return None
            if predicate(message):
                return message
        return None

    def close(self, timeout: float = 20.0) -> int | None:
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        for thread in self._threads:
            thread.join(10)
        return code


def _method(name: str, request: bool = False) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, dict) and m.get("method") == name and ("id" in m) == request


class Member(threading.Thread):
    """An IDE user: idles, starts a turn, answers approvals, reopens after a crash."""

    def __init__(self, index: int, name: str, token: str, url: str, stats: Stats, end: float):
        super().__init__(daemon=True)
        self.name, self.token, self.url, self.stats, self.end = name, token, url, stats, end
        self.rng = random.Random(index)
        self.timeline: list[tuple[float, str]] = [(0.0, "idle")]
        self.session: Session | None = None
        self.first: Session | None = None
        self.sessions: list[Session] = []

    def open(self) -> Session:
        self.session = Session(self.name, self.url, self.token, self.stats, self.timeline)
        self.sessions.append(self.session)
        self.stats.add(sessions=1)
        if self.first is None:
            self.first = self.session
        return self.session

    def run(self) -> None:
        session = self.session or self.open()
        turn = 0
        while time.monotonic() < self.end:
            time.sleep(self.rng.uniform(0.5, 4.0))
            if time.monotonic() >= self.end:
                return
            turn += 1
            roll = self.rng.random()
            approval = roll < 0.35
            crash = 0.35 <= roll < 0.40
            long = 0.40 <= roll < 0.45  # outlives a heartbeat
            script = {
                "approval": approval,
                "deltas": 200 if long else self.rng.randint(5, 30),
                "delay_ms": 60 if long else self.rng.randint(10, 80),
                "crash": "before_end" if crash else None,
            }
            self.stats.add(
                turns=1, approvals=int(approval), crashes=int(crash), long_turns=int(long)
            )
            session.send(
                {"method": "turn/start", "id": turn, "params": {"threadId": "th", "script": script}}
            )
            if approval:
                request = session.wait_for(
                    _method("item/commandExecution/requestApproval", True), 30
                )
                if request is None:
                    self._note(f"{self.name}: no approval request for turn {turn}")
                    session = self._reopen(session)
                    continue
                think = self.rng.uniform(0.2, 3.0)
                if time.monotonic() + think >= self.end:
                    return  # frozen while blocked: the stuck check expects blocked
                time.sleep(think)
                session.send({"id": request["id"], "result": {"decision": "accept"}})
            done = session.wait_for(_method("turn/completed"), 60)
            if crash:
                code = session.close()
                if code != 3:
                    self._note(f"{self.name}: crashed wrap exited {code}, not 3")
                session = self.open()
            elif done is None:
                self._note(f"{self.name}: turn {turn} did not complete")
                session = self._reopen(session)

    def _reopen(self, session: Session) -> Session:
        session.close()
        return self.open()

    def _note(self, what: str) -> None:
        with self.stats.lock:
            self.stats.errors.append(what)


class Observer(threading.Thread):
    """An SSE subscriber: every activity change the roster shows, timestamped."""

    def __init__(self, url: str, name: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.name, self.token = url, name, token
        self.shown: dict[str, list[tuple[float, str]]] = {}
        self.changes = 0
        self.ready = threading.Event()

    def _note(self, presence: dict[str, Any]) -> None:
        activity = presence.get("activity", "idle")
        history = self.shown.setdefault(presence["name"], [(0.0, "idle")])
        if history[-1][1] != activity:
            history.append((time.monotonic(), activity))
            self.changes += 1

    def run(self) -> None:
        with contextlib.suppress(httpx.HTTPError):  # the broker going away ends us
            self._subscribe()

    def _subscribe(self) -> None:
        headers = {"authorization": f"Bearer {self.token}"}
        url = f"{self.url}/subscribe?name={self.name}"
        with (
            httpx.Client(timeout=httpx.Timeout(10.0, read=None)) as client,
            connect_sse(client, "GET", url, headers=headers) as source,
        ):
            for event in source.iter_sse():
                if event.event == "roster":
                    for presence in orjson.loads(event.data)["members"]:
                        self._note(presence)
                    self.ready.set()
                elif event.event == "presence":
                    self._note(orjson.loads(event.data))


def lost_states(
    timeline: list[tuple[float, str]], shown: list[tuple[float, str]]
) -> tuple[int, int]:
    """(lost, considered): daemon states held > HOLD that the roster never showed."""
    lost = considered = 0
    for (start, state), (stop, _) in itertools.pairwise(timeline):
        if stop - start <= HOLD or start == 0.0:
            continue
        considered += 1
        window = [s for t, s in shown if start <= t <= stop + GRACE]
        before = [s for t, s in shown if t < start]
        already = before[-1] if before else "idle"
        if state not in window and already != state:
            lost += 1
    return lost, considered


def _sample_wraps(members: list[Member]) -> None:
    for member in members:
        session = member.session
        if session is not None and session.proc.poll() is None:
            rss = rss_kb(session.proc.pid)
            if rss is not None:
                session.rss.append(rss)


def roster(url: str, token: str) -> dict[str, dict[str, Any]]:
    response = httpx.get(url + "/roster", headers={"authorization": f"Bearer {token}"}, timeout=10)
    return {p["name"]: p for p in response.json()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--members", type=int, default=50)
    args = parser.parse_args()
    if not 0 < args.minutes <= 60 or not 1 <= args.members <= 200:
        parser.error("--minutes in (0, 60], --members in [1, 200]")
    stats = Stats()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        team = Path(tmp) / "team.toml"
        names = [f"m{n:02d}" for n in range(args.members)]
        made = subprocess.run(
            [*CLI, "team", "init", str(team), "--team", "soak", *[f"-m{n}" for n in names]],
            capture_output=True,
            text=True,
            check=True,
        )
        tokens = dict(line.split("\t") for line in made.stdout.splitlines())
        broker = subprocess.Popen(
            [*CLI, "broker", "--team", str(team), "--port", "0"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert broker.stderr is not None
            said = broker.stderr.readline()
            url = re.search(r"http://127\.0\.0\.1:\d+", said)
            assert url, said
            run(args, url.group(0), broker, names, tokens, stats)
        finally:
            broker.kill()
            broker.wait(10)


def run(
    args: argparse.Namespace,
    url: str,
    broker: subprocess.Popen[str],
    names: list[str],
    tokens: dict[str, str],
    stats: Stats,
) -> None:
    print(f"soak: {args.members} members, {args.minutes:g} min, broker {url} (pid {broker.pid})")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    observer = Observer(url, names[0], tokens[names[0]])
    observer.start()
    observer.ready.wait(20)
    t0 = time.monotonic()
    end = t0 + 3600  # replaced once everyone is connected
    members = [Member(k, n, tokens[n], url, stats, end) for k, n in enumerate(names)]
    for member in members:
        member.open()
        time.sleep(0.05)  # stagger the start-up of 2 x N Python processes
    deadline = time.monotonic() + 120
    while sum(p["connected"] > 0 for p in roster(url, tokens[names[0]]).values()) < len(names):
        if time.monotonic() > deadline:
            sys.exit("not every member connected within 120 s")
        time.sleep(0.5)
    print(f"all {len(names)} members connected in {time.monotonic() - t0:.1f} s")
    broker_start = rss_kb(broker.pid)
    for member in members:
        assert member.session is not None
        member.session.rss_start = rss_kb(member.session.proc.pid)
    start = time.monotonic()
    end = start + args.minutes * 60
    for member in members:
        member.end = end
        member.start()
    samples: list[int | None] = []
    while time.monotonic() < end:
        time.sleep(min(30.0, max(0.0, end - time.monotonic())))
        samples.append(rss_kb(broker.pid))
        _sample_wraps(members)
        print(
            f"  {time.monotonic() - start:5.0f} s: turns {stats.turns}, transitions "
            f"{stats.transitions}, shown {observer.changes}, broker RSS {samples[-1]} kB",
            flush=True,
        )
    for member in members:
        member.join(90)
    frozen = time.monotonic()
    broker_end = rss_kb(broker.pid)
    _sample_wraps(members)
    growth = []
    for member in members:
        session = member.first
        if session is member.session and session is not None and session.rss_start:
            end_rss = rss_kb(session.proc.pid)
            if end_rss is not None:
                growth.append((session.rss_start, end_rss))
    time.sleep(HEARTBEAT + SETTLE)
    seen = roster(url, tokens[names[0]])
    stuck = [
        (m.name, m.timeline[-1][1], seen[m.name].get("activity", "idle"))
        for m in members
        if seen[m.name].get("activity", "idle") != m.timeline[-1][1]
    ]
    blocked_at_freeze = sum(m.timeline[-1][1] == "blocked" for m in members)
    for member in members:
        if member.session is not None:
            member.session.close()
    time.sleep(SETTLE)
    seen = roster(url, tokens[names[0]])
    stuck_exit = [
        n
        for n in names
        if "activity" in seen[n] or seen[n]["connected"] != (1 if n == names[0] else 0)
    ]
    lost = considered = 0
    lost_detail = []
    for member in members:
        shown = observer.shown.get(member.name, [(0.0, "idle")])
        timeline = [(t, s) for t, s in member.timeline if t <= frozen]
        n_lost, n = lost_states([*timeline, (frozen, "end")], shown)
        lost += n_lost
        considered += n
        if n_lost:
            lost_detail.append(member.name)

    minutes = (frozen - start) / 60
    print()
    print(
        f"ran {minutes:.1f} min: {stats.turns} turns ({stats.approvals} with an approval, "
        f"{stats.long_turns} long, {stats.crashes} crashes), {stats.sessions} wrap sessions"
    )
    print(f"transitions sent (derived by the daemons): {stats.transitions}")
    print(f"activity POSTs accepted: {stats.posts} ({stats.heartbeats} heartbeats)")
    print(f"transitions the roster showed (SSE):      {observer.changes}")
    print(f"lost states: {lost} of {considered} held > {HOLD:g} s  {lost_detail or ''}")
    print(
        f"stuck at freeze (+{HEARTBEAT + SETTLE:g} s): {len(stuck)} of {len(members)} "
        f"({blocked_at_freeze} left blocked)  {stuck or ''}"
    )
    print(f"stuck after exit (+{SETTLE:g} s): {len(stuck_exit)}  {stuck_exit or ''}")
    if broker_start and broker_end:
        print(
            f"broker RSS: start {broker_start / 1024:.1f} MB, end {broker_end / 1024:.1f} MB "
            f"({(broker_end - broker_start) / 1024:+.1f} MB); every 30 s: "
            + " ".join(f"{(s or 0) / 1024:.1f}" for s in samples)
        )
    if growth:
        deltas = [(b - a) / 1024 for a, b in growth]
        print(
            f"wrap RSS ({len(growth)} daemons alive the whole run): start median "
            f"{statistics.median(a for a, _ in growth) / 1024:.1f} MB, end median "
            f"{statistics.median(b for _, b in growth) / 1024:.1f} MB, growth median "
            f"{statistics.median(deltas):+.2f} MB, max {max(deltas):+.2f} MB"
        )
    sessions = [s for m in members for s in m.sessions if len(s.rss) >= 3]
    if sessions:
        later = [(s.rss[-1] - s.rss[1]) / 1024 for s in sessions]
        print(
            f"wrap RSS over each session's life ({len(sessions)} sessions seen at >= 3 samples, "
            f"30 s apart): growth after its first 30-s sample median "
            f"{statistics.median(later):+.2f} MB, max {max(later):+.2f} MB"
        )
    if stats.errors:
        print(f"driver notes / errors ({len(stats.errors)}):")
        for line in stats.errors[:20]:
            print("  " + line)
        for session in (s for m in members for s in m.sessions):
            if any("Traceback" in line for line in session.log):
                print("the first wrap log with a traceback:")
                print("".join(session.log[-80:]))
                break


if __name__ == "__main__":
    main()
