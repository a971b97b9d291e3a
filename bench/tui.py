"""What ``codex-presence codex`` costs the codex TUI, against the same session without it.

Three figures, each with its baseline measured in the same run, interleaved so that the
load of the machine falls on both alike:

(a) ``rtt``: the relay's added latency per round trip. ``codex-presence codex`` runs the
    real ``codex app-server`` and, as its "TUI", a client of ours (this script with
    ``--rtt-client``) that times a cheap request (``thread/loaded/list``) alternately
    straight to the app-server's socket (the baseline: what the TUI does without the
    command) and through the command's relay; the per-pair difference is what the relay
    adds, mapping and all. Goal: p99 <= 1 ms.
(b) ``startup``: seconds from starting the TUI (in tmux) to its first paint (the header)
    and to ready (the footer shows the model), for plain ``codex`` (the baseline: the
    warm-up round starts its managed daemon, and every later round connects to that
    running app-server), ``codex --no-daemon`` (its app-server in-process), ``codex
    --remote`` to an app-server started before the rounds (the TUI's remote mode alone), and
    ``codex-presence codex -- codex`` (TUI, app-server, relay); with ``--baseline
    PYTHON`` also ``PYTHON -m codex_presence codex`` (another checkout, e.g. before a
    change). Our Python runs with its bytecode cached, as an installation has it
    (``bench/_python.py``). The order of the ways turns by one each round; the figure is
    the median of the paired differences to plain ``codex``. Goal (issue 27): first
    paint and ready <= plain + 50 ms.
(c) ``roster``: a state-changing message written by the app-server -> the broker's SSE
    stream shows the member's new activity. Through the command (a stand-in app-server,
    ``bench/_fake_codex_tui.py``, stamps ``time.monotonic()`` into each message just
    before it writes it; a stand-in TUI stays connected), against ``wrap`` with the same
    messages over stdio and a direct POST (``bench/latency.py``'s steps and broker).

    .venv/bin/python bench/tui.py [--codex BIN] [--rounds 2000] [--startup-rounds 5]
                                  [--baseline PYTHON] [--transitions 200]
                                  [--part rtt|startup|roster ...]

Standard library and the project's own extras only (issue 22): the TUI driver, the fake
model and the stand-in codex are ``bench/_codex_tui.py``, ``bench/_fake_model.py`` and
``bench/_fake_codex_tui.py``, which the tests use too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import latency  # noqa: E402  (bench/latency.py: the broker, the watch, the steps)
from _codex_tui import (  # noqa: E402
    FIRST_PAINT,
    READY,
    Config,
    Tui,
    codex_binary,
    presence_command,
    short_tempdir,
    tui_home,
)
from _fake_model import FakeModel  # noqa: E402
from _python import installed_like  # noqa: E402

FAKE = ROOT / "bench" / "_fake_codex_tui.py"


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50": statistics.median(ordered), "p90": q[89], "p99": q[98], "n": len(ordered)}


def line(label: str, s: dict[str, float], unit: str = "ms", digits: int = 3) -> str:
    return (
        f"  {label:<44} n={int(s['n']):<5} p50 {s['p50']:.{digits}f} {unit}   "
        f"p90 {s['p90']:.{digits}f} {unit}   p99 {s['p99']:.{digits}f} {unit}"
    )


# -- (a) round trips ---------------------------------------------------------------------------


class BlockingClient:
    """A websocket client over a unix socket (wsproto, blocking I/O), as the TUI connects."""

    def __init__(self, path: Path) -> None:
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import AcceptConnection, Request

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(str(path))
        self.ws = WSConnection(ConnectionType.CLIENT)
        offer = [("x-codex-app-server-compression", "zstd-stream-v1")]
        self.sock.sendall(
            self.ws.send(Request(host="localhost", target="/rpc", extra_headers=offer))
        )
        accepted = False
        while not accepted:
            self.ws.receive_data(self.sock.recv(65536) or None)
            for event in self.ws.events():
                if not isinstance(event, AcceptConnection):
                    raise RuntimeError(f"handshake failed: {event}")
                accepted = True
        self._parts: list[str] = []

    def send(self, message: dict[str, Any]) -> None:
        from wsproto.events import Message

        self.sock.sendall(self.ws.send(Message(data=orjson.dumps(message).decode())))

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request; read until its response (notifications are passed over)."""
        from wsproto.events import TextMessage

        self.send(message)
        while True:
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    self._parts.append(event.data)
                    if event.message_finished:
                        got = orjson.loads("".join(self._parts))
                        self._parts.clear()
                        if got.get("id") == message["id"] and "method" not in got:
                            return got  # type: ignore[no-any-return]
            self.ws.receive_data(self.sock.recv(65536) or None)

    def close(self) -> None:
        from wsproto.events import CloseConnection

        with suppress(OSError):
            self.sock.sendall(self.ws.send(CloseConnection(code=1005)))
        self.sock.close()


