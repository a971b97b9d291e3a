"""A stand-in for ``claude``, for the tests of ``codex-presence claude`` that need no real one.

Run as ``fake_claude.py [--settings FILE] [ARGS...]``, it reads its hooks from FILE (as
claude would) and plays the script in ``$FAKE_CLAUDE_SCRIPT``, a JSON list of steps:

- ``{"do": "hook", "event": NAME, ...fields}``: deliver a hook payload (``session_id``,
  ``transcript_path`` = ``$FAKE_CLAUDE_TRANSCRIPT``, ``cwd``, ``hook_event_name`` and
  the fields): POST it and wait for the answer (an HTTP hook), or run the command hook with
  ``sh -c`` and the payload on its stdin, to its end (the script's order is the hooks');
- ``{"do": "status", "status": S}``: write claude's session file
  (``$CLAUDE_CONFIG_DIR/sessions/<pid>.json``);
- ``{"do": "transcript", "entry": {...}}``: append an entry to the transcript (its
  directory made if it is not there, as claude makes a new project's);
- ``{"do": "summary"}``: append a ``stop_hook_summary`` naming the hook URL, as claude does;
- ``{"do": "dump", "path": P}``: write what it was given (argv, environment, the settings
  file's content and modes) to P as JSON;
- ``{"do": "sleep", "seconds": S}``; ``{"do": "exit", "status": N}``;
- ``{"do": "await", "path": P}``: wait until P exists (60 s at most), for a test that
  decides when claude goes on;
- ``{"do": "trap", "path": P}``: on SIGTERM, write the signal's name to P and exit 143.

At the end of the script it exits 0.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def main() -> int:
    args = sys.argv[1:]
    settings: dict[str, Any] = {}
    settings_path: Path | None = None
    connection: http.client.HTTPConnection | None = None
    command: str | None = None
    url: Any = None
    headers: dict[str, str] = {}
    config_path: Path | None = None
    if args[:1] == ["--settings"]:
        settings_path = Path(args[1])
        settings = json.loads(settings_path.read_text())
        ours_all = [  # one way for every hook: a command hook if there is one (async)
            hook
            for groups in settings["hooks"].values()
            for group in groups
            for hook in group["hooks"]
            if hook["type"] == "http" or hook.get("command", "").startswith("exec ")
        ]
        ours = next((h for h in ours_all if h["type"] == "command"), ours_all[0])
        if ours["type"] == "command":  # an async command hook: claude runs it with sh
            command = ours["command"]
            words = shlex.split(command)
            poster = Path(words[-1])
            if "-K" not in words and poster.is_file() and " -K " in poster.read_text():
                words = shlex.split(poster.read_text())  # a poster that runs curl
            if "-K" not in words and "/dev/tcp/" not in Path(words[-1]).read_text():
                config_path = Path(words[-1])  # the spool poster: no URL, no server
                config = config_path.read_text()
                address = None
            elif "-K" in words:  # curl, its config file holding the URL
                config_path = Path(words[words.index("-K") + 1])
                config = config_path.read_text()
                (address,) = re.findall(r'^url = "([^"]+)"$', config, re.MULTILINE)
            else:  # the bash poster script, the URL in it
                config_path = Path(words[-1])
                config = config_path.read_text()
                (port,) = re.findall(r"/dev/tcp/127\.0\.0\.1/(\d+) ", config)
                (path,) = re.findall(r"'(/[^']+/hook)'", config)
                address = f"http://127.0.0.1:{port}{path}"
            url = None if address is None else urlsplit(address)
        else:
            url = urlsplit(ours["url"])
            headers = ours.get("headers", {})
        if url is not None:
            connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    transcript = Path(os.environ.get("FAKE_CLAUDE_TRANSCRIPT", "/nonexistent/transcript.jsonl"))
    config = Path(os.environ.get("CLAUDE_CONFIG_DIR", Path.home() / ".claude"))
    stamp = 0
    for step in json.loads(os.environ.get("FAKE_CLAUDE_SCRIPT", "[]")):
        do = step.pop("do")
        if do == "hook":
            body: dict[str, Any] = {
                "session_id": "fake-session",
                "transcript_path": str(transcript),
                "cwd": str(Path.cwd()),
                "prompt_id": "p1",
                "hook_event_name": step.pop("event"),
                **step,
            }
            assert settings_path is not None, "no --settings: no hooks"
            if command is not None:  # run to its end: the script's order is the hooks'
                done = subprocess.run(["sh", "-c", command], input=json.dumps(body).encode())
                assert done.returncode == 0, done.returncode
                continue
            assert connection is not None and url is not None
            connection.request(
                "POST",
                url.path,
                json.dumps(body),
                {"content-type": "application/json", **headers},
            )
            answer = connection.getresponse()
            assert answer.status == 200 and answer.read() == b"{}", answer.status
        elif do == "status":
            stamp += 1
            sessions = config / "sessions"
            sessions.mkdir(parents=True, exist_ok=True)
            content = {"pid": os.getpid(), "sessionId": "fake-session", **step}
            content["statusUpdatedAt"] = stamp
            (sessions / f"{os.getpid()}.json").write_text(json.dumps(content))
        elif do == "transcript":  # its directory made first, as claude makes a project's
            transcript.parent.mkdir(parents=True, exist_ok=True)
            with transcript.open("a") as out:
                out.write(json.dumps(step["entry"]) + "\n")
        elif do == "summary":  # as claude's transcript names its hooks, URL and all
            named = command if url is None else f"http://{url.netloc}{url.path}"
            entry = {
                "type": "system",
                "subtype": "stop_hook_summary",
                "hookInfos": [{"command": named}],
            }
            with transcript.open("a") as out:
                out.write(json.dumps(entry) + "\n")
        elif do == "dump":
            Path(step["path"]).write_text(
                json.dumps(
                    {
                        "argv": sys.argv,
                        "pid": os.getpid(),
                        "env": dict(os.environ),
                        "settings": settings,
                        "settings_mode": settings_path
                        and stat.S_IMODE(settings_path.stat().st_mode),
                        "dir_mode": settings_path
                        and stat.S_IMODE(settings_path.parent.stat().st_mode),
                        "pgrp_is_parents": os.getpgrp() == os.getpgid(os.getppid()),
                        "config": config_path and config_path.read_text(),
                        "config_mode": config_path and stat.S_IMODE(config_path.stat().st_mode),
                    }
                )
            )
        elif do == "await":
            deadline = time.monotonic() + 60
            while not Path(step["path"]).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        elif do == "sleep":
            time.sleep(step["seconds"])
        elif do == "exit":
            return int(step["status"])
        elif do == "trap":
            path = Path(step["path"])

            def on_term(signum: int, frame: object, path: Path = path) -> None:
                path.write_text(signal.Signals(signum).name)
                sys.exit(143)

            signal.signal(signal.SIGTERM, on_term)
        else:
            raise SystemExit(f"fake claude: unknown step {do!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
