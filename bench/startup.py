"""What wrap adds to codex's first answer: spawn → the answer to ``initialize`` (issue 13).

    python bench/startup.py [--runs 15] [--codex PATH] [--baseline PYTHON]

A client spawns the command, writes ``initialize`` at once, and times the moment the
answer's line arrives. Two commands, in paired runs (the order alternates, so both see the
same machine):

* direct: ``codex app-server``;
* through wrap: ``codex-presence wrap -- codex app-server`` (the console script next to
  this interpreter, as a user runs it; no broker, no recording).

With ``--baseline PYTHON`` a third command runs in the same pairs: ``PYTHON -m
codex_presence wrap -- codex app-server`` (another checkout's virtualenv, e.g. the code
before this change). It prints the median and p90 of each, and the time wrap adds: the
median of the paired differences (and the difference of the medians).

codex is the binary ``tests/run.sh`` installs (``~/.cache/codex-presence/codex-VERSION/``,
the newest version; its npm launcher, which is what users run, unless ``--native``) with a
throw-away ``CODEX_HOME`` whose model provider is a closed loopback port: nothing leaves the
machine (its plugin check goes to the same port, through the proxy variables), and
``initialize`` needs no model. Python's bytecode is cached, as in an installation, in a
cache of the run's own. Goal: added median ≤ 30 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _python import installed_like

CACHE = Path(
    os.environ.get("CODEX_PRESENCE_TEST_CODEX_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "codex-presence"
)
INITIALIZE = (
    b'{"method":"initialize","id":1,"params":{"clientInfo":{"name":"bench","title":null,'
    b'"version":"0.0.1"},"capabilities":{"experimentalApi":true}}}\n'
)
CLOSED = "http://127.0.0.1:9"
CONFIG = """\
model = "mock-model"
model_provider = "closed"
check_for_update_on_startup = false

[model_providers.closed]
name = "a closed loopback port"
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


def newest_codex(native: bool) -> Path:
    versions = sorted(
        (
            tuple(int(n) for n in m.group(1).split(".")),
            path,
        )
        for path in CACHE.glob("codex-*")
        if (m := re.fullmatch(r"codex-(\d+\.\d+\.\d+)", path.name))
    )
    if not versions:
        sys.exit(f"no codex under {CACHE}: run tests/run.sh first (it installs them)")
    root = versions[-1][1] / "node_modules"
    if not native:
        return root / ".bin" / "codex"
    found = sorted(root.glob("@openai/codex-linux-*/vendor/*/bin/codex"))
    if not found:
        sys.exit(f"no native codex binary under {root}")
    return found[0]


def time_to_answer(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from spawn to the end of the line that answers ``initialize``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        fd = proc.stdout.fileno()
        seen = b""
        deadline = start + 30
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no answer from {argv}")
            data = os.read(fd, 1 << 16)
            if not data:
                raise RuntimeError(f"{argv} ended without answering: {seen[-300:]!r}")
            seen += data
            for line in seen.split(b"\n")[:-1]:
                if line.startswith(b'{"id":1,') or b'"id":1,"result"' in line:
                    return time.perf_counter() - start
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="paired runs (at least 10)")
    parser.add_argument("--codex", type=Path, help="the codex to run (default: see above)")
    parser.add_argument("--native", action="store_true", help="the native binary, not npm's")
    parser.add_argument(
        "--baseline", metavar="PYTHON", help="also time PYTHON -m codex_presence wrap"
    )
    args = parser.parse_args()
    if args.runs < 10:
        parser.error("--runs must be at least 10")
    codex = args.codex or newest_codex(args.native)
    script = Path(sys.executable).with_name("codex-presence")
    wrap = [str(script)] if script.exists() else [sys.executable, "-m", "codex_presence"]
    commands = {
        "direct": [str(codex), "app-server"],
        "through wrap": [*wrap, "wrap", "--quiet", "--", str(codex), "app-server"],
    }
    if args.baseline:
        commands["baseline wrap"] = [
            args.baseline,
            "-m",
            "codex_presence",
            "wrap",
            "--quiet",
            "--",
            str(codex),
            "app-server",
        ]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        home, work = root / "home", root / "work"
        home.mkdir()
        work.mkdir()
        (home / "config.toml").write_text(CONFIG)
        env = installed_like(os.environ, root / "pycache")
        env = {k: v for k, v in env.items() if not k.startswith(("CODEX_", "OPENAI_"))}
        env.update(
            HOME=str(home),
            CODEX_HOME=str(home),
            RUST_LOG="warn",
            # codex looks for plugin updates at start-up: a closed loopback port answers.
            HTTPS_PROXY=CLOSED,
            HTTP_PROXY=CLOSED,
            https_proxy=CLOSED,
            http_proxy=CLOSED,
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        print(f"codex: {codex}")
        print(f"machine: {os.cpu_count()} CPUs, load average {load()}")
        for argv in commands.values():  # warm the page cache; not counted
            time_to_answer(argv, env, work)
        times: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for run in range(args.runs):
            order = names if run % 2 == 0 else names[::-1]
            for name in order:
                times[name].append(time_to_answer(commands[name], env, work))
    direct = times["direct"]
    print(f"spawn → answer to initialize, {args.runs} paired runs (ms):")
    for name, values in times.items():
        ms = [v * 1e3 for v in values]
        print(
            f"  {name:14s} median {statistics.median(ms):7.1f}   p90 {pct(ms, 0.9):7.1f}"
            f"   (min {min(ms):.1f}, max {max(ms):.1f})"
        )
    for name, values in times.items():
        if name == "direct":
            continue
        paired = [(w - d) * 1e3 for w, d in zip(values, direct, strict=True)]
        medians = (statistics.median(values) - statistics.median(direct)) * 1e3
        print(
            f"added by {name.removeprefix('through '):13s} median {statistics.median(paired):6.1f}"
            f" ms   p90 {pct(paired, 0.9):6.1f} ms   (difference of medians {medians:.1f} ms)"
            + ("   goal: median <= 30 ms" if name == "through wrap" else "")
        )
    print(f"machine load average at the end: {load()}")


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