def rtt_client(outer: Path, rounds: int, warmup: int, out: Path) -> None:
    """Run as the command's "TUI": time round trips straight to the app-server's socket
    (next to ours in the session's directory) and through the relay, interleaved."""
    inner = outer.parent / "app-server.sock"
    # Through the relay first: its handshake completes once the app-server listens, which
    # starts with us.
    clients = {"relay": BlockingClient(outer), "direct": BlockingClient(inner)}
    init = {
        "method": "initialize",
        "id": 0,
        "params": {
            "clientInfo": {"name": "bench", "title": None, "version": "0"},
            "capabilities": {"experimentalApi": True},
        },
    }
    for client in clients.values():
        client.request(init)
        client.send({"method": "initialized"})
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for n in range(1, warmup + rounds + 1):
        order = list(clients.items()) if n % 2 else list(reversed(clients.items()))
        for name, client in order:
            started = time.perf_counter_ns()
            client.request({"method": "thread/loaded/list", "id": n, "params": {}})
            if n > warmup:
                samples[name].append((time.perf_counter_ns() - started) / 1e6)
    for client in clients.values():
        client.close()
    added = [r - d for r, d in zip(samples["relay"], samples["direct"], strict=True)]
    out.write_bytes(orjson.dumps({**samples, "added": added}))


def bench_rtt(binary: Path, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="cpb-", dir="/tmp") as tmp:
        root = Path(tmp)
        result = root / "rtt.json"
        codex = root / "codex"
        codex.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = app-server ]; then exec {binary} "$@"; fi\n'
            f'exec {sys.executable} {__file__} --rtt-client "$2" --rounds {rounds} '
            f"--result {result}\n"
        )
        codex.chmod(0o755)
        env = _clean_env(root)
        subprocess.run(
            [sys.executable, "-m", "codex_presence", "codex", "-q", "--", str(codex)],
            env=env,
            cwd=root,
            check=True,
            stdin=subprocess.DEVNULL,
            timeout=600,
        )
        got = orjson.loads(result.read_bytes())
    print(f"(a) round trip of thread/loaded/list, codex {_version(binary)}, ms")
    print(line("baseline: straight to the app-server", stats(got["direct"])))
    print(line("through codex-presence codex's relay", stats(got["relay"])))
    added = stats(got["added"])
    print(line("added by the relay (per pair)", added))
    print(f"  goal p99 <= 1 ms: {'met' if added['p99'] <= 1 else 'MISSED'}")


def _clean_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "OPENAI_"))}
    home = root / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text("check_for_update_on_startup = false\n")
    dead = "http://127.0.0.1:9"
    env.update(HOME=str(home), CODEX_HOME=str(home), HTTPS_PROXY=dead, HTTP_PROXY=dead)
    env.update(ALL_PROXY=dead, NO_PROXY="127.0.0.1,localhost", RUST_LOG="warn")
    return env


def _version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


# -- (b) time to the first screen ------------------------------------------------------------


def _kill_processes_of(home: Path) -> None:
    """End the managed daemon plain ``codex`` leaves behind: every process whose command
    line names this private home (and only those)."""
    marker = str(home).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with suppress(OSError, ValueError):
            if marker in cmdline.read_bytes():
                os.kill(int(cmdline.parent.name), signal.SIGKILL)


PLAIN = "plain codex (managed daemon; baseline)"
REMOTE = "codex --remote (app-server running)"
"""The TUI's own way through a socket, to an app-server started before the rounds (in a
session of its own, as plain codex's daemon): what the TUI's remote mode costs, apart from
the command's."""
WRAPPED = "codex-presence codex -- codex"
GOAL = 0.050
"""Seconds the command may add to the first paint and to ready (issue 27)."""


