"""What ``codex-presence gemini`` costs a person: a turn through the runner against plain
gemini, and our hook command alone (issue 31).

Runs the real gemini (``CODEX_PRESENCE_TEST_GEMINI`` or the one ``tests/run.sh``
installs) in tmux against the fake Gemini API, a plain text turn at a time, interleaved
session by session: ``plain`` (gemini alone, no hook: the baseline) and ``runner``
(``codex-presence gemini -- gemini``, no broker: its hook, the poster of
``core/hooks/poster.py``, on each event the mapping reads, into its loopback hook server).
Each turn is timed from its Enter to the answer on screen (the person's wait) and to the
screen with no spinner left (gemini keeps a hook's name there at least 3 s from its
start), read with capture-pane every ~10 ms; the spinner lines seen through the runner are
listed. Then our hook command alone, as gemini runs it (``bash -c COMMAND``, a 1.5 kB event
on stdin), against ``true`` and curl, interleaved, to a loopback server.

    .venv/bin/python bench/gemini_runner.py [--sessions 3] [--turns 5]
"""

from __future__ import annotations

import argparse
import re
import shlex
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
from bench._gemini_driver import capture_command, gemini_binary, interactive
from codex_presence.core.hooks.poster import poster_script, script_command

KINDS = ("plain", "runner")
SPINNING = re.compile(r"esc to cancel|Executing Hook")


def _runner_script(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    script = root / "run.sh"
    argv = [sys.executable, "-m", "codex_presence", "gemini", "--log-file", str(root / "log")]
    script.write_text(f'#!/bin/sh\nexec {shlex.join([*argv, "--", str(gemini_binary())])} "$@"\n')
    script.chmod(0o700)
    return script


def _turn(s: object, n: int, spinner: set[str]) -> tuple[float, float]:
    tmux = s.tmux  # type: ignore[attr-defined]
    text = f"turn number {n}"
    tmux.type(text)
    tmux.wait_screen(re.escape(text))
    time.sleep(0.5)  # an Enter sooner is taken as part of a paste (gemini_driver)
    started = time.monotonic()
    tmux.keys("Enter")
    answered = None
    while time.monotonic() < started + 60:
        screen = tmux.screen()
        spinner.update(ln.strip() for ln in screen.splitlines() if SPINNING.search(ln))
        if answered is None and f"answer {n}." in screen:
            answered = time.monotonic() - started
        if answered is not None and not SPINNING.search(screen):
            return answered, time.monotonic() - started
        time.sleep(0.01)
    raise TimeoutError(f"turn {n} did not end:\n{tmux.screen()}")


def _session(
    root: Path, kind: str, turns: int, first: int, spinner: set[str]
) -> list[tuple[float, float]]:
    api = FakeGemini(
        [say(f"answer {first + n}.", match=f"turn number {first + n}") for n in range(turns)]
    )
    gemini = _runner_script(root / "runner") if kind == "runner" else None
    with (
        api.serve(),
        interactive(root / "g", base_url=api.base_url, hooks=False, gemini=gemini) as s,
    ):
        s.ready()
        time.sleep(2.5)  # SessionStart's hook (1.7 s after the box) and its 3 s of spinner
        return [_turn(s, first + n, spinner) for n in range(turns)]


def _alone(runs: int) -> dict[str, float]:
    event = orjson.dumps({"hook_event_name": "BeforeAgent", "prompt": "x" * 1500})
    capture = HookCapture(Capture(None), HookAnswer(body=b"{}"))
    capture.start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            script = Path(scratch) / "poster.sh"
            script.write_text(poster_script(capture.url, cat="/bin/cat"))
            commands = {
                "true": "true",
                "ours": script_command("/bin/bash", str(script)),
                "curl": capture_command(capture.url),
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(runs):
                for name, command in commands.items():  # interleaved
                    started = time.monotonic()
                    subprocess.run(["bash", "-c", command], input=event, capture_output=True)
                    times[name].append(time.monotonic() - started)
        return {name: statistics.median(got) for name, got in times.items()}
    finally:
        capture.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3, help="sessions per kind")
    parser.add_argument("--turns", type=int, default=5, help="timed turns per session")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.gettempdir()) / "codex-presence-gemini-runner"
    answers: dict[str, list[float]] = {kind: [] for kind in KINDS}
    clears: dict[str, list[float]] = {kind: [] for kind in KINDS}
    spinner: set[str] = set()
    for round_ in range(args.sessions):
        for kind in KINDS:
            seen: set[str] = set()
            got = _session(scratch / kind, kind, args.turns, round_ * 100, seen)
            if kind == "runner":
                spinner |= seen
            answers[kind] += [a for a, _ in got]
            clears[kind] += [c for _, c in got]
            row = " ".join(f"{a * 1000:5.0f}/{c * 1000:<5.0f}" for a, c in got)
            print(f"round {round_} {kind:7} {row}", flush=True)
    base = statistics.median(answers["plain"])
    print(f"\nms, median of {len(answers['plain'])} turns each (answer on screen / no spinner)")
    for kind in KINDS:
        answer = statistics.median(answers[kind])
        print(
            f"{kind:7} {answer * 1000:7.0f} {(answer - base) * 1000:+7.0f} vs plain"
            f"   clear {statistics.median(clears[kind]) * 1000:6.0f}"
        )
    print("\nthe spinner through the runner:")
    for line in sorted(spinner):
        print("  " + re.sub(r"\d+s\)", "Ns)", line))
    print("\none hook command alone, median of 50 (ms):")
    for name, median in _alone(50).items():
        print(f"  {name:6} {median * 1000:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
