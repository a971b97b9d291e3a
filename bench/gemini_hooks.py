"""What Gemini CLI's hooks cost a person: the time they add to a turn, and what its spinner
shows while one runs (issue 31).

Gemini CLI 0.61.0 runs every matching command hook synchronously: the turn waits for it.
This runs the real gemini (``CODEX_PRESENCE_TEST_GEMINI`` or the one ``tests/run.sh``
installs) in tmux against the fake Gemini API, a plain text turn at a time, and times each
turn from its Enter to the answer on screen (the person's wait), and to the screen with no
spinner left (gemini keeps a hook's name there for at least 3 s from its start: its
``WARNING_PROMPT_DURATION_MS``), read with capture-pane every ~10 ms. Kinds, interleaved
session by session:

* ``none``: no hook at all (the baseline).
* ``trivial``: ``cat >/dev/null; echo {}`` on every event: the least a command hook costs.
* ``curl``: every event POSTed to a loopback server with curl (the test driver's hook).
* ``curl-runner``: the same on the events a runner needs only (SessionStart, BeforeAgent,
  BeforeTool, AfterTool, Notification, AfterAgent, SessionEnd).
* ``curl-quiet``: ``curl-runner`` with ``hooksConfig.notifications: false``.

Then each hook's duration as gemini itself tells it (``gemini -p --debug`` prints "Hook
execution for EVENT: 1 hooks executed successfully, total duration: N ms"), over 3 runs of
``-p`` per kind (``true``, ``trivial``, ``curl``, interleaved); one hook command alone,
outside gemini, as gemini runs it (``bash -c COMMAND``, a 1.5 kB event on stdin, the output
read); and one turn with a BeforeAgent hook that sleeps 2 s, its screen read all through:
the spinner's words while a hook runs.

    .venv/bin/python bench/gemini_hooks.py [--sessions 3] [--turns 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench._claude_driver import Capture, HookAnswer, HookCapture
from bench._fake_gemini import FakeGemini, say
from bench._gemini_driver import (
    HOOK_EVENTS,
    GeminiSession,
    capture_command,
    interactive,
    run_print,
)

RUNNER_EVENTS = (
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "Notification",
    "AfterAgent",
    "SessionEnd",
)
TRIVIAL = "cat >/dev/null; echo {}"
KINDS = ("none", "trivial", "curl", "curl-runner", "curl-quiet")
SPINNING = re.compile(r"esc to cancel|Executing Hook")


def _turn(s: GeminiSession, n: int) -> tuple[float, float]:
    """One prompt; seconds from its Enter to its answer on screen, and to no spinner."""
    text = f"turn number {n}"
    s.tmux.type(text)
    s.tmux.wait_screen(re.escape(text))
    time.sleep(0.5)  # an Enter sooner is taken as part of a paste (gemini_driver)
    started = time.monotonic()
    s.tmux.keys("Enter")
    deadline = started + 60
    answered = None
    while time.monotonic() < deadline:
        screen = s.tmux.screen()
        if answered is None and f"answer {n}." in screen:
            answered = time.monotonic() - started
        if answered is not None and not SPINNING.search(screen):
            return answered, time.monotonic() - started
        time.sleep(0.01)
    raise TimeoutError(f"turn {n} did not end:\n{s.tmux.screen()}")


def _session(
    root: Path, kind: str, turns: int, first: int
) -> tuple[list[tuple[float, float]], int]:
    """``turns`` timed turns in one gemini of ``kind``; their times and the hooks run."""
    api = FakeGemini(
        [say(f"answer {first + n}.", match=f"turn number {first + n}") for n in range(turns)]
    )
    hooks: bool | str = False if kind == "none" else TRIVIAL if kind == "trivial" else True
    events = RUNNER_EVENTS if kind.startswith("curl-") else HOOK_EVENTS
    settings = {"hooksConfig": {"notifications": False}} if kind == "curl-quiet" else None
    with (
        api.serve(),
        interactive(
            root, base_url=api.base_url, hooks=hooks, events=events, settings=settings
        ) as s,
    ):
        s.ready()
        times = [_turn(s, first + n) for n in range(turns)]
        return times, len(s.capture.hooks())


def _alone(runs: int) -> dict[str, float]:
    """Median seconds of one hook command run as gemini runs it (``bash -c``, the event
    on stdin, stdout read), per command."""
    event = orjson.dumps({"hook_event_name": "BeforeAgent", "prompt": "x" * 1500})
    capture = HookCapture(Capture(None), HookAnswer(body=b"{}"))
    capture.start()
    try:
        commands = {"true": "true", "trivial": TRIVIAL, "curl": capture_command(capture.url)}
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, command in commands.items():  # interleaved
                started = time.monotonic()
                subprocess.run(["bash", "-c", command], input=event, capture_output=True)
                times[name].append(time.monotonic() - started)
        return {name: statistics.median(got) for name, got in times.items()}
    finally:
        capture.stop()


_DURATION = re.compile(
    r"Hook execution for (\w+): \d+ hooks? executed successfully, total duration: (\d+)ms"
)


def _durations(root: Path, runs: int) -> dict[str, float]:
    """Median ms of a hook run as ``gemini -p --debug`` reports it, per hook command."""
    kinds: dict[str, bool | str] = {"true": "true", "trivial": TRIVIAL, "curl": True}
    got: dict[str, list[int]] = {kind: [] for kind in kinds}
    for _ in range(runs):
        for kind, hooks in kinds.items():
            api = FakeGemini([say("ok")])
            with api.serve():
                args = ("-o", "text", "--debug")
                run = run_print(root / kind, "hi", base_url=api.base_url, hooks=hooks, args=args)
            got[kind] += [int(m[2]) for m in _DURATION.finditer(run.stdout + run.stderr)]
    return {kind: statistics.median(ms) for kind, ms in got.items() if ms}


def _spinner(root: Path) -> list[str]:
    """The spinner lines seen while a 2 s BeforeAgent hook runs."""
    api = FakeGemini([say("answer 0.")])
    with (
        api.serve(),
        interactive(
            root,
            base_url=api.base_url,
            hooks="sleep 2; echo {}",
            events=("BeforeAgent",),
            hook={"name": "presence-hook"},
        ) as s,
    ):
        s.ready()
        s.tmux.type("turn number 0")
        s.tmux.wait_screen("turn number 0")
        time.sleep(0.5)
        s.tmux.keys("Enter")
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            screen = s.tmux.screen()
            for line in screen.splitlines():
                line = line.strip()
                if SPINNING.search(line) and line not in seen:
                    seen.append(line)
            if "answer 0." in screen and not SPINNING.search(screen):
                break
            time.sleep(0.05)
        return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3, help="sessions per kind")
    parser.add_argument("--turns", type=int, default=5, help="timed turns per session")
    parser.add_argument("--alone", action="store_true", help="only the hook commands alone")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.gettempdir()) / "codex-presence-gemini-hooks"
    if args.alone:
        for name, median in _alone(50).items():
            print(f"{name:8} {median * 1000:6.1f} ms")
        return 0
    answers: dict[str, list[float]] = {kind: [] for kind in KINDS}
    clears: dict[str, list[float]] = {kind: [] for kind in KINDS}
    hooks_per_turn: dict[str, float] = {}
    for round_ in range(args.sessions):
        for kind in KINDS:
            got, hooks = _session(scratch / kind, kind, args.turns, round_ * 100)
            answers[kind] += [a for a, _ in got]
            clears[kind] += [c for _, c in got]
            hooks_per_turn[kind] = hooks / args.turns
            row = " ".join(f"{a * 1000:5.0f}/{c * 1000:<5.0f}" for a, c in got)
            print(f"round {round_} {kind:12} {row}", flush=True)
    base = statistics.median(answers["none"])
    print("\nms, median of", len(answers["none"]), "turns each (answer on screen / no spinner)")
    print("kind          answer  +vs none    clear   hook runs/turn (SessionStart included)")
    for kind in KINDS:
        answer = statistics.median(answers[kind])
        print(
            f"{kind:12} {answer * 1000:7.0f} {(answer - base) * 1000:9.0f}"
            f" {statistics.median(clears[kind]) * 1000:8.0f} {hooks_per_turn[kind]:10.1f}"
        )
    print("\nhook run as gemini -p --debug reports it, median ms:")
    for name, median in _durations(scratch / "durations", 3).items():
        print(f"  {name:8} {median:6.0f}")
    alone = _alone(50)
    print("\none hook command alone, median of 50 (ms):")
    for name, median in alone.items():
        print(f"  {name:8} {median * 1000:6.1f}")
    print("\nspinner while a 2 s BeforeAgent hook named presence-hook runs:")
    for line in _spinner(scratch / "spinner"):
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
