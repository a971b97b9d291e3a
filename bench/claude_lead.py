"""Claude Code with its session file leading vs with a hook per event (issue 27): how soon
the roster follows a person's keys, and what a session costs at claude's prompt.

Runs the real claude (``CODEX_PRESENCE_TEST_CLAUDE`` or the one ``tests/run.sh`` installs)
behind ``codex-presence claude`` in tmux, against the fake Messages API, reporting to
``bench/latency.py``'s broker, whose SSE stream this process reads (as ``bob``, stamping
each event with ``time.monotonic()``). The two ways, interleaved round by round on the same
machine: ``--claude-hooks auto`` (``dave``: claude 2.1.332 interactive, so only SessionStart
and SessionEnd are hooks and the session file, watched by inotify, leads) and
``--claude-hooks all`` (``erin``: a hook per event, async command hooks; the files polled
every 0.1 s while the member is not idle). Each round:

* **idle**: claude at its prompt, nothing typed, for ``--idle-seconds``: the runner's CPU
  and wake-ups per minute (every thread of the ``codex-presence`` process,
  ``/proc/<pid>/task/*/schedstat``; claude's own is not ours).
* **prompt -> working**: from just before tmux sends the Enter of a prompt to the roster's
  event saying working. claude's own reaction is in it, the same for both ways: the
  difference between the two is what the way costs.
* **Yes -> working**: the model asks for a Bash command (a permission dialog: blocked);
  from just before the Enter that approves it to the roster's working.
* **later prompt -> working**: a second prompt in the same session, once idle (claude
  writes a session's first prompt later than the next ones: the project's directory, the
  transcript and the history's first line are made then).
* **claude's write -> roster** (the file-led way): from claude's last write of its session
  file or its prompt history before the roster's working (their mtimes, on the monotonic
  clock) to that event: what reading the file, the mapping, the report and the broker add.
  (``bench/latency.py`` (c) has the hook -> roster counterpart.)

With ``--baseline DIR`` (another checkout: ``git archive REV codex_presence | tar -x -C
DIR``), a third way interleaved with the two: ``--claude-hooks auto`` run from DIR
(``PYTHONPATH=DIR``, as ``carol``): before and after a change, on the same machine.

tmux calls run in a thread, so the SSE reader is never held up.

    .venv/bin/python bench/claude_lead.py [--rounds 6] [--idle-seconds 10] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import latency  # noqa: E402  (bench/latency.py: the broker and the watch)

from bench._claude_driver import Tmux, claude_binary, claude_env, prepare_home  # noqa: E402
from bench._fake_anthropic import (  # noqa: E402
    FakeAnthropic,
    Reply,
    bash,
    conversation,
    last_user_texts,
    say,
    tool_results,
)
from bench._scripted import Body  # noqa: E402

WAYS = {"auto": "dave", "all": "erin"}
"""``--claude-hooks`` value -> the member it reports as."""
BASELINE = "auto (baseline)"
"""The way ``--baseline`` adds: ``--claude-hooks auto`` from the other checkout."""
DIALOG = r"Do you want to proceed\?"
READY = r"\? for shortcuts"


def prompt(n: int) -> str:
    return f"make thing {n} now"


def later_prompt(n: int) -> str:
    return f"say thing {n} again"


def replies(sessions: int) -> list[Reply]:
    """Per session: a Bash call (a permission dialog), then an answer; a later prompt's
    answer."""
    out: list[Reply] = []
    for n in range(sessions):
        tool = f"toolu_lead{n}"

        def answered(body: Body, tool: str = tool) -> bool:
            return tool in tool_results(body)

        out += [
            Reply(
                blocks=[bash(f"touch made{n}.txt", id=tool)],
                match=partial(asks_for, text=prompt(n)),
                wait=0.3,
            ),
            say(f"Made thing {n}.", match=answered),
            say(f"Said {n}.", match=partial(asks_for, text=later_prompt(n)), wait=0.5),
        ]
    return out


def asks_for(body: Body, text: str) -> bool:
    return conversation(body) and any(text in t for t in last_user_texts(body))


def runner_pid(pane: int) -> int:
    """The ``codex-presence`` process: the child of tmux's ``sh -c`` in the pane."""
    children = Path(f"/proc/{pane}/task/{pane}/children").read_text().split()
    return int(children[0])


