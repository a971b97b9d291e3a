"""Following claude's transcript and session status file: only what is new, only whole
lines of the types that matter, the session file found by pid or by session id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from codex_presence.agent.claude import files as claude_files
from codex_presence.agent.claude.files import ClaudeFiles
from codex_presence.agent.claude.launch import config_dir
from tests.support.other_user import OTHER_UID
from tests.support.waiting import eventually


def entry(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, **fields}).encode() + b"\n"


def files(tmp_path: Path, pid: int = 100) -> tuple[ClaudeFiles, Path]:
    transcript = tmp_path / "projects" / "s1.jsonl"
    transcript.parent.mkdir(parents=True)
    follower = ClaudeFiles(config=tmp_path, pid=pid)
    return follower, transcript


def name(follower: ClaudeFiles, transcript: Path, session: str = "s1") -> None:
    follower.note_hook({"session_id": session, "transcript_path": str(transcript)})


def test_the_transcript_is_read_from_where_the_first_hook_found_it(tmp_path: Path) -> None:
    follower, transcript = files(tmp_path)
    transcript.write_bytes(entry("user", n=0))  # a resumed session's history
    name(follower, transcript)
    assert follower.poll(0) == []
    with transcript.open("ab") as out:
        out.write(entry("user", n=1) + entry("assistant", n=2))
    assert [e["n"] for _, e in follower.poll(0)] == [1, 2]
    assert follower.poll(0) == []


def test_a_transcript_created_after_the_first_hook_is_read_whole(tmp_path: Path) -> None:
    follower, transcript = files(tmp_path)
    name(follower, transcript)
    transcript.write_bytes(entry("user", n=1))
    assert follower.poll(0) == [("transcript", {"type": "user", "n": 1})]


def test_only_whole_lines_of_the_kept_types(tmp_path: Path) -> None:
    follower, transcript = files(tmp_path)
    name(follower, transcript)
    line = entry("system", subtype="turn_duration")
    transcript.write_bytes(
        entry("api-request-shape", system="x" * 1000)
        + entry("attachment")
        + b"not json, no type\n"
        + line[:10]
    )
    assert follower.poll(0) == []
    with transcript.open("ab") as out:
        out.write(line[10:] + entry("queue-operation", operation="enqueue"))
    kinds = [e["type"] for _, e in follower.poll(0)]
    assert kinds == ["system", "queue-operation"]


def test_an_overlong_line_is_skipped_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claude_files, "MAX_LINE", 100)
    follower, transcript = files(tmp_path)
    name(follower, transcript)
    transcript.write_bytes(b'{"type":"user","big":"' + b"x" * 150)
    assert follower.poll(0) == []
    with transcript.open("ab") as out:
        out.write(b"x" * 50 + b'"}\n' + entry("user", n=2))
    assert [e.get("n") for _, e in follower.poll(0)] == [2]


def test_the_rest_of_the_transcript_is_read_to_its_end_past_a_polls_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At claude's exit, what no poll read: every chunk to the file's end (a poll reads one),
    bounded all the same; a line in progress is not a line."""
    monkeypatch.setattr(claude_files, "MAX_CHUNK", 100)
    follower, transcript = files(tmp_path)
    name(follower, transcript)
    transcript.write_bytes(b"".join(entry("user", n=n, pad="x" * 40) for n in range(5)))
    assert [e["n"] for _, e in follower.poll(0)] == [0]  # one chunk's whole line
    with transcript.open("ab") as out:
        out.write(entry("system", subtype="stop_hook_summary") + b'{"type":"user"')
    rest = follower.rest_of_transcript()
    assert [e.get("n", e.get("subtype")) for e in rest] == [1, 2, 3, 4, "stop_hook_summary"]
    assert follower.rest_of_transcript() == []
    monkeypatch.setattr(claude_files, "MAX_REST", 100)
    with transcript.open("ab") as out:
        out.write(b"}\n" + b"".join(entry("user", n=n, pad="x" * 40) for n in range(5, 9)))
    assert [e.get("n") for e in follower.rest_of_transcript()] == [None, 5]  # two chunks


