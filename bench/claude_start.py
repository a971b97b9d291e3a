"""What ``codex-presence claude`` adds to Claude Code's start (issue 34): plain ``claude`` vs
``codex-presence claude -- claude``, interleaved pairs.

Runs the real claude (``CODEX_PRESENCE_TEST_CLAUDE`` or the one ``tests/run.sh`` installs)
in tmux against the fake Messages API, each way in a fresh home, and times from just before
tmux starts the command to:

* **first paint**: the first screen with anything on it (claude's welcome box);
* **ready**: the prompt box's ``? for shortcuts`` (claude takes input).

The ways: plain ``claude`` (the baseline), ``claude --settings FILE`` with the runner's
hooks but no runner (what claude's own handling of our hooks costs: FILE and its poster
written by the runner's own code, pointing at a socket that listens and never answers),
a bare Python that spawns claude and waits for it (``os.posix_spawnp``, no import of ours:
the floor of any runner in Python, its interpreter's start), ``codex-presence claude``
from this checkout, and with ``--baseline DIR`` the same from
another checkout (``PYTHONPATH=DIR``: main's
code, say, for a before/after in one run). The runner reports to a real broker
(``bench/latency.py``'s), as a member does. Our Python runs with its bytecode cached, as an
installation has it (``bench/_python.py``). The order of the ways turns by one each round;
the figure is the median of the paired differences to plain claude, and of the runners to
the bare Python (and, with ``--baseline``, of this checkout's runner to the other's). Goal
(issue 34):
first paint and ready <= plain + 50 ms.

    .venv/bin/python bench/claude_start.py [--rounds 10] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import latency  # noqa: E402  (bench/latency.py: the broker)

from bench._claude_driver import Tmux, claude_binary, claude_env, prepare_home  # noqa: E402
from bench._fake_anthropic import FakeAnthropic  # noqa: E402
from bench._python import installed_like  # noqa: E402
from codex_presence.agent.claude.settings import with_our_hooks  # noqa: E402
from codex_presence.agent.hooks.listener import hook_url, listen_loopback, new_hook_path  # noqa: E402

PLAIN = "claude"
HOOKED = "claude --settings (our hooks, no runner)"
WRAPPED = "codex-presence claude"
BARE = "python spawning claude (no import of ours)"
BARE_SPAWN = "import os, sys; os.waitpid(os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ), 0)"
"""The floor of a runner in Python: its interpreter's start, a spawn, a wait."""
READY = re.compile(r"\? for shortcuts")
GOAL = 0.050


def timed_start(argv: list[str], root: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from the start to the first paint and to ready."""
    home, work = prepare_home(root)
    env = {**env, "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home)}
    tmux = Tmux(root / "tmux.sock")
    start = time.monotonic()
    tmux.start(argv, cwd=work, env=env)
    first: float | None = None
    try:
        while True:
            screen = tmux.screen()
            now = time.monotonic() - start
            if first is None and screen.strip():
                first = now
            if READY.search(screen):
                return first if first is not None else now, now
            if now > 60:
                raise TimeoutError(f"not ready after 60 s:\n{screen}")
            time.sleep(0.005)
    finally:
        tmux.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--baseline", help="another checkout, run with PYTHONPATH=DIR")
    args = parser.parse_args()
    claude = str(claude_binary())
    plain = [claude, "--permission-mode", "default"]  # the footer then says READY
    print(f"load before: {os.getloadavg()}")
    broker = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "latency.py"), "--serve-broker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None
        url = f"http://{latency.HOST}:{int(broker.stdout.readline())}"
        with tempfile.TemporaryDirectory(
            prefix="cps-", dir="/tmp", ignore_cleanup_errors=True
        ) as tmp_name:  # a runner killed with its pane may still write bytecode there
            tmp = Path(tmp_name)
            api = FakeAnthropic([])
            with api.serve(), listen_loopback() as listener:
                base = claude_env(tmp, api.base_url)
                ours = installed_like(base, tmp / "pycache")
                ours = {k: v for k, v in ours.items() if not k.startswith("CODEX_PRESENCE")}
                ours["CODEX_PRESENCE_TOKEN"] = latency.token_of("dave")
                wrapped = [
                    sys.executable, "-m", "codex_presence", "claude", "-q",
                    "--broker", url, "--name", "dave", "--", *plain,
                ]  # fmt: skip
                hooked = with_our_hooks(
                    plain, {}, hook_url(listener, new_hook_path()), private=tmp, env=base
                )[0]
                ways: dict[str, tuple[list[str], dict[str, str]]] = {
                    PLAIN: (plain, base),
                    HOOKED: (hooked, base),
                    BARE: ([sys.executable, "-c", BARE_SPAWN, *plain], ours),
                    WRAPPED: (wrapped, {**ours, "PYTHONPATH": str(ROOT)}),
                }
                if args.baseline:
                    ways[f"{WRAPPED} ({args.baseline})"] = (
                        wrapped,
                        {**ours, "PYTHONPATH": args.baseline},
                    )
                names = list(ways)
                got: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
                for n in range(args.rounds + 1):
                    for name in names[n % len(names) :] + names[: n % len(names)]:
                        argv, env = ways[name]
                        timed = timed_start(argv, tmp / f"{n}-{names.index(name)}", env)
                        if n:  # round 0 warms up (the bytecode cache, claude's own)
                            got[name].append(timed)
    finally:
        broker.terminate()
        broker.wait(10)
    print(f"load after: {os.getloadavg()}")
    print(f"claude {claude}: seconds to first paint / ready, median (min-max)")
    for name in names:
        f = [a for a, _ in got[name]]
        r = [b for _, b in got[name]]
        print(
            f"  {name:<50} first paint {statistics.median(f):.3f} ({min(f):.2f}-{max(f):.2f})"
            f"   ready {statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})   n={len(f)}"
        )
    print(f"  added to plain {PLAIN}, median of the paired differences, ms (pairs slower):")
    for name in names[1:]:
        print(f"    {name:<48} " + _paired(got[PLAIN], got[name]))
    print(f"  added to {BARE} (the floor), paired, ms (pairs slower):")
    for name in names[names.index(WRAPPED) :]:
        print(f"    {name:<48} " + _paired(got[BARE], got[name]))
    if args.baseline:  # the two checkouts' runners, each pair in the same round
        other = f"{WRAPPED} ({args.baseline})"
        print(f"  this checkout's runner against {args.baseline}'s, paired, ms (pairs slower):")
        print(f"    {WRAPPED:<48} " + _paired(got[other], got[WRAPPED]))


def _paired(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> str:
    """The median of the paired differences ``after`` - ``before``, first paint and ready."""
    parts = []
    for i, what in enumerate(("first paint", "ready")):
        diffs = [b[i] - a[i] for a, b in zip(before, after, strict=True)]
        slower = sum(d > 0 for d in diffs)
        parts.append(f"{what} {statistics.median(diffs) * 1000:+6.0f} ({slower}/{len(diffs)})")
    return "   ".join(parts)


if __name__ == "__main__":
    main()
