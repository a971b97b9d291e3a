"""Figures for docs/codex-tui.md: the relay's added latency and the TUI's time to screen.

``python -m tests.support.tui_measure [--codex BIN] [--rounds N] [--startup-rounds N]`` prints one
JSON object. Everything runs in one process, in one run, interleaved, so that the load of
the machine (2 cores, shared) falls on the direct baseline and the relayed path alike:

* ``round_trip``: a cheap request (``thread/loaded/list``) to one real
  ``codex app-server --listen unix://…``, alternately straight to its socket and through
  :mod:`tests.support.ws_relay_probe`; per-pair differences give the added latency.
* ``startup``: seconds from starting the TUI (in tmux) to its first paint and to ready (the
  footer shows the model), per way of running it: ``direct`` (``--remote`` at the
  app-server's socket), ``relay`` (``--remote`` at the relay's), ``command`` (what
  ``codex-presence codex`` will do: app-server, then relay, then TUI, timed from the
  app-server's start), ``no_daemon`` (``codex --no-daemon``, in-process) and ``daemon``
  (plain ``codex``, which starts or reuses its managed daemon). One warm-up round first;
  each way keeps its own ``CODEX_HOME`` across rounds.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import orjson

from tests.support.codex_driver import codex_binary
from tests.support.fake_model import FakeModel
from tests.support.tui_driver import (
    FIRST_PAINT,
    NO_APPROVALS,
    READY,
    AppServer,
    Tui,
    TuiHome,
    codex_version,
    short_tempdir,
    tui_home,
)
from tests.support.ws_relay_probe import measure_round_trips, running_relay


def _stats(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50": round(statistics.median(values), 4),
        "min": round(values[0], 4),
        "max": round(values[-1], 4),
        "n": len(values),
    }


def _kill_processes_of(home: Path) -> None:
    """End the managed daemon plain ``codex`` left behind: every process whose command line
    names this private home (and only those)."""
    marker = str(home).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with suppress(OSError, ValueError):
            if marker in cmdline.read_bytes():
                os.kill(int(cmdline.parent.name), signal.SIGKILL)


def _time_tui(
    argv: list[str], home: TuiHome, sock_dir: Path, t0: float | None = None
) -> tuple[float, float]:
    tui = Tui(argv, env=home.env, cwd=home.work, sock_dir=sock_dir)
    start = t0 if t0 is not None else tui.started
    try:
        first = tui.wait_for(FIRST_PAINT, timeout=30) + tui.started - start
        ready = tui.wait_for(READY, timeout=30) + tui.started - start
    finally:
        tui.close()
    return first, ready


def measure(binary: Path, rounds: int, startup_rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {"codex": codex_version(binary)}
    model = FakeModel()
    with ExitStack() as stack:
        stack.enter_context(model.serve())
        tmp = stack.enter_context(short_tempdir())
        homes: dict[str, TuiHome] = {}
        for mode in ("direct", "relay", "command", "no_daemon", "daemon"):
            (tmp / mode).mkdir()
            homes[mode] = tui_home(tmp / mode, model.base_url, NO_APPROVALS)
        server = AppServer(binary, homes["direct"], tmp / "inner.sock", tmp / "app-server.log")
        stack.callback(server.close)
        server.wait_ready()
        stack.enter_context(running_relay(tmp / "outer.sock", server.socket))
        rt = measure_round_trips(server.socket, tmp / "outer.sock", rounds=rounds)
        result["round_trip_ms"] = {k: {n: round(v, 4) for n, v in s.items()} for k, s in rt.items()}

        relay_home = homes["relay"]
        relay_server = AppServer(binary, relay_home, tmp / "inner2.sock", tmp / "app-server2.log")
        stack.callback(relay_server.close)
        relay_server.wait_ready()
        stack.enter_context(running_relay(tmp / "outer2.sock", relay_server.socket))

        def command_once(sock_dir: Path) -> tuple[float, float]:
            home = homes["command"]
            t0 = time.monotonic()
            srv = AppServer(binary, home, sock_dir / "in.sock", sock_dir / "srv.log")
            try:
                srv.wait_ready()
                with running_relay(sock_dir / "out.sock", srv.socket):
                    return _time_tui(
                        [str(binary), "--remote", f"unix://{sock_dir / 'out.sock'}"],
                        home,
                        sock_dir,
                        t0,
                    )
            finally:
                srv.close()

        ways: dict[str, Callable[[Path], tuple[float, float]]] = {
            "direct": lambda d: _time_tui(
                [str(binary), "--remote", f"unix://{server.socket}"], homes["direct"], d
            ),
            "relay": lambda d: _time_tui(
                [str(binary), "--remote", f"unix://{tmp / 'outer2.sock'}"], relay_home, d
            ),
            "command": command_once,
            "no_daemon": lambda d: _time_tui([str(binary), "--no-daemon"], homes["no_daemon"], d),
            "daemon": lambda d: _time_tui([str(binary)], homes["daemon"], d),
        }
        stack.callback(_kill_processes_of, homes["daemon"].home)
        firsts: dict[str, list[float]] = {name: [] for name in ways}
        readies: dict[str, list[float]] = {name: [] for name in ways}
        for n in range(startup_rounds + 1):
            for name, way in ways.items():
                with short_tempdir("cpm-") as sock_dir:
                    first, ready = way(sock_dir)
                if n:  # round 0 warms every home up
                    firsts[name].append(first)
                    readies[name].append(ready)
        result["startup_s"] = {
            name: {"first_paint": _stats(firsts[name]), "ready": _stats(readies[name])}
            for name in ways
        }
        ready_at = AppServer(binary, homes["command"], tmp / "in3.sock", tmp / "srv3.log")
        try:
            result["app_server_socket_ready_s"] = round(ready_at.wait_ready(), 4)
        finally:
            ready_at.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codex", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--startup-rounds", type=int, default=5)
    args = parser.parse_args()
    result = measure(args.codex or codex_binary(), args.rounds, args.startup_rounds)
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
