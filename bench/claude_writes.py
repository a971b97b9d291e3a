"""What Claude Code writes when after a prompt's Enter (issue 34): the earliest sign of a turn
that a runner could read without a hook.

Runs plain interactive claude (``CODEX_PRESENCE_TEST_CLAUDE`` or the one ``tests/run.sh``
installs; no hooks, no runner) in tmux against the fake Messages API, with inotify on its
config directory (``history.jsonl``, ``sessions/``, the project's transcript directory), and
stamps every event on the monotonic clock. Each session sends two prompts; the second is
timed (the first creates files a session makes once). For each file: ms from just before
tmux sends the Enter to its first open and its first write.

    .venv/bin/python bench/claude_writes.py [--sessions 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from inotify_simple import INotify, flags  # noqa: E402

from bench._claude_driver import Tmux, claude_binary, claude_env, prepare_home  # noqa: E402
from bench._fake_anthropic import FakeAnthropic, say  # noqa: E402

MASK = flags.CREATE | flags.MODIFY | flags.OPEN | flags.MOVED_TO


def kind(home: Path, directory: str, name: str) -> str | None:
    """What a file is to claude's session, or None for what the figure leaves out."""
    if directory == str(home) and name == "history.jsonl":
        return "history.jsonl (every session's prompts)"
    if directory == str(home / "sessions") and name.endswith(".json"):
        return "sessions/<pid>.json (the session file)"
    if directory.startswith(str(home / "projects")) and name.endswith(".jsonl"):
        return "projects/…/<id>.jsonl (the transcript)"
    return None


def one_session(root: Path, base_url: str) -> dict[tuple[str, str], float]:
    """ms from the second prompt's Enter to each file's first open and first write."""
    home, work = prepare_home(root)
    (home / "sessions").mkdir()
    (home / "projects").mkdir()
    inotify = INotify()
    names = {inotify.add_watch(str(d), MASK): str(d) for d in (home, home / "sessions")}
    names[inotify.add_watch(str(home / "projects"), MASK)] = str(home / "projects")
    events: list[tuple[float, str, str, int]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for event in inotify.read(timeout=50):
                directory = names.get(event.wd, "")
                events.append((time.monotonic(), directory, event.name, event.mask))
                if event.mask & flags.CREATE and event.mask & flags.ISDIR:
                    path = str(Path(directory) / event.name)
                    with suppress(OSError):
                        names[inotify.add_watch(path, MASK)] = path

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    tmux = Tmux(root / "tmux.sock")
    tmux.start(
        [str(claude_binary()), "--permission-mode", "default"],
        cwd=work,
        env=claude_env(home, base_url),
    )
    try:
        tmux.wait_screen(r"\? for shortcuts", 60)
        for n, text in enumerate(("first prompt", "second prompt")):
            tmux.type(text)
            time.sleep(0.3)
            if n:
                events.clear()
            enter = time.monotonic()
            tmux.keys("Enter")
            time.sleep(3.0)
    finally:
        tmux.kill()
        stop.set()
        thread.join()
        inotify.close()
    first: dict[tuple[str, str], float] = {}
    for t, directory, name, mask in events:
        what = kind(home, directory, name)
        if what is None:
            continue
        for flag, label in ((flags.OPEN, "open"), (flags.MODIFY, "write")):
            if mask & flag and (what, label) not in first:
                first[what, label] = (t - enter) * 1000
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}")
    seen: dict[tuple[str, str], list[float]] = {}
    api = FakeAnthropic([say(f"Answer {n}.", wait=0.5) for n in range(args.sessions * 2)])
    with api.serve(), tempfile.TemporaryDirectory(prefix="cpw-", dir="/tmp") as tmp:
        for n in range(args.sessions):
            for key, ms in one_session(Path(tmp) / str(n), api.base_url).items():
                seen.setdefault(key, []).append(ms)
    print(f"load after: {os.getloadavg()}")
    print(f"claude {claude_binary()}: ms from the second prompt's Enter, median (min-max)")
    for (what, label), values in sorted(seen.items(), key=lambda kv: statistics.median(kv[1])):
        print(
            f"  first {label:<5} {what:<42} {statistics.median(values):7.1f}"
            f" ({min(values):.0f}-{max(values):.0f})  n={len(values)}"
        )


if __name__ == "__main__":
    main()