def written_before(sessions: Path, shown: float) -> float | None:
    """ms from claude's last write before ``shown`` (monotonic) of its session file or its
    prompt history (their mtimes), or None if both were written again since (the roster's
    event is then another's)."""
    (status,) = sessions.glob("*.json")
    offset = time.time() - time.monotonic()
    written = [
        path.stat().st_mtime_ns / 1e9 - offset
        for path in (status, sessions.parent / "history.jsonl")
        if path.exists()
    ]
    before = [t for t in written if t <= shown]
    return (shown - max(before)) * 1000 if before else None


def run_time(pid: int) -> tuple[int, int]:
    """ns run and times scheduled in, over every thread of ``pid`` (schedstat)."""
    threads = latency.cpu_schedstat(pid).values()
    return sum(ns for ns, _ in threads), sum(wakes for _, wakes in threads)


async def screen_shows(tmux: Tmux, pattern: str, within: float = 30.0) -> None:
    regex = re.compile(pattern)
    deadline = time.monotonic() + within
    while not regex.search(await asyncio.to_thread(tmux.screen)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{pattern!r} not on screen:\n{tmux.screen()}")
        await asyncio.sleep(0.05)


async def one_round(
    way: str,
    n: int,
    url: str,
    base_url: str,
    tmp: Path,
    watch: latency.Watch,
    idle: float,
    baseline: str | None,
) -> tuple[float | None, ...]:
    """One session: idle CPU ms and wake-ups per minute, prompt -> working ms, Yes ->
    working ms."""
    member = "carol" if way == BASELINE else WAYS[way]
    root = tmp / f"{member}-{n}"
    home, work = prepare_home(root)
    env = {k: v for k, v in claude_env(home, base_url).items() if not k.startswith("CODEX_")}
    env["CODEX_PRESENCE_TOKEN"] = latency.token_of(member)
    if way == BASELINE and baseline is not None:
        env["PYTHONPATH"] = baseline
    tmux = Tmux(root / "tmux.sock")
    argv = [
        sys.executable, "-m", "codex_presence", "claude", "-q",
        "--claude-hooks", "auto" if way == BASELINE else way,
        "--broker", url, "--name", member, "--log-file", str(root / "presence.log"),
        "--", str(claude_binary()), "--permission-mode", "default",
    ]  # fmt: skip
    tmux.start(argv, cwd=work, env=env)
    try:
        await screen_shows(tmux, READY)
        await watch.until_connected(member, 1)
        sessions = Path(env["CLAUDE_CONFIG_DIR"]) / "sessions"
        pid = runner_pid(tmux.pane_pid() or 0)
        await asyncio.sleep(1.0)  # its start's work done
        (ns0, wakes0), t0 = run_time(pid), time.monotonic()
        await asyncio.sleep(idle)
        (ns1, wakes1), t1 = run_time(pid), time.monotonic()
        idle_ms = (ns1 - ns0) / 1e6 / (t1 - t0) * 60
        idle_wakes = (wakes1 - wakes0) / (t1 - t0) * 60
        await asyncio.to_thread(tmux.type, prompt(n))
        await asyncio.sleep(0.3)
        sent = time.monotonic()
        await asyncio.to_thread(tmux.keys, "Enter")
        shown = await watch.until(member, "working", 20)
        prompt_ms = (shown - sent) * 1000
        file_ms = [written_before(sessions, shown)]
        await screen_shows(tmux, DIALOG)
        await watch.until(member, "blocked", 20)
        await asyncio.sleep(1.0)  # a dialog ignores keys for a moment after it appears
        sent = time.monotonic()
        await asyncio.to_thread(tmux.keys, "Enter")
        shown = await watch.until(member, "working", 20)
        yes_ms = (shown - sent) * 1000
        file_ms.append(written_before(sessions, shown))
        await watch.until(member, None, 20)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(tmux.type, later_prompt(n))
        await asyncio.sleep(0.3)
        sent = time.monotonic()
        await asyncio.to_thread(tmux.keys, "Enter")
        try:
            shown = await watch.until(member, "working", 20)
        except TimeoutError:
            log = (root / "presence.log").read_text(errors="replace")[-2000:]
            raise TimeoutError(f"{member}'s later prompt: not working; its log:\n{log}") from None
        later_ms = (shown - sent) * 1000
        file_ms.append(written_before(sessions, shown))
        await watch.until(member, None, 20)
        await asyncio.to_thread(tmux.type, "/exit")
        await asyncio.sleep(0.3)
        await asyncio.to_thread(tmux.keys, "Enter")
        await watch.until_connected(member, 0, 20)
        return idle_ms, idle_wakes, prompt_ms, yes_ms, later_ms, *file_ms
    finally:
        await asyncio.to_thread(tmux.kill)


def line(label: str, values: list[float], unit: str) -> str:
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values
    return (
        f"  {label:<28} n={len(values):<3} median {statistics.median(values):7.1f} {unit}"
        f"   p90 {q[-1]:7.1f}   min {min(values):7.1f}   max {max(values):7.1f}"
    )


async def bench(url: str, args: argparse.Namespace, tmp: Path) -> None:
    ways = [*args.ways.split(","), *([BASELINE] if args.baseline else [])]
    api = FakeAnthropic(replies(args.rounds * len(ways)))
    results: dict[str, list[tuple[float | None, ...]]] = {way: [] for way in ways}
    watch = latency.Watch()
    with api.serve():
        bob = {"authorization": f"Bearer {latency.token_of('bob')}"}
        async with httpx.AsyncClient(base_url=url, headers=bob, trust_env=False) as client:
            reader = asyncio.create_task(watch.run(client))
            await watch.until_connected("bob", 1)
            try:
                sessions = 0
                for n in range(args.rounds):
                    for way in ways if n % 2 == 0 else reversed(ways):
                        results[way].append(
                            await one_round(
                                way,
                                sessions,
                                url,
                                api.base_url,
                                tmp,
                                watch,
                                args.idle_seconds,
                                args.baseline,
                            )
                        )
                        sessions += 1
            finally:
                reader.cancel()
    print(f"claude {claude_binary()}; load {os.getloadavg()[0]:.2f} at the end")
    for way, rows in results.items():
        print(f"--claude-hooks {way}:")
        print(line("idle at the prompt: CPU", [r[0] for r in rows], "ms/min"))
        print(line("idle at the prompt: wake-ups", [r[1] for r in rows], "/min"))
        print(line("prompt -> roster working", [r[2] for r in rows], "ms"))
        print(line("Yes -> roster working", [r[3] for r in rows], "ms"))
        print(line("later prompt -> working", [r[4] for r in rows], "ms"))
        if way != "all":
            file_ms = [ms for r in rows for ms in r[5:] if ms is not None]
            print(line("claude's write -> roster", file_ms, "ms"))
    if BASELINE in results and "auto" in results:
        print("auto minus auto (baseline), the same round's pairs: median (pairs faster)")
        for label, column in (("prompt", 2), ("Yes", 3), ("later prompt", 4)):
            diffs = [
                (new[column] or 0.0) - (old[column] or 0.0)
                for new, old in zip(results["auto"], results[BASELINE], strict=True)
            ]
            faster = sum(d < 0 for d in diffs)
            print(f"  {label:<14} {statistics.median(diffs):+7.1f} ms ({faster}/{len(diffs)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--baseline", help="another checkout, run with PYTHONPATH=DIR")
    parser.add_argument("--ways", default="auto,all", help="of auto,all (default: both)")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}")
    broker = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "latency.py"), "--serve-broker"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stdout is not None
        port = int(broker.stdout.readline())
        with tempfile.TemporaryDirectory(prefix="cpl-", dir="/tmp") as tmp:
            asyncio.run(bench(f"http://{latency.HOST}:{port}", args, Path(tmp)))
    finally:
        broker.terminate()
        broker.wait(10)


if __name__ == "__main__":
    main()
