"""``codex-presence claude`` around a stand-in claude (``tests/support/fake_claude.py``): the
settings it writes, the environment claude gets, exit status and signals, claude's death
with it, reporting to a real broker, the recording, and no polling while idle."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codex_presence.agent.claude import session as claude_session
from codex_presence.agent.claude import settings as claude_settings
from codex_presence.agent.claude.files import ClaudeFiles
from codex_presence.agent.claude.session import ClaudeSession
from codex_presence.core.claude.mapping import SETTLE
from codex_presence.core.claude.protocol import (
    HOOK_EVENTS,
    HOOK_TIMEOUT,
    RESUME_HINT_FLAGS_ENV,
    WAITED_EVENTS,
    resume_hint_flags,
)
from codex_presence.core.hooks.poster import HOOK_SECRET_HEADER, SPOOL, SPOOL_ENV
from codex_presence.core.recording import read_relevant_entries
from codex_presence.core.timeline import timeline
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.other_user import OTHER_UID
from tests.support.processes import alive
from tests.support.roster_watch import RosterWatch
from tests.support.waiting import WAIT, eventually

FAKE_CLAUDE = Path(__file__).parent / "support" / "fake_claude.py"

EXITS_WITHIN = 120
"""Seconds a command is given to end once told to (generous: a loaded machine ran
these at a load of 10, where 30 s was not enough; docs/development.md)."""


def fake_claude(tmp_path: Path) -> str:
    """An executable "claude" (one word: ``--settings`` goes right after it)."""
    script = tmp_path / "claude"
    if not script.exists():
        script.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_CLAUDE} "$@"\n')
        script.chmod(0o755)
    return str(script)


def hook(event: str, **fields: Any) -> dict[str, Any]:
    return {"do": "hook", "event": event, **fields}


def run_claude(
    tmp_path: Path,
    script: list[dict[str, Any]],
    *options: str,
    env: dict[str, str] | None = None,
    wait: bool = True,
) -> subprocess.Popen[bytes]:
    """``codex-presence claude OPTIONS -- fake_claude`` playing ``script``; what it says on
    stderr goes to ``tmp_path/stderr`` (:func:`said`)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    full_env.update(
        CLAUDE_CONFIG_DIR=str(tmp_path / "config"),
        FAKE_CLAUDE_SCRIPT=json.dumps(script),
        FAKE_CLAUDE_TRANSCRIPT=str(tmp_path / "transcript.jsonl"),
        **(env or {}),
    )
    with (tmp_path / "stderr").open("ab") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "codex_presence",
                "claude",
                *options,
                "--",
                fake_claude(tmp_path),
            ],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    if wait:
        proc.wait(EXITS_WITHIN)
    return proc


def said(tmp_path: Path) -> str:
    return (tmp_path / "stderr").read_text()


def reporting(broker: RunningBroker, tmp_path: Path) -> list[str]:
    token = tmp_path / "alice.token"
    token.write_text(token_of("alice") + "\n")
    token.chmod(0o600)
    return ["--broker", broker.url, "--name", "alice", "--token-file", str(token)]


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker(team=make_team("alice", "bob")) as running:
        yield running


# -- what claude is given --------------------------------------------------------------------


@pytest.mark.parametrize("spool", ["spool", "loopback"])
def test_claude_gets_private_settings_with_a_hook_per_event(tmp_path: Path, spool: str) -> None:
    """Every event a command hook running our bash poster, async but for SessionEnd (claude
    exits right after: it waits for that one). The poster writes into the private spool
    (Linux), or POSTs to the loopback server (elsewhere; ``CODEX_PRESENCE_HOOK_SPOOL=0``),
    the URL in the script only."""
    dump = tmp_path / "dump.json"
    env = {SPOOL_ENV: "0"} if spool == "loopback" else None
    proc = run_claude(tmp_path, [{"do": "dump", "path": str(dump)}], env=env)
    assert proc.returncode == 0, said(tmp_path)
    given = json.loads(dump.read_text())
    argv = given["argv"]
    assert argv[1] == "--settings" and argv[3:] == []  # inserted after the first word
    assert given["settings_mode"] == 0o600 and given["dir_mode"] == 0o700
    hooks = given["settings"]["hooks"]
    assert sorted(hooks) == sorted(HOOK_EVENTS)
    commands = set()
    for event in HOOK_EVENTS:
        (entry,) = hooks[event]
        (spec,) = entry["hooks"]
        assert spec["timeout"] == HOOK_TIMEOUT
        # async: claude neither waits for it nor names it in its spinner
        assert spec["type"] == "command" and spec["async"] is (event not in WAITED_EVENTS)
        commands.add(spec["command"])
    (command,) = commands
    words = shlex.split(command)
    assert words[:2] == ["exec", shutil.which("bash")]  # the poster script, not curl's start
    script = Path(words[2])
    private = Path(argv[2]).parent
    assert script.parent == private  # private, beside the settings
    assert given["config_mode"] == 0o600 and "/hook" not in command  # the URL: file only
    if spool == "spool":
        assert f">'{private / SPOOL}'/$$'.hook'" in given["config"]
        assert "/dev/tcp" not in given["config"] and "/hook " not in given["config"]
    else:
        assert re.search(r"/dev/tcp/127\.0\.0\.1/\d+ ", given["config"])
        assert re.search(r"'/[^/']+/hook'", given["config"])
    assert not Path(argv[2]).exists() and not private.exists()  # removed
    assert given["pgrp_is_parents"]  # in the terminal's foreground group, as run directly


