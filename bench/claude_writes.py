"""What Claude Code writes when after a prompt's Enter (issue 34): the earliest sign of a turn
that a runner could read without a hook.

Runs plain interactive claude (``CODEX_PRESENCE_TEST_CLAUDE`` or the one ``tests/run.sh``
installs; no hooks, no runner) in tmux against the fake Messages API, with inotify on its
config directory (``history.jsonl``, ``sessions/``, the project's transcript directory), and
stamps every event on the monotonic clock. Each session sends two prompts, both timed (the
first makes what a session makes once: the project's directory, the transcript, the history
file's first entry). For each prompt and file: ms from just before tmux sends the Enter to
the file's first open and its first write.

With ``--hooked``, claude gets the runner's settings (``--settings FILE``, its hooks and
poster written by the runner's own code, to a socket that listens and never answers), no
runner: whether our hooks change when claude writes.

    .venv/bin/python bench/claude_writes.py [--sessions 5] [--hooked]
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
from codex_presence.agent.claude.settings import with_our_hooks  # noqa: E402
from codex_presence.agent.hooks.listener import hook_url, listen_loopback, new_hook_path  # noqa: E402

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


def one_session(
    root: Path, base_url: str, settings: list[str]
) -> dict[tuple[int, str, str], float]:
    """ms from each prompt's Enter to each file's first open and first write after it."""
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
        [str(claude_binary()), *settings, "--permission-mode", "default"],
        cwd=work,
        env=claude_env(home, base_url),
    )
    enters: list[float] = []
    try:
        tmux.wait_screen(r"\? for shortcuts", 60)
        for text in ("first prompt", "second prompt"):
            tmux.type(text)
            time.sleep(0.3)
            enters.append(time.monotonic())
            tmux.keys("Enter")
            time.sleep(3.0)
    finally:
        tmux.kill()
        stop.set()
        thread.join()
        inotify.close()
    first: dict[tuple[int, str, str], float] = {}
    for t, directory, name, mask in events:
        what = kind(home, directory, name)
        prompt = sum(t >= enter for enter in enters)  # 1 or 2; 0: before the first
        if what is None or not prompt:
            continue
        for flag, label in ((flags.OPEN, "open"), (flags.MODIFY, "write")):
            if mask & flag and (prompt, what, label) not in first:
                first[prompt, what, label] = (t - enters[prompt - 1]) * 1000
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--hooked", action="store_true", help="the runner's hooks, no runner")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()}")
    seen: dict[tuple[int, str, str], list[float]] = {}
    api = FakeAnthropic([say(f"Answer {n}.", wait=0.5) for n in range(args.sessions * 2)])
    with (
        api.serve(),
        tempfile.TemporaryDirectory(prefix="cpw-", dir="/tmp") as tmp,
        listen_loopback() as listener,
    ):
        settings: list[str] = []
        if args.hooked:
            url = hook_url(listener, new_hook_path())
            argv = with_our_hooks(
                [str(claude_binary())], {}, url, private=Path(tmp), env=dict(os.environ)
            )[0]
            settings = argv[1:]
        for n in range(args.sessions):
            for key, ms in one_session(Path(tmp) / str(n), api.base_url, settings).items():
                seen.setdefault(key, []).append(ms)
    print(f"load after: {os.getloadavg()}")
    print(f"claude {claude_binary()}: ms from a prompt's Enter, median (min-max)")
    for (prompt, what, label), values in sorted(
        seen.items(), key=lambda kv: (kv[0][0], statistics.median(kv[1]))
    ):
        print(
            f"  prompt {prompt}: first {label:<5} {what:<42} {statistics.median(values):7.1f}"
            f" ({min(values):.0f}-{max(values):.0f})  n={len(values)}"
        )


if __name__ == "__main__":
    main()
