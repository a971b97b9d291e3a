"""What the codex TUI waits for at its start: its threads' time runnable without a CPU, plain
``codex`` against ``codex-presence codex`` (issue 27).

    python bench/tui_wait.py [--codex BIN] [--rounds 12] [--baseline PYTHON]

Each round starts the TUI once each way (plain ``codex`` with its managed daemon, as
``bench/tui.py`` does; the command; with ``--baseline``, the command of another checkout's
virtualenv), in an order that turns by one each round, in tmux, against the fake model.
When the screen shows the header (the first paint) it reads, from ``/proc/PID/task/*/
schedstat``, each live thread's CPU time and its time waiting on a run queue, summed per
role: the TUI (npm's launcher and the native binary), the app-server, ours (Python: the
command and its watchdogs). Threads that ended before the first paint are not counted.
Then the time to ready. It prints the medians of each way. Waiting is CPU contention: the
TUI does the same work either way, so what it waits for more through the command is what
runs beside its start. Round 0 warms every home up and is not counted.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import statistics
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

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

from codex_presence.agent.watchdog import descendants  # noqa: E402


def _role(pid: int) -> str | None:
    exe = Path(f"/proc/{pid}/exe").readlink().name
    if exe.startswith("python"):
        return "ours"
    if b"app-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
        return "app-server"
    return "tui" if exe in ("node", "codex") else None


def scheduled(root: int) -> collections.Counter[str]:
    """CPU and run-queue wait (ms) of every live thread under ``root``, per role."""
    got: collections.Counter[str] = collections.Counter()
    for pid in [root, *descendants(root)]:
        with suppress(OSError, ValueError):
            role = _role(pid)
            if role is None:
                continue
            for task in Path(f"/proc/{pid}/task").iterdir():
                with suppress(OSError, ValueError):
                    ran, waited, _ = map(int, (task / "schedstat").read_text().split())
                    got[f"{role} cpu"] += ran / 1e6
                    got[f"{role} wait"] += waited / 1e6
    return got


def _end_daemons(home: Path) -> None:
    marker = str(home).encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with suppress(OSError, ValueError):
            if marker in cmdline.read_bytes():
                os.kill(int(cmdline.parent.name), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codex", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--baseline", help="also PYTHON -m codex_presence codex (another checkout)")
    args = parser.parse_args()
    binary = args.codex or codex_binary(None)
    ways: dict[str, Callable[[], list[str]]] = {
        "plain codex": lambda: [str(binary)],
        "codex-presence codex": lambda: presence_command(binary, "-q"),
    }
    if args.baseline:
        ways[f"codex-presence codex ({args.baseline})"] = lambda: [
            args.baseline, "-m", "codex_presence", "codex", "-q", "--", str(binary),
        ]  # fmt: skip
    names = list(ways)
    got: dict[str, dict[str, list[float]]] = {n: collections.defaultdict(list) for n in names}
    model = FakeModel()
    with model.serve(), short_tempdir("cpw-") as tmp:
        homes = {}
        for i, name in enumerate(names):
            (tmp / str(i)).mkdir()
            homes[name] = tui_home(tmp / str(i), model.base_url, Config())
            homes[name].env = installed_like(homes[name].env, tmp / "pycache")
        try:
            for n in range(args.rounds + 1):
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    home = homes[name]
                    with short_tempdir("cpt-") as sock_dir:
                        tui = Tui(ways[name](), env=home.env, cwd=home.work, sock_dir=sock_dir)
                        try:
                            first = tui.wait_for(FIRST_PAINT, timeout=60)
                            seen = scheduled(tui.pane_pid())
                            ready = tui.wait_for(READY, timeout=60)
                        finally:
                            tui.close()
                    if n:
                        got[name]["first paint"].append(first * 1000)
                        got[name]["ready"].append(ready * 1000)
                        for key, ms in seen.items():
                            got[name][key].append(ms)
        finally:
            for home in homes.values():
                _end_daemons(home.home)
    load = os.getloadavg()
    print(f"codex {binary}, {args.rounds} rounds, load {load[0]:.2f} at the end; medians, ms")
    for name in names:
        row = ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(got[name].items()))
        print(f"  {name}: {row}")


if __name__ == "__main__":
    main()
