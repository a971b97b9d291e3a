"""The hook spool (``agent/hooks/spool.py``) and its poster: a client's hooks written into
the runner's private directory, where no other local user can reach them (issue 35,
item 11), read when their writer closes them, whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from codex_presence.agent.claude.settings import with_our_hooks
from codex_presence.agent.hooks.listener import hook_url, listen_loopback, new_hook_path
from codex_presence.core.hooks.poster import SPOOL, script_command, spool_script
from tests.support.other_user import OTHER_UID

pytestmark = pytest.mark.anyio

WITHIN = 60.0
"""Seconds a wait for what must happen is given (a loaded machine is slow, never wrong)."""


@asynccontextmanager
async def reading(directory: Path) -> AsyncIterator[list[tuple[dict[str, Any], int | None]]]:
    """A spool reader on ``directory`` (made 0700 if absent); what it handed on."""
    from codex_presence.agent.hooks.spool import HookSpool

    await anyio.Path(directory).mkdir(mode=0o700, exist_ok=True)
    got: list[tuple[dict[str, Any], int | None]] = []
    spool = HookSpool(directory, lambda message, seq: got.append((message, seq)))
    async with anyio.create_task_group() as tg:
        await tg.start(spool.serve)
        yield got
        tg.cancel_scope.cancel()


async def until(done: Callable[[], bool], what: str) -> None:
    with anyio.move_on_after(WITHIN):
        while not done():
            await anyio.sleep(0.01)
        return
    pytest.fail(f"not within {WITHIN} s: {what}")


def run_hook(command: str, payload: bytes) -> tuple[int, int]:
    """Start a hook as claude does (``sh -c``, the payload on a socket as its stdin), to
    its end; its exit status and pid."""
    here, there = socket.socketpair()
    with here, there:
        proc = subprocess.Popen(["sh", "-c", command], stdin=there)
        here.sendall(payload)
        here.shutdown(socket.SHUT_WR)
        proc.wait(timeout=WITHIN)
    return proc.returncode, proc.pid


def spooled(message: dict[str, Any]) -> bytes:
    """A spool file's contents, as the poster writes them."""
    payload = orjson.dumps(message)
    return b"%d\n%s" % (len(payload), payload)


# -- another user's flood ----------------------------------------------------------------------


def _accept_queue(port: int) -> int | None:
    """How many connections wait in the accept queue of the listener on 127.0.0.1:``port``
    (``/proc/net/tcp``: a listener's rx_queue); None if nothing listens there."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        for line in table:
            fields = line.split()
            if fields[1] == local and fields[3] == "0A":
                return int(fields[4].split(":")[1], 16)
    return None


def _flood(port: int, spool: Path, out: int) -> int:
    """Fork another user (uid 65534) who tries to write a hook into ``spool``, then fills
    the accept queue of the listener on ``port`` and holds every connection open; it says
    what it did on the pipe ``out`` (``spool: denied|reached|absent``, then ``full: N``)."""
    import resource

    with open("/proc/sys/net/core/somaxconn") as limit:
        backlog = min(4096, int(limit.read()))  # listen_loopback asks for 4096
    pid = os.fork()
    if pid:
        return pid
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (backlog + 4096, backlog + 4096))
        os.setgroups([])
        os.setgid(OTHER_UID)
        os.setuid(OTHER_UID)
        try:
            with open(spool / "1.hook", "x") as forged:
                forged.write("2\n{}")
            said = b"spool: reached"
        except PermissionError:
            said = b"spool: denied"
        except FileNotFoundError:
            said = b"spool: absent"
        os.write(out, said + b"\n")
        held: list[socket.socket] = []
        while (_accept_queue(port) or 0) <= backlog:  # the kernel's "full": one past it
            for _ in range(64):
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", port))
                held.append(sock)
        os.write(out, b"full: %d\n" % len(held))
        while True:
            signal.pause()
    finally:
        os._exit(0)


def claudes_hook_command(private: Path, listener: socket.socket) -> str:
    """The command claude's settings run for each hook, as the runner writes them."""
    argv, _ = with_our_hooks(
        ["claude"],
        {},
        hook_url(listener, new_hook_path()),
        private=private,
        env={"PATH": os.environ["PATH"]},
        hooks="all",
        later=[],
    )
    settings = json.loads(Path(argv[2]).read_text())
    (command,) = {
        hook["command"]
        for groups in settings["hooks"].values()
        for group in groups
        for hook in group["hooks"]
        if hook["type"] == "command"
    }
    return str(command)


def deliver(command: str, payload: bytes) -> int | None:
    """Run a hook's command with ``payload`` on its stdin; its exit status, None if it
    had not ended after :data:`WITHIN` seconds (then it is killed)."""
    poster = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE)
    try:
        poster.communicate(payload, timeout=WITHIN)
    except subprocess.TimeoutExpired:
        poster.kill()
        poster.wait()
        return None
    return poster.returncode