def _serve_app_server(binary: Path, path: Path, home: Any) -> subprocess.Popen[bytes]:
    """``codex app-server --listen unix://PATH`` in ``home``, once it accepts."""
    server = subprocess.Popen(
        [str(binary), "app-server", "--listen", f"unix://{path}"],
        env=home.env, cwd=home.work, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
                return server
            except OSError:
                time.sleep(0.01)
    os.killpg(server.pid, signal.SIGKILL)
    raise RuntimeError(f"{binary} app-server never listened on {path}")


def bench_startup(binary: Path, rounds: int, baseline: str | None) -> None:
    """Each round runs every way once, in an order that turns by one each round (so the
    machine's load falls on all alike); round 0 warms every home up (plain ``codex``
    installs and starts its managed daemon then: later rounds connect to it)."""
    ways = {
        PLAIN: lambda: [str(binary)],
        "codex --no-daemon": lambda: [str(binary), "--no-daemon"],
        REMOTE: lambda: [str(binary), "--remote", f"unix://{served}"],
        WRAPPED: lambda: presence_command(binary, "-q"),
    }
    if baseline is not None:
        ways[f"{WRAPPED} ({baseline})"] = lambda: [
            baseline, "-m", "codex_presence", "codex", "-q", "--", str(binary),
        ]  # fmt: skip
    names = list(ways)
    firsts: dict[str, list[float]] = {name: [] for name in ways}
    readies: dict[str, list[float]] = {name: [] for name in ways}
    model = FakeModel()
    with model.serve(), short_tempdir("cpb-") as tmp:
        homes = {}
        for i, name in enumerate(ways):
            (tmp / str(i)).mkdir()
            homes[name] = tui_home(tmp / str(i), model.base_url, Config())
            # Our Python commands with their bytecode cached, as an installation has it.
            homes[name].env = installed_like(homes[name].env, tmp / "pycache")
        served = tmp / str(names.index(REMOTE)) / "app-server.sock"
        app_server = _serve_app_server(binary, served, homes[REMOTE])
        try:
            for n in range(rounds + 1):
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    home = homes[name]
                    with short_tempdir("cpt-") as sock_dir:
                        tui = Tui(ways[name](), env=home.env, cwd=home.work, sock_dir=sock_dir)
                        try:
                            first = tui.wait_for(FIRST_PAINT, timeout=60)
                            ready = tui.wait_for(READY, timeout=60)
                        finally:
                            tui.close()
                    if n:  # round 0 warms every home up
                        firsts[name].append(first)
                        readies[name].append(ready)
        finally:
            os.killpg(app_server.pid, signal.SIGKILL)
            app_server.wait()
            for home in homes.values():
                _kill_processes_of(home.home)
    print(f"(b) time to the TUI's screen, codex {_version(binary)}, s (p50, min-max)")
    for name in ways:
        f, r = firsts[name], readies[name]
        print(
            f"  {name:<40} first paint {statistics.median(f):.3f} ({min(f):.2f}-{max(f):.2f})"
            f"   ready {statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})   n={len(f)}"
        )
    print(f"  added to {PLAIN.split(' (')[0]}, median of the paired differences, ms:")
    for name in names[1:]:  # the TUI's own remote mode: REMOTE; the command's: WRAPPED - REMOTE
        added = [
            statistics.median(b - a for a, b in zip(got[PLAIN], got[name], strict=True)) * 1000
            for got in (firsts, readies)
        ]
        verdict = "" if not name.startswith(WRAPPED) else (
            "   goal <= 50 ms: " + ("met" if max(added) <= GOAL * 1000 else "MISSED")
        )  # fmt: skip
        print(f"    {name:<38} first paint {added[0]:+6.0f}   ready {added[1]:+6.0f}{verdict}")
    ours = [
        statistics.median(b - a for a, b in zip(got[REMOTE], got[WRAPPED], strict=True)) * 1000
        for got in (firsts, readies)
    ]
    print(
        f"  the command against the TUI's remote mode alone ({REMOTE}), paired, ms:"
        f" first paint {ours[0]:+.0f}   ready {ours[1]:+.0f}"
    )


# -- (c) event -> roster -------------------------------------------------------------------------


async def tui_step(control: Any, watch: latency.Watch, do: str, turn: int) -> float:
    """The stand-in app-server writes a state change to the TUI's connection (a new turn
    id each time: an ended turn cannot start again)."""
    reader, writer = control
    started = {"threadId": "th", "turn": {"id": f"tu{turn}"}}
    message = {
        "work": {"method": "turn/started", "params": started},
        "block": _status(["waitingOnApproval"]),
        "unblock": _status([]),
        "idle": {
            "method": "thread/status/changed",
            "params": {"threadId": "th", "status": {"type": "idle"}},
        },
    }[do]
    writer.write(orjson.dumps(message) + b"\n")
    await writer.drain()
    written, clients = (await reader.readline()).split()
    assert int(clients) == 1, "the stand-in TUI is not connected"
    seen = await watch.until("dave", latency.EXPECTED[do])
    return (seen - float(written)) * 1000


def _status(flags: list[str]) -> dict[str, Any]:
    status = {"type": "active", "activeFlags": flags}
    return {"method": "thread/status/changed", "params": {"threadId": "th", "status": status}}


async def bench_roster_async(url: str, transitions: int, gap: float, tmp: Path) -> None:
    import httpx

    bob = {"authorization": f"Bearer {latency.token_of('bob')}"}
    async with httpx.AsyncClient(base_url=url, headers=bob, trust_env=False) as client:
        watch = latency.Watch()
        watcher = asyncio.create_task(watch.run(client))
        await watch.until_connected("bob", 1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
        (tmp / "child.py").write_text(latency.CHILD)
        wrap = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "codex_presence", "wrap", "-q", "--broker", url,
            "--name", "alice", "--", sys.executable, str(tmp / "child.py"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**env, "CODEX_PRESENCE_TOKEN": latency.token_of("alice")},
        )  # fmt: skip
        codex = tmp / "codex"
        codex.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
        codex.chmod(0o755)
        (tmp / "daemon").mkdir()
        control_path = tmp / "control.sock"
        tui = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "codex_presence", "codex", "-q", "--broker", url,
            "--name", "dave", "--", str(codex),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            env={
                **env,
                "CODEX_PRESENCE_TOKEN": latency.token_of("dave"),
                "FAKE_TUI": "wait",
                "FAKE_CODEX_DAEMON_DIR": str(tmp / "daemon"),
                "FAKE_CODEX_CONTROL": str(control_path),
            },
        )  # fmt: skip
        control = None
        try:
            await watch.until_connected("alice", 1)
            await watch.until_connected("dave", 1)
            for _ in range(400):  # until the stand-in app-server listens
                try:
                    control = await asyncio.open_unix_connection(str(control_path))
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            assert control is not None, "the stand-in app-server never listened"
            reader, writer = control
            for _ in range(400):  # until the stand-in TUI is connected
                writer.write(b'{"method":"bench/hello"}\n')
                await writer.drain()
                if (await reader.readline()).split()[1] == b"1":
                    break
                await asyncio.sleep(0.05)
            carol_auth = {"authorization": f"Bearer {latency.token_of('carol')}"}
            base: list[float] = []
            wrapped: list[float] = []
            through: list[float] = []
            async with httpx.AsyncClient(
                base_url=url, headers=carol_auth, trust_env=False
            ) as carol:
                await carol.get("/healthz")
                for i in range(transitions):
                    do = latency.CYCLE[i % len(latency.CYCLE)]
                    base.append(await latency.direct_step(carol, watch, do))
                    await asyncio.sleep(gap)
                    wrapped.append(await latency.wrap_step(wrap, watch, do))
                    await asyncio.sleep(gap)
                    through.append(await tui_step(control, watch, do, i))
                    await asyncio.sleep(gap)
            gap_ms = gap * 1000
            print(
                f"(c) app-server write -> activity shown by the broker (SSE), gap {gap_ms:.0f} ms"
            )
            print(line("baseline: direct POST", stats(base), digits=2))
            print(line("wrap (stdio)", stats(wrapped), digits=2))
            print(line("codex-presence codex (websocket relay)", stats(through), digits=2))
        finally:
            for process in (tui, wrap):
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
            assert wrap.stdin is not None
            wrap.stdin.close()
            await asyncio.wait_for(asyncio.gather(tui.wait(), wrap.wait()), 20)
            if control is not None:
                control[1].close()
            watcher.cancel()