def test_a_new_transcript_path_is_followed_instead(tmp_path: Path) -> None:
    follower, transcript = files(tmp_path)
    name(follower, transcript)
    other = transcript.with_name("s2.jsonl")
    other.write_bytes(entry("user", n=0))
    name(follower, other, "s2")  # /clear: a new session and transcript
    with other.open("ab") as out:
        out.write(entry("user", n=1))
    transcript.write_bytes(entry("user", n=9))
    assert [e["n"] for _, e in follower.poll(0)] == [1]


def status_file(tmp_path: Path, pid: int, **content: Any) -> Path:
    path = tmp_path / "sessions" / f"{pid}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "sessionId": "s1", **content}))
    return path


def test_the_session_file_is_claudes_pid_and_new_content_only(tmp_path: Path) -> None:
    follower, _ = files(tmp_path, pid=100)
    path = status_file(tmp_path, 100, status="busy", statusUpdatedAt=1)
    assert follower.poll(0) == [("session", json.loads(path.read_text()))]
    assert follower.poll(0) == []
    path.write_text("{not json yet")  # caught mid-write
    assert follower.poll(0) == []
    status_file(tmp_path, 100, status="idle", statusUpdatedAt=2)
    assert [m["status"] for _, m in follower.poll(0)] == ["idle"]
    path.unlink()  # claude left
    assert follower.poll(0) == []


def test_a_rewrite_the_files_times_cannot_tell_apart_is_still_read(tmp_path: Path) -> None:
    """claude rewrites its file in place; ``busy`` and ``idle`` are the same length, and
    on a kernel whose file times are coarse (a jiffy, 4 ms at HZ=250: before Linux 6.13's
    multigrain times, or a file system without them) a turn over within a tick leaves
    size and mtime as they were. Where the file leads nothing else says idle: the
    member would stay working until claude next writes. (Times put back by hand here.)"""
    follower, _ = files(tmp_path, pid=100)
    path = status_file(tmp_path, 100, status="busy", statusUpdatedAt=1)
    before = path.stat()
    assert [m["status"] for _, m in follower.poll(0)] == ["busy"]
    status_file(tmp_path, 100, status="idle", statusUpdatedAt=2)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert [m["status"] for _, m in follower.poll(0)] == ["idle"]
    assert follower.poll(0) == []  # read again, perhaps, but handed on once