def test_without_bash_or_curl_claude_gets_http_hooks_their_secret_in_a_header(
    tmp_path: Path,
) -> None:
    """claude prints a failing HTTP hook's URL (and writes it into the transcript): the
    secret is in a header, the URL is the server's ``/hook``."""
    dump = tmp_path / "dump.json"
    script = json.dumps([{"do": "dump", "path": str(dump)}])
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    full_env.update(
        FAKE_CLAUDE_SCRIPT=script, CLAUDE_CONFIG_DIR=str(tmp_path / "config"), PATH="/nonexistent"
    )
    command = [sys.executable, "-m", "codex_presence", "claude", "--", fake_claude(tmp_path)]
    proc = subprocess.run(command, env=full_env, check=False)
    assert proc.returncode == 0
    hooks = json.loads(dump.read_text())["settings"]["hooks"]
    specs = [spec for event in HOOK_EVENTS for entry in hooks[event] for spec in entry["hooks"]]
    assert {spec["type"] for spec in specs} == {"http"}
    assert all(re.fullmatch(r"http://127\.0\.0\.1:\d+/hook", spec["url"]) for spec in specs)
    assert all(len(spec["headers"][HOOK_SECRET_HEADER]) == 32 for spec in specs)


@pytest.mark.parametrize("args", [("-p", "hi"), ("--print",)])
def test_in_print_mode_claude_waits_for_the_command_hooks_of_the_turns_end(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Print mode exits with the turn, killing what runs of its async hooks: Stop,
    StopFailure and SessionEnd are command hooks claude waits for, the others async (no
    HTTP hook, no URL claude could print)."""
    dump = tmp_path / "dump.json"
    script = json.dumps([{"do": "dump", "path": str(dump)}])
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    full_env.update(FAKE_CLAUDE_SCRIPT=script, CLAUDE_CONFIG_DIR=str(tmp_path / "config"))
    command = [sys.executable, "-m", "codex_presence", "claude", "--", fake_claude(tmp_path)]
    proc = subprocess.run([*command, *args], env=full_env, check=False)
    assert proc.returncode == 0
    hooks = json.loads(dump.read_text())["settings"]["hooks"]
    kinds = {
        event: (spec["type"], spec["async"])
        for event in HOOK_EVENTS
        for entry in hooks[event]
        for spec in entry["hooks"]
    }
    waited = {"Stop", "StopFailure", "SessionEnd"}
    assert kinds == {e: ("command", e not in waited) for e in HOOK_EVENTS}


@pytest.mark.parametrize("bash", ["none", "without /dev/tcp"])
def test_without_a_bash_that_opens_tcp_claude_gets_curl_hooks(tmp_path: Path, bash: str) -> None:
    """Where claude's PATH has curl but no bash, or a bash built without network
    redirections (one that fails to open ``/dev/tcp``, as such a build does), the async
    hooks run curl, its config file (0600, beside the settings) holding the URL: the
    process list never shows it. The bash is tried after claude's spawn (issue 34): the
    poster claude's hooks run becomes one that runs curl, before any hook."""
    curl = shutil.which("curl")
    assert curl is not None
    only_curl = tmp_path / "bin"
    only_curl.mkdir()
    (only_curl / "curl").symlink_to(curl)
    if bash != "none":
        cat = shutil.which("cat")
        assert cat is not None
        (only_curl / "cat").symlink_to(cat)
        no_tcp = only_curl / "bash"
        no_tcp.write_text(
            f"#!{shutil.which('bash')}\necho 'No such file or directory' >&2\nexit 1\n"
        )
        no_tcp.chmod(0o755)
    dump = tmp_path / "dump.json"
    go_on = tmp_path / "go-on"
    script = json.dumps([{"do": "dump", "path": str(dump)}, {"do": "await", "path": str(go_on)}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    env.update(
        FAKE_CLAUDE_SCRIPT=script, CLAUDE_CONFIG_DIR=str(tmp_path / "config"), PATH=str(only_curl)
    )
    env[SPOOL_ENV] = "0"  # the loopback server (where nothing can be spooled)
    command = [sys.executable, "-m", "codex_presence", "claude", "--", fake_claude(tmp_path)]
    proc = subprocess.Popen(command, env=env)
    try:
        eventually(dump.exists, within=60)
        given = json.loads(dump.read_text())
        config = Path(given["argv"][2]).parent / "curl.cfg"
        eventually(config.exists, within=60)  # (bash tried, and found wanting)
        (command_hook,) = {
            spec["command"]
            for event in HOOK_EVENTS
            for entry in given["settings"]["hooks"][event]
            for spec in entry["hooks"]
            if spec["type"] == "command"
        }
        words = shlex.split(command_hook)
        if bash != "none":  # the poster claude runs with bash runs curl
            assert words[:2] == ["exec", str(only_curl / "bash")]
            words = shlex.split(Path(words[2]).read_text())
        assert words[:3] == ["exec", str(only_curl / "curl"), "-q"]  # no ~/.curlrc of theirs
        assert Path(words[words.index("-K") + 1]) == config
        assert stat.S_IMODE(config.stat().st_mode) == 0o600 and "/hook" not in command_hook
        url = r'^url = "http://127\.0\.0\.1:\d+/[^/]+/hook"$'
        assert re.search(url, config.read_text(), re.M)
    finally:
        go_on.touch()
    assert proc.wait(EXITS_WITHIN) == 0


def test_claude_gets_loopback_in_no_proxy_and_never_the_token(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    env = {"CODEX_PRESENCE_TOKEN": "cp_secret-token", "NO_PROXY": "example.com", "no_proxy": ""}
    run_claude(tmp_path, [{"do": "dump", "path": str(dump)}], env=env)
    given = json.loads(dump.read_text())["env"]
    assert given["NO_PROXY"] == "example.com,127.0.0.1" and given["no_proxy"] == "127.0.0.1"
    assert "CODEX_PRESENCE_TOKEN" not in given
    assert "cp_secret-token" not in json.dumps(given)


def test_a_settings_of_the_users_own_is_carried_with_ours(tmp_path: Path) -> None:
    """claude takes the last --settings only: theirs and ours must become one."""
    dump = tmp_path / "dump.json"
    theirs = tmp_path / "mine.json"
    mine = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}, "x": 1}
    theirs.write_text(json.dumps(mine))
    script = json.dumps([{"do": "dump", "path": str(dump)}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    env.update(FAKE_CLAUDE_SCRIPT=script, CLAUDE_CONFIG_DIR=str(tmp_path / "config"))
    command = [sys.executable, "-m", "codex_presence", "claude", "--", fake_claude(tmp_path)]
    proc = subprocess.run([*command, "--settings", str(theirs), "-p", "hi"], env=env, check=False)
    assert proc.returncode == 0
    given = json.loads(dump.read_text())
    assert given["argv"][1] == "--settings" and given["argv"][3:] == ["-p", "hi"]
    settings = given["settings"]
    assert settings["x"] == 1 and settings["hooks"]["Stop"][0] == mine["hooks"]["Stop"][0]
    ours = settings["hooks"]["Stop"][1]["hooks"][0]
    assert ours["type"] == "command" and ours["async"] is False  # -p: the turn's end waits
    assert sorted(settings["hooks"]) == sorted(HOOK_EVENTS)
    # claude's parting hint lists the arguments the person gave, not our --settings FILE.
    assert given["env"][RESUME_HINT_FLAGS_ENV] == f"--settings {theirs} -p hi"


def test_the_resume_hint_gets_the_persons_arguments_not_ours(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    script = [{"do": "dump", "path": str(dump)}]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    env.update(FAKE_CLAUDE_SCRIPT=json.dumps(script), CLAUDE_CONFIG_DIR=str(tmp_path / "config"))
    command = [sys.executable, "-m", "codex_presence", "claude", "--", fake_claude(tmp_path)]
    mode = ["--permission-mode", "default"]
    assert subprocess.run([*command, *mode], env=env, check=False).returncode == 0
    given = json.loads(dump.read_text())
    assert given["argv"][1] == "--settings" and given["argv"][3:] == mode
    assert given["env"][RESUME_HINT_FLAGS_ENV] == "--permission-mode default"
    # A choice of the environment's own (a relauncher around us) stands.
    env[RESUME_HINT_FLAGS_ENV] = "--model opus"
    assert subprocess.run([*command, *mode], env=env, check=False).returncode == 0
    assert json.loads(dump.read_text())["env"][RESUME_HINT_FLAGS_ENV] == "--model opus"


@pytest.mark.parametrize(
    ("args", "flags"),
    [
        ([], ""),
        (["--permission-mode", "default"], "--permission-mode default"),
        (["--model", "opus", "fix the bug"], "--model opus"),  # the prompt is no flag
        (["fix the bug"], ""),
        (["--append-system-prompt", "be brief", "--verbose"], ""),  # cannot be joined
        (["--model", ""], ""),
    ],
)
def test_resume_hint_flags(args: list[str], flags: str) -> None:
    assert resume_hint_flags(args) == flags


@pytest.mark.parametrize(
    ("given", "says"),
    [(["--settings"], "needs a file"), (["--settings=/nonexistent"], "No such file")],
)
def test_a_settings_that_cannot_be_read_is_a_usage_error(
    tmp_path: Path, given: list[str], says: str
) -> None:
    command = [sys.executable, "-m", "codex_presence", "claude", "--", fake_claude(tmp_path)]
    proc = subprocess.run([*command, *given], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and says in proc.stderr


# -- exit status, signals, lifetime -------------------------------------------------------------


@pytest.mark.parametrize(("step", "status"), [({"status": 3}, 3), ({"status": 0}, 0)])
def test_the_exit_status_is_claudes(tmp_path: Path, step: dict[str, Any], status: int) -> None:
    assert run_claude(tmp_path, [{"do": "exit", **step}]).returncode == status


def test_sigterm_is_forwarded_and_the_status_passes_through(tmp_path: Path) -> None:
    trapped, dump = tmp_path / "trapped", tmp_path / "dump.json"
    script = [
        {"do": "trap", "path": str(trapped)},
        {"do": "dump", "path": str(dump)},  # after the trap: once it exists, the trap is set
        {"do": "sleep", "seconds": 30},
    ]
    proc = run_claude(tmp_path, script, wait=False)
    eventually(dump.exists, within=60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(EXITS_WITHIN) == 143
    assert trapped.read_text() == "SIGTERM"


def test_a_signalled_claude_gives_128_plus_n(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    script = [{"do": "dump", "path": str(dump)}, {"do": "sleep", "seconds": 30}]
    proc = run_claude(tmp_path, script, wait=False)
    eventually(dump.exists, within=60)
    os.kill(_claude_pid(dump), signal.SIGKILL)
    assert proc.wait(EXITS_WITHIN) == 128 + 9


def _claude_pid(dump: Path) -> int:
    """The stand-in's pid, as it dumped it (the runner may have another child for a moment:
    a check it runs; CI saw two children)."""
    pid = json.loads(dump.read_text())["pid"]
    assert isinstance(pid, int)
    return pid


def test_claude_dies_when_the_command_is_sigkilled(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    script = [{"do": "dump", "path": str(dump)}, {"do": "sleep", "seconds": 60}]
    proc = run_claude(tmp_path, script, wait=False)
    eventually(dump.exists, within=60)
    child = _claude_pid(dump)
    proc.kill()
    proc.wait(EXITS_WITHIN)
    eventually(lambda: not alive(child), within=60)


def test_without_a_command_it_runs_claude_from_the_path(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    fake_claude(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    env.update(
        PATH=f"{tmp_path}{os.pathsep}{env.get('PATH', '')}",
        CLAUDE_CONFIG_DIR=str(tmp_path / "config"),
        FAKE_CLAUDE_SCRIPT=json.dumps([{"do": "dump", "path": str(dump)}]),
        FAKE_CLAUDE_TRANSCRIPT=str(tmp_path / "transcript.jsonl"),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "codex_presence", "claude"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=EXITS_WITHIN,
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(dump.read_text())["argv"]
    assert argv[1] == "--settings" and argv[3:] == []


def test_a_command_that_is_not_claude_and_fails_gets_a_hint(tmp_path: Path) -> None:
    """``sh --settings FILE -c true`` is not what the user meant: say where FILE went."""
    proc = subprocess.run(
        [sys.executable, "-m", "codex_presence", "claude", "--", "sh", "-c", "true"],
        env={**os.environ, "CLAUDE_CONFIG_DIR": str(tmp_path / "config")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=EXITS_WITHIN,
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        "sh exited with status 2; `--settings FILE` was put right after it, so it must take "
        'claude\'s arguments: run claude itself, or a script that passes "$@" on to claude'
    ) in proc.stderr


def test_a_claude_that_cannot_run_is_127(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "codex_presence", "claude", "--", str(tmp_path / "no-claude")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 127 and "cannot run" in proc.stderr


# -- reporting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spool", ["spool", "loopback"])
def test_hooks_reach_the_roster_and_the_recording_replays(
    tmp_path: Path, broker: RunningBroker, spool: str
) -> None:
    """Each hook's state reaches the roster: the stand-in goes on to the next hook only
    once the roster shows the last one's (decided by order: a second between hooks was
    not enough for a loaded machine's reporter, which reports the latest state only)."""
    watch = RosterWatch(broker, watcher="bob", member="alice")
    record, log = tmp_path / "session.jsonl", tmp_path / "presence.log"
    go_on = [tmp_path / f"go-on-{n}" for n in range(5)]
    script = [
        {"do": "await", "path": str(go_on[0])},  # subscribed first
        hook("UserPromptSubmit", prompt="go"),
        {"do": "await", "path": str(go_on[1])},
        hook("PreToolUse", tool_use_id="tu1", tool_name="Bash"),
        hook("PermissionRequest", tool_name="Bash"),
        {"do": "await", "path": str(go_on[2])},
        hook("PostToolUse", tool_use_id="tu1"),
        {"do": "summary"},
        {"do": "await", "path": str(go_on[3])},
        hook("Stop", background_tasks=[]),
        {"do": "await", "path": str(go_on[4])},
    ]
    options = [*reporting(broker, tmp_path), "--record", str(record), "-v", "--log-file", str(log)]
    env = {SPOOL_ENV: "0"} if spool == "loopback" else None
    proc = run_claude(tmp_path, script, *options, wait=False, env=env)
    watch.wait_connected(1)
    for go, shown in zip(go_on, ["working", "blocked", "working", None, None], strict=True):
        go.touch()
        watch.wait(shown)
    assert proc.wait(EXITS_WITHIN) == 0
    watch.wait_connected(0)
    assert watch.sequence() == [None, "working", "blocked", "working", None]
    rows = timeline(read_relevant_entries(record.read_bytes()))
    assert [(r.state, r.cause) for r in rows] == [
        ("working", "UserPromptSubmit"),
        ("blocked", "PermissionRequest"),
        ("working", "PostToolUse"),
        ("idle", "Stop"),
    ]
    logged = log.read_text()
    assert token_of("alice") not in logged and "/hook" not in logged  # no token, no URL
    recorded = record.read_text()
    # the transcript's stop_hook_summary, written just before the Stop hook that ends the
    # following of the transcript (read at the end, then), is in the recording; it names
    # the poster (spooled: no URL at all), or its URL, recorded without the secret
    summaries = [
        entry
        for entry in map(json.loads, recorded.splitlines())
        if entry.get("from") == "transcript" and entry["msg"].get("subtype") == "stop_hook_summary"
    ]
    assert len(summaries) == 1, recorded
    urls = re.findall(r"127\.0\.0\.1:\d+/([^/\"]+)/hook", recorded)
    assert urls == ([] if spool == "spool" else ["REDACTED"])
    assert said(tmp_path) == ""  # everything went to the log file


def test_the_end_of_claude_mid_turn_reports_idle(tmp_path: Path, broker: RunningBroker) -> None:
    watch = RosterWatch(broker, watcher="bob", member="alice")
    go_on, end = tmp_path / "go-on", tmp_path / "end"
    script = [
        {"do": "await", "path": str(go_on)},  # subscribed first
        hook("UserPromptSubmit"),
        {"do": "await", "path": str(end)},  # the roster shows the turn first
    ]
    proc = run_claude(tmp_path, script, *reporting(broker, tmp_path), "-q", wait=False)
    watch.wait_connected(1)
    go_on.touch()
    watch.wait("working")
    end.touch()
    assert proc.wait(EXITS_WITHIN) == 0
    watch.wait_connected(0)
    assert watch.sequence() == [None, "working", None]


def test_every_spooled_hook_is_recorded_in_claudes_order_the_last_one_included(
    tmp_path: Path,
) -> None:
    """Spooled hooks are read when the kernel says their file was closed, in that order;
    claude's last (SessionEnd, which it waits for) is written just before it exits, and
    what is left in the spool then is read before the session ends (``HookSpool.drain``,
    checked alone in ``tests/test_hook_spool.py``)."""
    record = tmp_path / "session.jsonl"
    script = [hook("UserPromptSubmit"), hook("Stop"), hook("SessionEnd", reason="other")]
    proc = run_claude(tmp_path, script, "-q", "--record", str(record))
    assert proc.returncode == 0, said(tmp_path)
    events = [
        entry["msg"]["hook_event_name"]
        for entry in map(json.loads, record.read_text().splitlines())
        if entry.get("from") == "hook"
    ]
    assert events == ["UserPromptSubmit", "Stop", "SessionEnd"]


def test_no_trace_reports_no_activity_and_installs_no_hooks(
    tmp_path: Path, broker: RunningBroker
) -> None:
    watch = RosterWatch(broker, watcher="bob", member="alice")
    dump = tmp_path / "dump.json"
    go_on = tmp_path / "go-on"
    script = [{"do": "dump", "path": str(dump)}, {"do": "await", "path": str(go_on)}]
    proc = run_claude(tmp_path, script, *reporting(broker, tmp_path), "--no-trace", wait=False)
    watch.wait_connected(1)  # connection presence, as ever (claude runs until it is seen)
    go_on.touch()
    assert proc.wait(EXITS_WITHIN) == 0
    watch.wait_connected(0)
    assert watch.sequence() == [None]
    given = json.loads(dump.read_text())
    assert given["argv"][1:] == []  # claude as given: no --settings
    assert RESUME_HINT_FLAGS_ENV not in given["env"]  # nor anything else of ours


# -- reading claude's files only while it can matter -----------------------------------------------


@pytest.mark.anyio
async def test_claudes_files_are_read_only_while_they_can_matter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the turn and the settling of claude's view, no poll at all: idle is free. The
    mechanism, not a time: every poll is made while the mapping wants to follow, and it
    stops wanting once claude's idle view is adopted (long before claude exits)."""
    polls: list[tuple[float, bool]] = []
    original = ClaudeFiles.poll

    def counting(self: ClaudeFiles, now: float) -> Any:
        polls.append((time.monotonic(), session.mapping.wants_follow))
        return original(self, now)

    monkeypatch.setattr(ClaudeFiles, "poll", counting)
    marks: dict[str, float] = {}
    transcript = tmp_path / "transcript.jsonl"
    script = [
        hook("UserPromptSubmit"),
        {"do": "status", "status": "busy"},
        {"do": "transcript", "entry": {"type": "user", "message": {"content": "hi"}}},
        {"do": "sleep", "seconds": 0.5},
        hook("Stop", background_tasks=[]),
        {"do": "status", "status": "idle"},
        {"do": "sleep", "seconds": SETTLE + 3},
    ]
    monkeypatch.setenv("FAKE_CLAUDE_SCRIPT", json.dumps(script))
    monkeypatch.setenv("FAKE_CLAUDE_TRANSCRIPT", str(transcript))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))

    def observe(transition: Any) -> None:
        marks[transition.state.value] = time.monotonic()

    session = ClaudeSession(config=tmp_path / "config", observers=[observe])
    status = await session.run(
        [fake_claude(tmp_path)], env=claude_settings.child_environment(os.environ)
    )
    assert status == 0 and "idle" in marks
    while_working = [t for t, _ in polls if marks["working"] <= t <= marks["idle"]]
    assert while_working, "the files were not read during the turn"
    assert all(wanted for _, wanted in polls), "a poll while nothing could change"
    # claude's idle view was adopted before it exited (the end alone adopts nothing): from
    # then on, the mapping wanted nothing read, so nothing was.
    assert session.mapping.stats.adopted >= 1 and not session.mapping.wants_follow


async def run_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: list[dict[str, Any]]
) -> tuple[int, list[tuple[str, str]]]:
    """The session in this process around the stand-in playing ``script``: its status and
    the (state, cause) transitions it delivered."""
    monkeypatch.setenv("FAKE_CLAUDE_SCRIPT", json.dumps(script))
    monkeypatch.setenv("FAKE_CLAUDE_TRANSCRIPT", str(tmp_path / "transcript.jsonl"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    seen: list[tuple[str, str]] = []
    session = ClaudeSession(
        config=tmp_path / "config", observers=[lambda t: seen.append((t.state.value, t.cause))]
    )
    status = await session.run(
        [fake_claude(tmp_path)], env=claude_settings.child_environment(os.environ)
    )
    return status, seen


@pytest.mark.anyio
async def test_a_line_no_poll_read_is_recorded_at_the_end_and_not_fed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where hooks lead, the transcript is not read once the member is idle: a line claude
    wrote after its Stop was processed (as its stop_hook_summary can be, written just
    before the hook) was read by no poll, and the recording lacked it. It is read when
    claude has exited, recorded, and not fed (the live analysis never saw it). The
    stand-in writes it once the session has gone idle, so no poll can read it first."""
    record, idle = tmp_path / "session.jsonl", tmp_path / "idle"
    script = [
        hook("UserPromptSubmit"),
        hook("Stop", background_tasks=[]),
        {"do": "await", "path": str(idle)},
        {"do": "summary"},
    ]
    monkeypatch.setenv("FAKE_CLAUDE_SCRIPT", json.dumps(script))
    monkeypatch.setenv("FAKE_CLAUDE_TRANSCRIPT", str(tmp_path / "transcript.jsonl"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    seen: list[tuple[str, str]] = []

    def observe(transition: Any) -> None:
        seen.append((transition.state.value, transition.cause))
        if transition.state.value == "idle":
            idle.touch()

    session = ClaudeSession(config=tmp_path / "config", observers=[observe], record=record)
    status = await session.run(
        [fake_claude(tmp_path)], env=claude_settings.child_environment(os.environ)
    )
    assert status == 0
    assert seen == [("working", "UserPromptSubmit"), ("idle", "Stop")]
    lines = [json.loads(line) for line in record.read_text().splitlines()[1:]]
    assert [(e.get("from"), e.get("msg", {}).get("subtype")) for e in lines] == [
        ("hook", None),
        ("hook", None),
        ("transcript", "stop_hook_summary"),
        (None, None),  # the end line, still last
    ], lines
    assert "end" in lines[-1]
    assert session.mapping.stats.lines == 2  # the two hooks: the line was not fed
    rows = timeline(read_relevant_entries(record.read_bytes()))
    assert [(r.state, r.cause) for r in rows] == seen


@pytest.mark.anyio
async def test_a_transcript_path_that_cannot_be_read_costs_claude_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NUL in ``transcript_path`` made the poll raise, which ended the session and killed
    claude. Now the path is passed over and the hooks still tell the state."""
    script = [
        hook("UserPromptSubmit", transcript_path=str(tmp_path / "a\x00b")),
        {"do": "sleep", "seconds": 3 * claude_session.POLL_INTERVAL},  # polls happen
        hook("Stop", background_tasks=[]),
    ]
    status, seen = await run_session(tmp_path, monkeypatch, script)
    assert status == 0
    assert seen == [("working", "UserPromptSubmit"), ("idle", "Stop")]


@pytest.mark.anyio
async def test_a_bug_in_the_analysis_reports_idle_at_once_not_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The mapping raises mid-turn: the member shown working is reported idle there and
    then (cause "analysis failed"), not heartbeated until claude exits; claude goes on."""
    from codex_presence.core.claude.mapping import ClaudeMapping

    original = ClaudeMapping.feed

    def buggy(self: ClaudeMapping, source: Any, message: Any, t: float) -> Any:
        if source == "hook" and message.get("hook_event_name") == "PreToolUse":
            raise RuntimeError("a bug")
        return original(self, source, message, t)

    monkeypatch.setattr(ClaudeMapping, "feed", buggy)
    script = [
        hook("UserPromptSubmit"),
        hook("PreToolUse", tool_use_id="t1"),
        hook("PostToolUse", tool_use_id="t1"),
        hook("Stop", background_tasks=[]),
    ]
    status, seen = await run_session(tmp_path, monkeypatch, script)
    assert status == 0
    assert seen == [("working", "UserPromptSubmit"), ("idle", "analysis failed")]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].exc_info is not None


def test_a_killed_sessions_private_directory_is_swept_at_the_next_start(tmp_path: Path) -> None:
    """After SIGKILL, ``codex-presence-claude-*/`` (claude's settings, the hook URL and its
    secret) stayed in the temporary directory for good. The next start removes it: ours
    (same uid), its owner gone; never a live session's, nor another user's."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    dump = tmp_path / "dump.json"
    proc = run_claude(
        tmp_path,
        [{"do": "dump", "path": str(dump)}, {"do": "sleep", "seconds": 60}],
        env=env,
        wait=False,
    )
    eventually(dump.exists, within=60)
    child = _claude_pid(dump)
    proc.kill()
    proc.wait(EXITS_WITHIN)
    eventually(lambda: not alive(child), within=60)
    (killed,) = tmp.glob("codex-presence-claude-*")
    live = tmp / f"codex-presence-claude-{os.getpid()}-abcdefgh"  # a live session's
    live.mkdir()
    foreign = tmp / f"codex-presence-claude-{dead_pid()}-abcdefgh"  # another user's
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    dump.unlink()
    assert run_claude(tmp_path, [{"do": "dump", "path": str(dump)}], env=env).wait() == 0
    assert sorted(tmp.iterdir()) == sorted([live, foreign]), said(tmp_path)
    assert not killed.exists()


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("whose", ["theirs", "writable by others"])
def test_a_temporary_directory_another_user_owns_or_can_write_holds_nothing_of_ours(
    tmp_path: Path, whose: str
) -> None:
    """In a ``$TMPDIR`` another user owns (or may write, not sticky), they could swap our
    private directory between its creation and claude's next hook and have claude run
    their ``poster.sh``: code run as us. Such a base is passed over (the next of
    :func:`tempfile.gettempdir`'s bases serves) and nothing of ours goes into it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    if whose == "theirs":
        os.chown(tmp, OTHER_UID, OTHER_UID)
    else:
        tmp.chmod(0o777)
    dump = tmp_path / "dump.json"
    proc = run_claude(tmp_path, [{"do": "dump", "path": str(dump)}], env={"TMPDIR": str(tmp)})
    assert proc.wait() == 0, said(tmp_path)
    argv = json.loads(dump.read_text())["argv"]
    settings = Path(argv[argv.index("--settings") + 1])
    assert tmp not in settings.parents, settings
    assert settings.parent.name.startswith("codex-presence-claude-"), settings
    assert list(tmp.iterdir()) == []


# -- claude spawned before anything slow loads (issue 34) --------------------------------------

SPAWN_SPY = """\
import json, os, re, sys
import codex_presence.agent.claude.launch as launch

def spy(argv, **kwargs):  # claude's spawn: what is loaded, and whether the hooks' spool is
    settings = json.loads(open(argv[argv.index("--settings") + 1]).read())
    hooks = [h for matchers in settings["hooks"].values() for m in matchers for h in m["hooks"]]
    (poster,) = {h["command"].split()[-1] for h in hooks if h["type"] == "command"}
    (spool,) = re.findall(r">'([^']+)'/[$][$]", open(poster).read())
    assert os.stat(spool).st_mode & 0o777 == 0o700  # there: hooks wait in it until read
    sys.stdout.write(" ".join(sorted(sys.modules)))
    sys.stdout.flush()
    os._exit(0)

launch.spawn = spy
from codex_presence.cli.main import main
main(["claude", "--claude-hooks", sys.argv[2], "--", sys.argv[1]])
"""

SLOW_BEFORE_THE_SPAWN = {
    "anyio",
    "asyncio",
    "h11",
    "httpx",
    "codex_presence.agent.hooks.hook_server",
    "codex_presence.agent.claude.session",
    "codex_presence.agent.claude.files",
    "codex_presence.agent.session",
    "codex_presence.core.claude.mapping",
    "codex_presence.client.link",
    "subprocess",
}
"""What ``codex-presence claude`` must not load before claude's spawn (issue 34): the
session's heavy parts, which load behind claude's own start; nor subprocess, for the check
of bash's ``/dev/tcp``, which waits for bash's start: after the spawn, where curl is there to
stand in (it is, here)."""

HEAVY_BEFORE_THE_SPAWN = {
    "logging",
    "threading",
    "orjson",
    "dataclasses",
    "inspect",
    "typing",
    "pathlib",
    "urllib.parse",
    "shutil",
    "lzma",
    "uuid",
    "socket",
    "codex_presence.agent.hooks.listener",
    "ctypes",
}
"""Nor what claude's spawn does not need (issue 34's import diet): ~40 of ``-X importtime``'s
~60 ms before it, worth several times that on a loaded machine. logging (and its
threading) is set up once claude runs, nothing being said before; the settings are written
and package.json read with the standard library's json (orjson pulls uuid, platform,
datetime and dataclasses with inspect); the protocol has no dataclass (the mapping's are
the mapping's) and no typing; paths are os.path's (pathlib loads urllib.parse and
ipaddress) and the PATH search :func:`~codex_presence.agent.installed.which` (shutil
loads bz2 and lzma). Where the hooks are spooled (Linux), no loopback socket is opened
before the spawn, nor after it (its module with socket and selectors, the listen, the
thread that took its connections early: nothing of ours would come to it); the token is
blanked in our original environment just after the spawn (ctypes)."""


def _loaded_at_the_spawn(program: str, hooks: str, env: dict[str, str]) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", SPAWN_SPY, program, hooks],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    return set(out.stdout.split())


@pytest.mark.parametrize("hooks", ["auto", "all"])
def test_claude_is_spawned_before_anything_slow_is_loaded(tmp_path: Path, hooks: str) -> None:
    """Issue 34: what ``codex-presence claude`` loaded before claude's spawn (anyio, the hook
    server with h11, the mapping, the broker link's httpx) delayed claude's first paint one
    for one. At the spawn none of them is loaded, and the hook URL in claude's settings
    already accepts connections (the server serves them once loaded). The stand-in claude:
    a hook for every event, a poster script holding the URL."""
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    env["CODEX_PRESENCE_BROKER"] = "http://127.0.0.1:9"  # the link would load httpx
    env["CODEX_PRESENCE_TOKEN"] = "t"
    loaded = _loaded_at_the_spawn(fake_claude(tmp_path), hooks, env)
    assert "codex_presence.agent.claude.launch" in loaded  # the spy ran where the spawn is
    assert loaded & SLOW_BEFORE_THE_SPAWN == set()
    assert loaded & HEAVY_BEFORE_THE_SPAWN == set()


@pytest.mark.claude
def test_the_real_claude_is_spawned_before_anything_slow_is_loaded(
    tmp_path: Path, claude: Path
) -> None:
    """Issue 34, with the real claude 2.1.332 (its version read beside it: the session file
    leads, SessionStart and SessionEnd only): nothing slow loaded at its spawn either."""
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(tmp_path / "config")}
    env["PATH"] = f"{claude.parent}{os.pathsep}{env.get('PATH', '')}"
    loaded = _loaded_at_the_spawn("claude", "auto", env)
    assert "codex_presence.agent.claude.launch" in loaded
    assert "codex_presence.agent.installed" in loaded  # its package.json was read
    assert loaded & SLOW_BEFORE_THE_SPAWN == set()
    assert loaded & HEAVY_BEFORE_THE_SPAWN == set()


def _stand_in(tmp_path: Path, body: str) -> str:
    """A "claude" that runs ``body`` (sh), its own pid as claude's."""
    script = tmp_path / "claude"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("sign", ["session file", "exit"])
def test_the_session_loads_once_claude_has_started(tmp_path: Path, sign: str) -> None:
    """Issue 34: where the hooks are spooled nothing of claude's waits for the session,
    and its loading (a few hundred ms of CPU) took ~30 ms from claude's first paint on a
    2-core machine: it waits for claude's start, said by its session file (or a first hook
    in the spool), or for its exit, never for nothing (a stand-in that writes its file
    after a while; one that exits at once)."""
    from codex_presence.agent.claude.launch import launch_claude, release, until_claude_started

    config = tmp_path / "config"
    status = config / "sessions"
    body = (
        f"sleep 0.5; mkdir -p '{status}'; echo '{{}}' > '{status}'/$$.json; exec sleep 60"
        if sign == "session file"
        else "exit 3"
    )
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config)}
    env.pop(SPOOL_ENV, None)
    launch = launch_claude([_stand_in(tmp_path, body)], env=env, settings={})
    try:
        assert launch.process is not None and launch.private is not None
        assert (Path(launch.private) / SPOOL).is_dir()  # spooled: the wait applies
        until_claude_started(launch, env, at_most=60)
        if sign == "session file":
            assert (status / f"{launch.process.pid}.json").exists()
            assert launch.process.poll() is None
        else:
            assert launch.process.poll() == 3
    finally:
        if launch.process is not None:
            launch.process.kill()
            launch.process.wait(WAIT)
            launch.process.release()
        release(launch)


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/schedstat").exists(), reason="no scheduler statistics"
)
@pytest.mark.parametrize(
    ("observe", "args"),
    [(True, []), (False, []), (True, ["-p", "hi"])],
    ids=["spooled", "no-trace", "print mode"],
)
def test_the_session_loads_once_claude_s_start_is_done(
    tmp_path: Path, observe: bool, args: list[str]
) -> None:
    """Issue 34: claude's first hook and its session file come 0.2-0.3 s before its first
    paint, and the session's loading beside that last part of its start was most of what
    the runner added to it: the loading waits until claude's main thread is quiet as well
    (a stand-in that writes its file, then keeps a CPU busy until told to stop); with
    ``--no-trace`` too (no hooks: the loading came at once, beside all of claude's
    start); in print mode (no screen, the turn runs at once) as soon as it began."""
    import threading

    from codex_presence.agent.claude.launch import launch_claude, release, until_claude_started

    config = tmp_path / "config"
    status = config / "sessions"
    go = tmp_path / "go"
    body = (
        f"mkdir -p '{status}'; echo '{{}}' > '{status}'/$$.json;"
        f" while [ ! -e '{go}' ]; do :; done; exec sleep 60"
    )
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config)}
    env.pop(SPOOL_ENV, None)
    launch = launch_claude(
        [_stand_in(tmp_path, body), *args], env=env, settings={}, observe=observe
    )
    done = threading.Event()

    def wait() -> None:
        until_claude_started(launch, env, at_most=600, quiet_within=600)
        done.set()

    waiter = threading.Thread(target=wait, daemon=True)
    try:
        assert launch.process is not None
        assert (launch.private is not None) == observe
        file = status / f"{launch.process.pid}.json"
        eventually(file.exists, what="the stand-in's session file")
        waiter.start()
        if args:  # print mode: as soon as it began, busy or not
            assert done.wait(60), "never loaded in print mode"
            assert not go.exists()
        else:
            assert not done.wait(0.5), "loaded while claude was still busy"
            go.touch()
            assert done.wait(60), "never loaded after claude went quiet"
        assert launch.process.poll() is None
    finally:
        go.touch()
        waiter.join(60)
        if launch.process is not None:
            launch.process.kill()
            launch.process.wait(WAIT)
            launch.process.release()
        release(launch)
