"""What ``codex-presence claude`` costs a print-mode run (``claude -p``), by way of hooks.

Runs ``codex-presence claude -q -- claude -p "run echo hi" --allowedTools "Bash(echo hi)"``
with the real claude (``CODEX_PRESENCE_TEST_CLAUDE`` or the one ``tests/run.sh`` installs)
against the fake Messages API (a tool call, then the answer), each run in a fresh home, no
broker, timed from the runner's start to its exit. Ways, taking turns run by run:

* ``spool``: this checkout (on Linux, command hooks writing into the private spool; the
  turn's end and SessionEnd waited for, the others async);
* ``loopback``: this checkout with ``CODEX_PRESENCE_HOOK_SPOOL=0`` (command hooks POSTing
  to the loopback server, the same ones waited for);
* ``baseline``: with ``--baseline DIR``, another checkout (``PYTHONPATH=DIR``: main's code,
  say, whose print mode had HTTP hooks).

    .venv/bin/python bench/claude_print.py [--runs 10] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._claude_driver import claude_binary, claude_env, prepare_home
from bench._fake_anthropic import FakeAnthropic, Reply, bash, say, text

ROOT = Path(__file__).resolve().parent.parent


def run(root: Path, base_url: str, pythonpath: Path, extra: dict[str, str]) -> float:
    """One print-mode run through the runner; seconds."""
    home, work = prepare_home(root)
    env = {
        k: v for k, v in claude_env(home, base_url).items() if not k.startswith("CODEX_PRESENCE_")
    }
    env.update(PYTHONPATH=str(pythonpath), **extra)
    claude = ("--", str(claude_binary()), "-p", "run echo hi", "--allowedTools", "Bash(echo hi)")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "codex_presence", "claude", "-q", *claude],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    took = time.monotonic() - start
    if done.returncode != 0 or "printed hi" not in done.stdout:
        raise RuntimeError(f"the run failed: {done.stdout!r} {done.stderr!r}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="per way")
    parser.add_argument("--baseline", type=Path, help="another checkout, run as a third way")
    args = parser.parse_args()
    ways: dict[str, tuple[Path, dict[str, str]]] = {
        "spool": (ROOT, {}),
        "loopback": (ROOT, {"CODEX_PRESENCE_HOOK_SPOOL": "0"}),
    }
    if args.baseline is not None:
        ways["baseline"] = (args.baseline.resolve(), {})
    replies: list[Reply] = []
    for _ in range(args.runs * len(ways)):
        tool = bash("echo hi", id="toolu_p1")
        replies += [Reply(blocks=[text("Running it."), tool]), say("It printed hi.")]
    times: dict[str, list[float]] = {way: [] for way in ways}
    api = FakeAnthropic(replies)
    with api.serve(), tempfile.TemporaryDirectory(prefix="bench-print-") as tmp:
        for i in range(args.runs):
            names = list(ways)
            for way in names[i % len(names) :] + names[: i % len(names)]:  # turns by one
                path, extra = ways[way]
                times[way].append(run(Path(tmp) / f"{way}{i}", api.base_url, path, extra))
    print(f"{args.runs} runs per way, load average {os.getloadavg()[0]:.1f} at the end")
    for way, took in times.items():
        runs = " ".join(f"{t:.2f}" for t in took)
        print(f"  {way:<9} median {statistics.median(took):6.3f} s   ({runs})")


if __name__ == "__main__":
    main()