def _start_ticks(pid: int) -> str:
    """``pid``'s start time as /proc says it (clock ticks since boot): claude's ``procStart``."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2 :].split()[19]


def test_a_file_left_by_an_earlier_claude_of_the_same_pid_is_not_its(tmp_path: Path) -> None:
    """A claude killed (SIGKILL, a container stopped) leaves its ``<pid>.json`` behind, and
    a later claude can get the same pid (a container's pids start over at each run). Until
    the new one writes its own, the file says the dead one's state: ``busy``, even
    ``waiting``; where the file leads that would be adopted at once, and kept as long as
    the new claude does not write its own. claude tells its files apart by ``procStart``
    (the process's start time): so do we."""
    pid = os.getpid()  # a live process, the child's stand-in
    follower, _ = files(tmp_path, pid=pid)
    status_file(tmp_path, pid, status="busy", statusUpdatedAt=1, procStart="1")
    assert follower.poll(0) == []
    mine = _start_ticks(pid)
    status_file(tmp_path, pid, status="idle", statusUpdatedAt=2, procStart=mine)
    assert [m["status"] for _, m in follower.poll(0)] == ["idle"]
    # A file that does not say (an older claude's) is taken, as before.
    status_file(tmp_path, pid, status="busy", statusUpdatedAt=3)
    assert [m["status"] for _, m in follower.poll(0)] == ["busy"]


@contextmanager
def wrapper_tree() -> Iterator[tuple[int, list[int]]]:
    """A wrapper script's process (``sh``) and the two it started under it, as ``claude``
    behind a wrapper is: the wrapper's pid, and its children's once /proc lists them."""
    wrapper = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & wait"])
    try:
        children: list[int] = []

        def listed() -> bool:
            children[:] = claude_files.process_tree(wrapper.pid)
            return len(children) == 2

        eventually(listed, 60, "the wrapper's two children")
        yield wrapper.pid, list(children)
    finally:
        for pid in claude_files.process_tree(wrapper.pid):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        wrapper.kill()
        wrapper.wait()


def test_behind_a_wrapper_the_session_file_is_found_by_session_id(tmp_path: Path) -> None:
    with wrapper_tree() as (wrapper, (claude, _)):
        follower, transcript = files(tmp_path, pid=wrapper)  # the wrapper's pid, not claude's
        status_file(tmp_path, 555, status="busy", sessionId="someone-else")
        status_file(tmp_path, claude, status="busy")
        assert follower.poll(0) == []  # no session id known yet
        name(follower, transcript)
        assert [m["pid"] for _, m in follower.poll(0)] == [claude]
        status_file(tmp_path, claude, status="idle", statusUpdatedAt=3)
        assert [m["status"] for _, m in follower.poll(0.1)] == ["idle"]


def dead_pid() -> int:
    """The pid of a process that has ended (reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_only_a_file_of_a_process_under_the_child_is_found_by_session_id(tmp_path: Path) -> None:
    """A claude that died leaves ``<pid>.json`` behind, with the same session id after a
    ``--resume``; another process may write one too. Every file of ``sessions/`` was read
    on the event loop to find the session's (4.0 s at 100,000 files): the candidates are
    now the processes under the child, looked up by name, so a file of any other pid,
    however new, is never followed, and nothing else is read."""
    with wrapper_tree() as (wrapper, (claude, _)):
        follower, transcript = files(tmp_path, pid=wrapper)
        live = status_file(tmp_path, claude, status="busy")
        status_file(tmp_path, dead_pid(), status="idle")  # newer, of a claude that died
        status_file(tmp_path, os.getpid(), status="idle")  # newer, alive, not under it
        os.utime(live, ns=(1, 1_000_000_000))  # the one under the child is the older file
        name(follower, transcript)
        assert [m["pid"] for _, m in follower.poll(0)] == [claude]


def test_a_session_file_another_user_wrote_is_never_read(tmp_path: Path) -> None:
    """The file found by session id (and the one bearing claude's pid) was not checked for
    its owner: another user's, with the right name and id, was taken for claude's."""
    with wrapper_tree() as (wrapper, (claude, other)):
        follower, transcript = files(tmp_path, pid=wrapper)
        theirs = status_file(tmp_path, claude, status="busy")
        os.chown(theirs, OTHER_UID, OTHER_UID)
        at_pid = status_file(tmp_path, wrapper, status="busy", sessionId="other")
        os.chown(at_pid, OTHER_UID, OTHER_UID)
        name(follower, transcript)
        assert follower.poll(0) == []
        status_file(tmp_path, other, status="idle")  # ours, under the child: followed
        assert [m["pid"] for _, m in follower.poll(5)] == [other]


@pytest.mark.parametrize("kind", ["nul", "fifo"])
def test_a_transcript_path_that_cannot_be_one_is_passed_over_said_once(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A NUL in the path made the next poll raise (and end claude's session); a FIFO would
    block its open. Either is passed over, once said; the session file is still read."""
    follower, _ = files(tmp_path, pid=100)
    if kind == "nul":
        bad = str(tmp_path / "a\x00b")
    else:
        bad = str(tmp_path / "fifo")
        os.mkfifo(bad)
    status_file(tmp_path, 100, status="busy")
    for _ in range(2):
        follower.note_hook({"session_id": "s1", "transcript_path": bad})
        assert [source for source, _ in follower.poll(0)] in (["session"], [])
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "cannot be followed" in warnings[0].getMessage()


def test_the_config_dir_is_claudes() -> None:
    assert config_dir({"CLAUDE_CONFIG_DIR": "/x/conf", "HOME": "/h"}) == Path("/x/conf")
    assert config_dir({"HOME": "/h"}) == Path("/h/.claude")


@pytest.mark.parametrize("where", ["by-session-id", "claudes-pid"])
def test_a_fifo_among_the_session_files_never_blocks_a_poll(tmp_path: Path, where: str) -> None:
    """A FIFO ``999999.json`` in the sessions directory (another process's, or planted)
    blocked the open of the scan by session id (claude behind a wrapper), or of the status
    file itself when it bore claude's pid: the event loop stopped, every later hook timed
    out. Session files are opened non-blocking, regular files only."""
    import threading

    with wrapper_tree() as (wrapper, (first, claude)):
        follower, transcript = files(tmp_path, pid=wrapper)
        (tmp_path / "sessions").mkdir(exist_ok=True)
        fifo = tmp_path / "sessions" / f"{wrapper if where == 'claudes-pid' else first}.json"
        os.mkfifo(fifo)
        status_file(tmp_path, claude, status="busy")
        name(follower, transcript)
        polled: list[Any] = []
        poller = threading.Thread(target=lambda: polled.append(follower.poll(5)), daemon=True)
        poller.start()
        poller.join(3)
        blocked = poller.is_alive()
        if blocked:  # release the blocked open, so that the test run goes on
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            poller.join(3)
        assert not blocked, "a poll blocked on a FIFO in the sessions directory"
        assert [m["pid"] for _, m in polled[0]] == [claude]  # the real one, by its id


# -- the prompt history (issue 34) ---------------------------------------------------------


def prompt_line(session: str, display: str = "make a thing", stamp: int = 1) -> bytes:
    line = {"display": display, "pastedContents": {"1": "x"}, "timestamp": stamp}
    return json.dumps({**line, "project": "/w", "sessionId": session}).encode() + b"\n"


def history_files(tmp_path: Path, before: bytes = b"") -> tuple[ClaudeFiles, Path]:
    """A follower of the history as it stood at claude's spawn (``before`` in it)."""
    history = tmp_path / "history.jsonl"
    history.write_bytes(before)
    return ClaudeFiles(config=tmp_path, pid=100, history_from=len(before)), history


def test_only_this_sessions_new_prompts_are_handed_on_with_what_the_mapping_reads(
    tmp_path: Path,
) -> None:
    follower, history = history_files(tmp_path, prompt_line("s1", "from before the spawn"))
    follower.note_hook({"session_id": "s1"})
    with history.open("ab") as out:
        out.write(prompt_line("other") + prompt_line("s1", "ours", 7) + prompt_line("s1")[:20])
    assert follower.poll(0) == [("history", {"display": "ours", "timestamp": 7, "sessionId": "s1"})]
    with history.open("ab") as out:
        out.write(prompt_line("s1", stamp=8)[20:] + b"not json s1\n")
    assert [m["timestamp"] for _, m in follower.poll(0)] == [8]
    assert follower.poll(0) == []


def test_the_history_waits_until_the_session_is_known_from_a_hook_or_the_file(
    tmp_path: Path,
) -> None:
    """A prompt before the session's id is known is not lost: its line is read once the
    id is, and ``/clear``'s new id (the session file says it too) is followed."""
    follower, history = history_files(tmp_path)
    history.write_bytes(prompt_line("s1", stamp=1))
    assert follower.poll(0) == []
    status_file(tmp_path, 100, status="idle", sessionId="s1")
    assert follower.poll(0)[0] == (
        "history",
        {"display": "make a thing", "timestamp": 1, "sessionId": "s1"},
    )
    with history.open("ab") as out:
        out.write(prompt_line("s1", stamp=2) + prompt_line("s2", stamp=3))
    follower.note_hook({"session_id": "s2"})  # SessionStart after /clear
    assert [m["timestamp"] for _, m in follower.poll(0)] == [3]


def test_a_history_that_is_not_our_regular_file_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    follower, history = history_files(tmp_path)
    follower.note_hook({"session_id": "s1"})
    history.write_bytes(prompt_line("s1"))
    os.chown(history, OTHER_UID, OTHER_UID)
    assert follower.poll(0) == [] and follower.poll(0) == []
    assert caplog.text.count("not a regular file of ours") == 1
    history.unlink()
    os.mkfifo(history)  # nor would a FIFO block the open
    follower = ClaudeFiles(config=tmp_path, pid=100, history_from=0)
    follower.note_hook({"session_id": "s1"})
    assert follower.poll(0) == []


def test_without_a_start_the_history_is_not_read(tmp_path: Path) -> None:
    """Where the hooks lead, claude's prompt history is no news: not followed."""
    _, history = history_files(tmp_path)
    follower = ClaudeFiles(config=tmp_path, pid=100)
    follower.note_hook({"session_id": "s1"})
    history.write_bytes(prompt_line("s1"))
    assert follower.poll(0) == []
