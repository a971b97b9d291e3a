"""Which hooks ``codex-presence claude`` gives claude, and the session file leading where it
can (issue 27): an interactive claude of a version whose session status file we checked
gets only SessionStart and SessionEnd, so its spinner names none of ours; anything else
gets every hook, as before. Around the stand-in claude (``tests/support/fake_claude.py``),
laid out as npm installs the real one so that its version can be read beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codex_presence.agent.claude import settings as claude_settings
from codex_presence.agent.claude.files import ClaudeFiles
from codex_presence.agent.claude.session import ClaudeSession
from codex_presence.agent.claude.settings import claude_version
from codex_presence.agent.hooks.watch import DirectoryWatch
from codex_presence.core.claude.protocol import FILE_LED_EVENTS, FILE_LED_VERSIONS, HOOK_EVENTS
from tests.support.waiting import WAIT
from tests.test_claude_command import FAKE_CLAUDE, hook

KNOWN = sorted(FILE_LED_VERSIONS)[0]


def npm_claude(root: Path, version: str, *, name: str = "@anthropic-ai/claude-code") -> Path:
    """The stand-in, installed as npm installs claude: ``node_modules/.bin/claude``, a link
    to the package's ``bin/claude.exe``, its ``package.json`` saying ``version``."""
    package = root / "node_modules" / "@anthropic-ai" / "claude-code"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": name, "version": version}))
    exe = package / "bin" / "claude.exe"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_CLAUDE} "$@"\n')
    exe.chmod(0o755)
    link = root / "node_modules" / ".bin" / "claude"
    link.parent.mkdir()
    link.symlink_to(Path("..") / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe")
    return link


def native_claude(root: Path, version: str) -> Path:
    """The stand-in as the native installer lays claude out: ``versions/<version>``,
    linked from ``bin/claude``."""
    (root / "versions").mkdir(parents=True)
    exe = root / "versions" / version
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_CLAUDE} "$@"\n')
    exe.chmod(0o755)
    (root / "bin").mkdir()
    (root / "bin" / "claude").symlink_to(exe)
    return root / "bin" / "claude"


def wrapper_claude(root: Path, real: Path) -> Path:
    """A script of the person's own that runs claude."""
    root.mkdir(parents=True, exist_ok=True)
    script = root / "claude"
    script.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script


async def play_known_claude(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: list[dict[str, Any]],
    *,
    transcript: Path | None = None,
    observers: list[Callable[[Any], None]] | None = None,
) -> ClaudeSession:
    """A session of the stand-in, installed as npm installs a claude of a known version
    (so its file leads), playing ``script``; returned once it ended with status 0."""
    monkeypatch.setenv("FAKE_CLAUDE_SCRIPT", json.dumps(script))
    if transcript is not None:
        monkeypatch.setenv("FAKE_CLAUDE_TRANSCRIPT", str(transcript))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    session = ClaudeSession(config=tmp_path / "config", observers=observers or [])
    claude = npm_claude(tmp_path / "npm", KNOWN)
    status = await session.run([str(claude)], env=claude_settings.child_environment(os.environ))
    assert status == 0
    return session


# -- the version, read beside the binary ---------------------------------------------------------


def test_claudes_version_is_read_beside_its_binary_never_by_running_it(tmp_path: Path) -> None:
    env = {"PATH": os.defpath}
    npm = npm_claude(tmp_path / "npm", "2.1.332")
    assert claude_version(str(npm), env)[0] == "2.1.332"
    on_path = {"PATH": f"{npm.parent}:{os.defpath}"}
    assert claude_version("claude", on_path)[0] == "2.1.332"  # found as claude would be
    native = native_claude(tmp_path / "native", "2.2.0")
    assert claude_version(str(native), env)[0] == "2.2.0"
    # Nothing to read: a wrapper script, another package, no claude at all.
    assert claude_version(str(wrapper_claude(tmp_path / "wrap", npm)), env)[0] is None
    other = npm_claude(tmp_path / "other", "2.1.332", name="not-claude")
    assert claude_version(str(other), env)[0] is None
    assert claude_version("no-such-claude", env)[0] is None
    broken = npm_claude(tmp_path / "broken", "x")
    (broken.resolve().parent.parent / "package.json").write_text("[1, 2")
    assert claude_version(str(broken), env)[0] is None


# -- which hooks ---------------------------------------------------------------------------------