async def test_another_users_flood_does_not_hold_up_the_users_hook(tmp_path: Path) -> None:
    """Issue 35, item 11: any local user can connect to a loopback port, and its accept
    queue is first come, first served; a flood filled it, and the user's hooks waited
    behind it (p50 0.7-1.0 s at load 14-16, one past claude's 2 s). Here another uid fills
    the queue of the runner's port to the brim and holds it there, while nothing serves it
    (as when the runner is loaded or slow): the hook command claude's settings run still
    delivers at once, and the hook is handled while the flood is still held, untouched.
    The spool it writes into is another user's to look at only: they cannot write there.
    (Before: the poster's connection waited behind the flood, its SYN dropped.)"""
    if os.getuid() != 0:
        pytest.fail("needs root, to run a process as another uid")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    listener = listen_loopback()
    port = listener.getsockname()[1]
    command = claudes_hook_command(private, listener)
    read, write = os.pipe()
    flooder = _flood(port, private / SPOOL, write)
    os.close(write)
    try:
        said = b""
        with anyio.fail_after(WITHIN):
            while b"full" not in said:
                said += await anyio.to_thread.run_sync(os.read, read, 1024)
        payload = orjson.dumps({"hook_event_name": "UserPromptSubmit", "prompt": "go"})
        status = await anyio.to_thread.run_sync(deliver, command, payload)
        if status is None:
            pytest.fail(f"the hook's poster still waits after {WITHIN} s behind {said!r}")
        assert status == 0
        async with reading(private / SPOOL) as got:
            await until(lambda: bool(got), "the user's hook handled")
            assert (_accept_queue(port) or 0) > 0  # the flood still held, never served
        assert [message for message, _ in got] == [orjson.loads(payload)]
        assert b"spool: denied" in said
    finally:
        os.kill(flooder, 9)
        await anyio.to_thread.run_sync(os.waitpid, flooder, 0)
        os.close(read)
        listener.close()


# -- the poster and the reader -----------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 300_000])
async def test_the_spool_poster_delivers_the_payload_whole_with_its_pid(
    tmp_path: Path, size: int
) -> None:
    """Multi-byte text, a large tool output, quotes and ``%``: whole, with bash's pid as
    its sequence number, and the poster exits 0 at once (nothing to wait for)."""
    bash, cat = shutil.which("bash"), shutil.which("cat")
    assert bash is not None and cat is not None
    spool = tmp_path / "spool"
    script = tmp_path / "poster.sh"
    script.write_text(spool_script(str(spool), cat=cat))
    payload = {
        "hook_event_name": "PostToolUse",
        "tool_response": "é ✓ 100% \\n 'q' $x " + "x" * size,
    }
    async with reading(spool) as got:
        status, pid = await anyio.to_thread.run_sync(
            run_hook, script_command(bash, str(script)), orjson.dumps(payload) + b"\n"
        )
        assert status == 0
        await until(lambda: bool(got), "the hook read")
    assert got == [(payload, pid)]
    assert list(spool.iterdir()) == []  # read, then removed


def test_the_spool_poster_takes_only_a_plain_directory() -> None:
    with pytest.raises(ValueError):
        spool_script("/tmp/x'; rm -rf ~;'", cat="/bin/cat")
    with pytest.raises(ValueError):
        spool_script("relative/spool", cat="/bin/cat")


async def test_hooks_spooled_before_the_reader_ran_are_read_at_its_start(tmp_path: Path) -> None:
    """claude's SessionStart comes while the runner loads: it waits in the spool."""
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    (spool / "41.hook").write_bytes(spooled({"hook_event_name": "SessionStart"}))
    async with reading(spool) as got:
        await until(lambda: bool(got), "the hook read")
    assert got == [({"hook_event_name": "SessionStart"}, 41)]


async def test_what_is_not_a_whole_hook_of_ours_is_dropped_and_never_ends_the_reader(
    tmp_path: Path,
) -> None:
    """A poster killed mid-write (claude kills its async hooks at exit) leaves a file
    shorter than it says; a payload that is not a JSON object; a symlink (not followed);
    another name: none is handed on, and the next hook is."""
    spool = tmp_path / "spool"
    async with reading(spool) as got:
        (spool / "1.hook").write_bytes(b'99\n{"hook_event_name":"Stop"')  # cut short
        (spool / "2.hook").write_bytes(b"2\n[]")
        (spool / "3.hook").symlink_to(tmp_path / "elsewhere")
        (spool / "notes.txt").write_bytes(b"2\n{}")
        (spool / "4.hook").write_bytes(spooled({"hook_event_name": "Stop"}))
        # The kernel says the files were closed in that order: the others were read first.
        await until(lambda: bool(got), "the whole hook read")
    assert got == [({"hook_event_name": "Stop"}, 4)]
    assert sorted(p.name for p in spool.iterdir()) == ["3.hook", "notes.txt"]  # left alone


async def test_a_drain_reads_what_is_whole_at_once(tmp_path: Path) -> None:
    """When the client has exited, the runner reads what it waited for at its exit
    (SessionEnd) before the session ends, without waiting for the kernel's word."""
    from codex_presence.agent.hooks.spool import HookSpool

    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    got: list[tuple[dict[str, Any], int | None]] = []
    reader = HookSpool(spool, lambda message, seq: got.append((message, seq)))
    (spool / "7.hook").write_bytes(spooled({"hook_event_name": "SessionEnd"}))
    reader.drain()
    assert got == [({"hook_event_name": "SessionEnd"}, 7)]