def bench_roster(transitions: int, gap: float) -> None:
    broker = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "latency.py"), "--serve-broker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None
        port = int(broker.stdout.readline())
        with tempfile.TemporaryDirectory(prefix="cpb-", dir="/tmp") as tmp:
            url = f"http://{latency.HOST}:{port}"
            asyncio.run(bench_roster_async(url, transitions, gap, Path(tmp)))
    finally:
        broker.terminate()
        broker.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--codex", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--startup-rounds", type=int, default=5)
    parser.add_argument("--transitions", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.06)
    parser.add_argument("--part", action="append", choices=["rtt", "startup", "roster"])
    parser.add_argument(
        "--baseline",
        metavar="PYTHON",
        help="startup: also run PYTHON -m codex_presence codex (another checkout's virtualenv)",
    )
    parser.add_argument("--rtt-client", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rtt_client is not None:
        rtt_client(Path(args.rtt_client.removeprefix("unix://")), args.rounds, 50, args.result)
        return
    binary = args.codex or codex_binary()
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    parts = args.part or ["rtt", "startup", "roster"]
    if "rtt" in parts:
        bench_rtt(binary, args.rounds)
    if "startup" in parts:
        bench_startup(binary, args.startup_rounds, args.baseline)
    if "roster" in parts:
        bench_roster(args.transitions, args.gap)


if __name__ == "__main__":
    main()
