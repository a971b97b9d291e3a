"""How often Claude Code's spinner names a hook, by the kind of hook (issue 27).

claude lists each hook of its settings in its spinner line ("running PostToolUse hook ·
0s") from before it starts the hook until it is done with it; for an async command hook,
until it has started the process and written the payload to its stdin. This runs the real
claude (``CODEX_PRESENCE_TEST_CLAUDE`` or the one ``tests/run.sh`` installs) in tmux against
the fake Messages API, one turn with a tool call (Read, then an answer: UserPromptSubmit,
PreToolUse, PostToolUse, PostToolBatch, Stop), reads the screen all through the turn, and
counts the turns whose screen named a hook. Kinds, interleaved turn by turn:

* ``ours``: as ``codex-presence claude`` writes them (``hook_settings`` with
  ``script_command``: ``sh -c 'exec bash FILE'``, FILE the ``poster_script`` that POSTs
  through bash's own ``/dev/tcp``).
* ``curl``: what ours were before (``poster_command``: ``sh -c 'exec curl -q -K FILE -H
  "x-hook-seq: $$"'``); ours where there is no bash.
* ``exec``: the same curl started with no shell (``command`` + ``args``, claude's exec form).
* ``static``: a tiny statically linked C program (its source is here; built with ``cc``)
  that POSTs stdin to the hook server, with its pid as the sequence header: what a
  poster lighter than curl would give.
* ``true``: an async hook running ``true``: the least a command hook can start (it
  delivers nothing: the floor of what claude does itself).
* ``http``: HTTP hooks, answered at once; claude waits for each answer.

Also, from claude's ``--debug-file``, how long it held each command hook before it was
"moved to the background" (its own work: the window in which the spinner may name it).

    .venv/bin/python bench/claude_spinner.py [--turns 8] [--kinds ours,curl,true,http]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._claude_driver import (  # noqa: E402
    Capture,
    HookCapture,
    Interactive,
    Tmux,
    claude_binary,
    claude_env,
    prepare_home,
)
from bench._fake_anthropic import (  # noqa: E402
    FakeAnthropic,
    Reply,
    say,
    text,
    tool_results,
    tool_use,
)
from codex_presence.core.claude.protocol import HOOK_EVENTS, hook_settings  # noqa: E402
from codex_presence.core.hooks.poster import (  # noqa: E402
    curl_config,
    poster_command,
    poster_script,
    script_command,
)

KINDS = ("ours", "curl", "exec", "static", "true", "http")
POSTER_C = r"""
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  FILE *f = fopen(argv[1], "r");
  if (!f) return 2;
  int port; char path[512];
  if (fscanf(f, "%d %511s", &port, path) != 2) return 2;
  fclose(f);
  static char body[1 << 20]; size_t n = 0; ssize_t r;
  while (n < sizeof body && (r = read(0, body + n, sizeof body - n)) > 0) n += (size_t)r;
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) return 1;
  char head[1024];
  int h = snprintf(head, sizeof head,
                   "POST %s HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                   "content-type: application/json\r\n"
                   "content-length: %zu\r\nx-hook-seq: %d\r\n\r\n",
                   path, n, (int)getpid());
  if (write(s, head, (size_t)h) != h || write(s, body, n) != (ssize_t)n) return 1;
  char buf[512];
  while (read(s, buf, sizeof buf) > 0) {}
  return 0;
}
"""
NAMED = re.compile(r"running (\w+) hook")
BACKGROUNDED = re.compile(r"Hooks: (\w+)(?::\S*)? \[[^\]]*\] moved to the background \((\d+)ms\)")


def settings_for(kind: str, url: str, directory: Path) -> dict[str, Any]:
    """The ``--settings`` document of one kind of hook (SessionEnd stays HTTP, as ours)."""
    if kind == "http":
        return hook_settings(url)
    config = directory / "curl.cfg"
    config.write_text(curl_config(url))
    curl = shutil.which("curl")
    if curl is None:
        raise SystemExit("no curl on the PATH")
    if kind == "ours":
        script = directory / "poster.sh"
        script.write_text(poster_script(url, cat=shutil.which("cat") or "cat"))
        return hook_settings(
            url, command=script_command(shutil.which("bash") or "bash", str(script))
        )
    if kind == "curl":
        return hook_settings(url, command=poster_command(curl, str(config)))
    if kind == "static":
        target = urlsplit(url)
        (directory / "poster.cfg").write_text(f"{target.port} {target.path}\n")
        poster = f"{directory.parent / 'poster'} {directory / 'poster.cfg'}"
        return hook_settings(url, command=poster)
    document = hook_settings(url, command="true")
    for event, groups in document["hooks"].items():
        hook = groups[0]["hooks"][0]
        if hook["type"] == "command" and kind == "exec":
            hook.update(command=curl, args=["-q", "-K", str(config)])
        elif hook["type"] == "command" and kind != "true":
            raise SystemExit(f"unknown kind {kind!r} ({event})")
    return document


def a_turn() -> FakeAnthropic:
    return FakeAnthropic(
        [
            Reply(
                blocks=[text("Reading it."), tool_use("Read", {"file_path": "NOTES"}, id="t_r")],
                wait=0.3,
            ),
            say("The notes say hello.", match=lambda body: "t_r" in tool_results(body), wait=0.3),
        ]
    )


def one_turn(claude: Path, kind: str, directory: Path) -> tuple[set[str], list[tuple[str, int]]]:
    """The hooks named on the screen through one turn, and claude's own ms per command hook."""
    capture = Capture(None)
    server = HookCapture(capture)
    server.start()
    api = a_turn()
    debug = directory / "debug.log"
    try:
        with api.serve():
            home, work = prepare_home(directory)
            (work / "NOTES").write_text("hello\n")
            settings = directory / "settings.json"
            settings.write_text(json.dumps(settings_for(kind, server.url, directory)))
            tmux = Tmux(directory / "tmux.sock", width=160)
            argv = [str(claude), "--settings", str(settings), "--debug-file", str(debug)]
            tmux.start(
                [*argv, "--permission-mode", "default"],
                cwd=work,
                env=claude_env(home, api.base_url),
            )
            session = Interactive(Capture(None), tmux, work, server=None)  # type: ignore[arg-type]
            named: set[str] = set()
            try:
                session.ready()
                session.prompt("read my notes")
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    screen = tmux.screen()
                    named |= {m.group(1) for m in NAMED.finditer(screen)}
                    if "The notes say hello." in screen and "esc to interrupt" not in screen:
                        break
                else:
                    raise SystemExit(f"{kind}: the turn did not end")
            finally:
                tmux.kill()
    finally:
        server.stop()
    if kind != "true":
        got = {m.get("hook_event_name") for m in capture.hooks()}
        missing = {"UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"} - got
        if missing:
            raise SystemExit(f"{kind}: no {sorted(missing)} arrived")
    log = debug.read_text(errors="replace") if debug.exists() else ""
    return named, [(m.group(1), int(m.group(2))) for m in BACKGROUNDED.finditer(log)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=8, help="turns per kind")
    parser.add_argument(
        "--kinds", default="ours,curl,true,http", help=f"of {', '.join(KINDS)} (static needs cc)"
    )
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    claude = claude_binary()
    turns_named: Counter[str] = Counter()
    most: Counter[str] = Counter()
    events_named: dict[str, Counter[str]] = {k: Counter() for k in kinds}
    held: dict[str, list[int]] = {k: [] for k in kinds}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="claude-spinner-") as tmp:
        if "static" in kinds:
            source = Path(tmp) / "poster.c"
            source.write_text(POSTER_C)
            build = ["cc", "-O2", "-static", "-o", str(Path(tmp) / "poster"), str(source)]
            subprocess.run(build, check=True)
        for turn in range(args.turns):
            for kind in kinds:
                directory = Path(tmp) / f"{kind}-{turn}"
                directory.mkdir()
                named, own = one_turn(claude, kind, directory)
                turns_named[kind] += bool(named)
                most[kind] = max(most[kind], len(named))
                events_named[kind].update(named)
                held[kind] += [ms for _, ms in own]
            loads.append(os.getloadavg()[0])
    load = f"load {min(loads):.2f}-{max(loads):.2f}"
    print(f"{os.cpu_count()} CPUs, {load}; {args.turns} turns a kind, interleaved")
    header = f"{'kind':6} {'turns naming a hook':>20}  {'most in a turn':>14}"
    print(f"{header}  {'claude holds a command hook (ms)':34}  named")
    for kind in kinds:
        ms = held[kind]
        hold = f"p50 {statistics.median(ms):5.0f}  max {max(ms):5.0f}  (n={len(ms)})" if ms else "-"
        names = ", ".join(f"{e} {n}" for e, n in events_named[kind].most_common()) or "-"
        counts = f"{kind:6} {turns_named[kind]:>14} of {args.turns:<3}  {most[kind]:>14}"
        print(f"{counts}  {hold:34}  {names}")
    print(f"(events registered: {len(HOOK_EVENTS)}; a turn fires five of them)")


if __name__ == "__main__":
    main()