def given_settings(
    tmp_path: Path, claude: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str, int]:
    """Run ``codex-presence claude -v ARGS -- CLAUDE`` (the stand-in dumping what it was
    given); the settings claude got, what the command said, its exit status."""
    dump = tmp_path / "dump.json"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    full_env.update(
        CLAUDE_CONFIG_DIR=str(tmp_path / "config"),
        FAKE_CLAUDE_SCRIPT=json.dumps([{"do": "dump", "path": str(dump)}]),
        **(env or {}),
    )
    split = args.index("--") if "--" in args else len(args)
    options, claude_args = args[:split], args[split + 1 :]
    command = [sys.executable, "-m", "codex_presence", "claude", "-v", *options, "--"]
    done = subprocess.run(
        [*command, str(claude), *claude_args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    settings = json.loads(dump.read_text())["settings"] if dump.exists() else {}
    return settings, done.stderr, done.returncode


def test_a_known_interactive_claude_gets_only_the_hooks_outside_a_turn(tmp_path: Path) -> None:
    """No UserPromptSubmit, Pre/PostToolUse, PostToolBatch, Stop, PermissionRequest,
    Notification or Subagent* hook: each would be named in claude's spinner."""
    settings, said, status = given_settings(tmp_path, npm_claude(tmp_path, KNOWN))
    assert status == 0, said
    hooks = settings["hooks"]
    assert sorted(hooks) == sorted(FILE_LED_EVENTS) == ["SessionEnd", "SessionStart"]
    ((start,),) = [group["hooks"] for group in hooks["SessionStart"]]
    assert start["type"] == "command" and start["async"] is True  # claude runs no HTTP one
    ((end,),) = [group["hooks"] for group in hooks["SessionEnd"]]
    # claude waits for it at exit (no spinner there): not async, no URL to print
    assert end["type"] == "command" and end["async"] is False
    # Not after a compaction (it may come mid-turn), not at /clear (claude would name it).
    assert [group["matcher"] for group in hooks["SessionStart"]] == ["startup|resume|clear"]
    assert [group["matcher"] for group in hooks["SessionEnd"]] == ["prompt_input_exit|logout|other"]
    assert f"claude {KNOWN}, interactive: its session file leads" in said
    assert said.count("claude's hooks:") == 1  # said once


@pytest.mark.parametrize(
    ("why", "version", "args", "env", "words"),
    [
        ("another version", "9.9.9", (), {}, "claude 9.9.9's session file is not one checked"),
        ("asked for", KNOWN, ("--claude-hooks", "all"), {}, "--claude-hooks all"),
        ("from the env", KNOWN, (), {"CODEX_PRESENCE_CLAUDE_HOOKS": "all"}, "--claude-hooks all"),
        ("print mode", KNOWN, ("--", "-p", "hi"), {}, "print mode (-p)"),
    ],
)
def test_any_other_claude_gets_every_hook_as_before(
    tmp_path: Path,
    why: str,
    version: str,
    args: tuple[str, ...],
    env: dict[str, str],
    words: str,
) -> None:
    settings, said, status = given_settings(tmp_path, npm_claude(tmp_path, version), *args, env=env)
    assert status == 0, said
    assert sorted(settings["hooks"]) == sorted(HOOK_EVENTS), why
    assert f"claude's hooks: {words}" in said


def test_a_wrapper_script_gets_every_hook(tmp_path: Path) -> None:
    """Its claude's version cannot be read without running it: the hooks lead."""
    wrapper = wrapper_claude(tmp_path / "mine", npm_claude(tmp_path / "npm", KNOWN))
    settings, said, status = given_settings(tmp_path, wrapper)
    assert status == 0, said
    assert sorted(settings["hooks"]) == sorted(HOOK_EVENTS)
    assert "claude's version is not known beside" in said


def test_a_claude_not_on_path_is_said_in_one_line(tmp_path: Path) -> None:
    """Before: "claude's hooks: claude's version is not known beside no-such-claude: a hook
    for every event (claude's spinner may name some)" came first, as if the hooks were
    the trouble, then "cannot run no-such-claude"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}
    done = subprocess.run(
        [sys.executable, "-m", "codex_presence", "claude", "--", "no-such-claude"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 127
    assert done.stderr.splitlines() == [
        "codex-presence: not reporting to a broker (set --broker or CODEX_PRESENCE_BROKER)",
        "codex-presence: cannot run no-such-claude: No such file or directory",
    ]


@pytest.mark.parametrize("where", ["argv", "env"])
def test_a_claude_hooks_value_that_is_not_a_choice_is_a_usage_error(
    tmp_path: Path, where: str
) -> None:
    args = ("--claude-hooks", "none") if where == "argv" else ()
    env = {"CODEX_PRESENCE_CLAUDE_HOOKS": "none"} if where == "env" else {}
    _, said, status = given_settings(tmp_path, npm_claude(tmp_path, KNOWN), *args, env=env)
    assert status == 2
    assert "'none' is not one of auto, all" in said
    assert not (tmp_path / "dump.json").exists()  # claude never ran


# -- the file leading, live --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polled"])
async def test_the_session_file_leads_at_once_and_idle_reads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inotify: bool
) -> None:
    """Each status claude writes is the state as soon as it is read, with no hook in
    between and no settling time (SETTLE, where the hooks lead); the transcript says which
    background command runs and when it ends. And while nothing is written, nothing is
    read: the files are read when inotify says they changed, not polled (the stand-in
    sleeps 2 s at its prompt at the end: no read then). Without inotify, the same states,
    polled."""
    if not inotify:
        monkeypatch.setattr(DirectoryWatch, "open", classmethod(lambda cls: None))
    reads: list[float] = []
    original = ClaudeFiles.poll

    def counting(self: ClaudeFiles, now: float) -> Any:
        reads.append(time.monotonic())
        return original(self, now)

    monkeypatch.setattr(ClaudeFiles, "poll", counting)
    transcript = tmp_path / "transcript.jsonl"
    started = {"type": "user", "toolUseResult": {"backgroundTaskId": "bg1"}}
    ended = {"type": "user", "message": {"content": "<task-notification>\n<task-id>bg1</task-id>"}}

    # Each write waits until the runner has shown the transition it makes (the observer
    # below leaves a mark): decided by order, however loaded the machine (CI at load 10-14
    # saw none at all when the stand-in ran through its 0.3 s steps before the runner read).
    def shown(n: int) -> dict[str, Any]:
        return {"do": "await", "path": str(tmp_path / f"shown{n}")}

    script = [
        hook("SessionStart", source="startup"),
        {"do": "status", "status": "idle"},
        {"do": "status", "status": "busy"},
        shown(1),
        {"do": "status", "status": "waiting", "waitingFor": "permission prompt"},
        shown(2),
        {"do": "status", "status": "busy"},
        shown(3),
        {"do": "transcript", "entry": started},
        shown(4),
        {"do": "status", "status": "shell"},
        shown(5),
        {"do": "transcript", "entry": ended},
        shown(6),
        {"do": "status", "status": "busy"},
        shown(7),
        {"do": "status", "status": "idle"},
        shown(8),
        {"do": "sleep", "seconds": 2.0},
    ]
    seen: list[tuple[str, str, int]] = []
    at: list[float] = []

    def observe(t: Any) -> None:
        if not (t.changes_state or t.changes_background):
            return  # what waits, or where claude works: not this test's
        seen.append((t.state.value, t.cause, t.background))
        at.append(time.monotonic())
        (tmp_path / f"shown{len(seen)}").touch()

    session = await play_known_claude(
        tmp_path, monkeypatch, script, transcript=transcript, observers=[observe]
    )
    assert session.mapping.file_led
    head = [
        ("working", "session busy", 0),
        ("blocked", "session waiting", 0),
        ("working", "session busy", 0),
        ("working", "transcript background start", 1),
        ("idle", "session shell", 1),
    ]
    assert seen == [
        *head,
        ("idle", "transcript task-notification", 0),
        ("working", "session busy", 0),
        ("idle", "session idle", 0),
    ], seen
    # Nothing read in the 2 s the stand-in sat at its prompt (its last status to its end).
    last_idle = at[-1]
    at_the_prompt = [t for t in reads if last_idle + 0.2 < t < last_idle + 1.8]
    assert (at_the_prompt == []) if inotify else (len(at_the_prompt) > 5), reads


@pytest.mark.anyio
async def test_a_new_projects_transcript_is_read_as_soon_as_claude_makes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a directory claude has never run in, its transcript's directory does not exist
    when SessionStart names it; claude makes it with the first entry. A background command
    started then is told at once, not at claude's next status write (here: none before its
    end)."""
    projects = tmp_path / "config" / "projects"
    projects.mkdir(parents=True)
    transcript = projects / "-tmp-new-project" / "session.jsonl"
    started = {"type": "user", "toolUseResult": {"backgroundTaskId": "bg1"}}
    script = [
        hook("SessionStart", source="startup"),
        {"do": "status", "status": "idle"},
        {"do": "sleep", "seconds": 0.3},
        {"do": "status", "status": "busy"},
        {"do": "sleep", "seconds": 0.3},
        {"do": "transcript", "entry": started},
        {"do": "sleep", "seconds": 3.0},
    ]
    seen: list[tuple[str, int]] = []

    def observe(t: Any) -> None:
        if t.changes_state or t.changes_background:
            seen.append((t.cause, t.background))

    session = await play_known_claude(
        tmp_path, monkeypatch, script, transcript=transcript, observers=[observe]
    )
    assert session.mapping.file_led
    # Told while claude still ran (before the end of the process, which closes it).
    assert ("transcript background start", 1) in seen, seen
    assert seen.index(("transcript background start", 1)) < len(seen) - 1, seen


@pytest.mark.anyio
async def test_the_directory_watch_wakes_on_a_write_and_outlives_its_directory(
    tmp_path: Path,
) -> None:
    """A directory not there yet is not watched (the shell polls meanwhile); a write in a
    watched one ends the wait at once; one removed and made again is watched again."""
    watch = DirectoryWatch.open()
    assert watch is not None  # Linux: inotify
    try:
        sessions = tmp_path / "sessions"
        assert not watch.watching(sessions)
        sessions.mkdir()
        assert watch.watching(sessions)
        (sessions / "1.json").write_text("{}")
        assert await watch.wait(WAIT), "the write never woke the watch"
        for path in sessions.iterdir():
            path.unlink()
        sessions.rmdir()
        assert await watch.wait(WAIT), "the removal never woke the watch"
        sessions.mkdir()
        assert watch.watching(sessions)  # watched anew
        (sessions / "2.json").write_text("{}")
        assert await watch.wait(WAIT), "the write never woke the watch"
        assert not await watch.wait(0.01)  # nothing written: the bound ends it
    finally:
        watch.close()


def _overflow_and_remove(directory: Path) -> None:
    """More events in ``directory`` than the kernel queues, then its removal."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    a, b = directory / "a", directory / "b"
    for _ in range(limit // 2 + 100):  # two files in turn: the kernel merges no event
        a.write_bytes(b"1")
        b.write_bytes(b"1")
    for path in (a, b):
        path.unlink()
    directory.rmdir()  # its IN_IGNORED finds the queue full


@pytest.mark.anyio
async def test_a_directory_removed_while_the_queue_overflowed_is_watched_again(
    tmp_path: Path,
) -> None:
    """The kernel's queue of inotify events is bounded (``max_queued_events``, 16384 by
    default); past it, events are dropped and one ``IN_Q_OVERFLOW`` says so. A watched
    directory's removal dropped so is never heard of: the watch must not be taken for
    alive after an overflow, or the directory made again is never watched and the
    follower sleeps through every write to it."""
    watch = DirectoryWatch.open()
    assert watch is not None  # Linux: inotify
    try:
        sessions = tmp_path / "sessions"
        sessions.mkdir()
        assert watch.watching(sessions)
        _overflow_and_remove(sessions)
        await watch.wait(30)
        sessions.mkdir()
        assert watch.watching(sessions)
        (sessions / "1.json").write_text("{}")
        assert await watch.wait(WAIT), "the write never woke the watch"
    finally:
        watch.close()


@pytest.mark.anyio
async def test_a_session_file_never_written_is_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the file leads, the hooks are chosen before claude runs: a claude that never
    writes its file leaves the member idle, and the log says so, once, with the way out."""
    from codex_presence.agent.claude import session as claude_session

    monkeypatch.setattr(claude_session, "FILE_EXPECTED_WITHIN", 0.5)
    script = [hook("SessionStart", source="startup"), {"do": "sleep", "seconds": 1.5}]
    session = await play_known_claude(tmp_path, monkeypatch, script)
    assert session.mapping.file_led
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1 and "session file is not in" in said[0], said
    assert "--claude-hooks all" in said[0]
