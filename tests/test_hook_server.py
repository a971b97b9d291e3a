"""The loopback hook server: ``200 {}`` at once for the session's secret path, a precise 4xx
with a reason for anything else, bounded heads and bodies, keep-alive as claude uses it."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import orjson
import pytest

from codex_presence.agent.hooks.hook_server import HookServer
from codex_presence.core.hooks.poster import HOOK_SECRET_HEADER, poster_script, script_command
from tests.support.waiting import WAIT

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[tuple[HookServer, list[dict[str, Any]]]]:
    got: list[dict[str, Any]] = []
    server = HookServer(lambda message, seq: got.append(message), **options)
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        yield server, got
        tg.cancel_scope.cancel()


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(trust_env=False, timeout=5)


async def raw_exchange(port: int, data: bytes, *, read: bool = True) -> bytes:
    """Send ``data`` on a fresh connection; everything the server says until it closes."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(data)
        answer = b""
        with anyio.fail_after(WAIT):
            while read:
                try:
                    answer += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
        return answer


async def test_a_hook_is_answered_200_empty_object_then_handed_on() -> None:
    async with serving() as (server, got), client() as http:
        payload = {"hook_event_name": "Stop", "session_id": "s"}
        answer = await http.post(server.url, json=payload)
        assert answer.status_code == 200
        assert answer.content == b"{}" and answer.headers["content-type"] == "application/json"
        assert got == [payload]


async def test_a_delivery_says_its_sequence_number_in_a_header() -> None:
    seen: list[tuple[dict[str, Any], int | None]] = []
    server = HookServer(lambda message, seq: seen.append((message, seq)))
    async with anyio.create_task_group() as tg, client() as http:
        await tg.start(server.serve)
        for header in ("4242", "not a number", "9" * 40):
            await http.post(server.url, json={"n": 1}, headers={"x-hook-seq": header})
        await http.post(server.url, json={"n": 2})
        tg.cancel_scope.cancel()
    assert seen == [({"n": 1}, 4242), ({"n": 1}, None), ({"n": 1}, None), ({"n": 2}, None)]


async def test_the_url_is_loopback_with_a_fresh_secret() -> None:
    async with serving() as (a, _), serving() as (b, _):
        assert a.url.startswith("http://127.0.0.1:") and a.url.endswith("/hook")
        secret_a, secret_b = a.url.split("/")[3], b.url.split("/")[3]
        assert secret_a != secret_b and len(secret_a) >= 32


async def test_keep_alive_many_hooks_on_one_connection() -> None:
    async with serving() as (server, got), client() as http:
        for n in range(20):
            assert (await http.post(server.url, json={"n": n})).status_code == 200
        assert [m["n"] for m in got] == list(range(20))
    # httpx reused one connection: the server never closed it between hooks.


async def test_a_wrong_secret_is_404_and_its_body_is_never_read() -> None:
    async with serving() as (server, got), client() as http:
        base, _, _ = server.url.rpartition("/")
        wrong = base.rsplit("/", 1)[0] + "/not-the-secret/hook"
        answer = await http.post(wrong, json={"hook_event_name": "Stop"})
        assert answer.status_code == 404
        assert orjson.loads(answer.content) == {"error": "no such hook"}
        assert got == [] and server.refused == 1
        # A huge declared body on a wrong path: answered from the head alone.
        head = b"POST /x/hook HTTP/1.1\r\nhost: a\r\ncontent-length: 1000000000\r\n\r\n"
        assert b" 404 " in await raw_exchange(server.port or 0, head)


async def test_the_secret_may_come_in_a_header_on_the_plain_hook_path() -> None:
    """claude's HTTP hooks: it prints a failing hook's URL, never its headers."""
    async with serving() as (server, got), client() as http:
        secret = server.url.split("/")[3]
        plain = f"http://127.0.0.1:{server.port}/hook"
        answer = await http.post(plain, json={"n": 1}, headers={HOOK_SECRET_HEADER: secret})
        assert answer.status_code == 200 and got == [{"n": 1}]
        # One character off (the secret is random: its last may already be "x").
        near = secret[:-1] + ("y" if secret.endswith("x") else "x")
        for headers in ({}, {HOOK_SECRET_HEADER: near}, {HOOK_SECRET_HEADER: ""}):
            assert (await http.post(plain, json={"n": 2}, headers=headers)).status_code == 404
        twice = (
            b"POST /hook HTTP/1.1\r\nhost: a\r\n%s: %s\r\n%s: %s\r\ncontent-length: 2\r\n\r\n{}"
            % (HOOK_SECRET_HEADER.encode(), secret.encode(), HOOK_SECRET_HEADER.encode(), b"x")
        )
        assert b" 404 " in await raw_exchange(server.port or 0, twice)
        assert got == [{"n": 1}]


async def test_a_method_other_than_post_is_405() -> None:
    async with serving() as (server, got), client() as http:
        answer = await http.get(server.url)
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        assert got == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"not json", "the body is not JSON"), (b"[1, 2]", "the body is not a JSON object")],
)
async def test_a_body_that_is_not_a_json_object_is_400(body: bytes, reason: str) -> None:
    async with serving() as (server, got), client() as http:
        answer = await http.post(server.url, content=body)
        assert answer.status_code == 400 and orjson.loads(answer.content)["error"] == reason
        assert got == []


async def test_bodies_over_the_cap_are_413_declared_or_streamed() -> None:
    async with serving(max_body=1000) as (server, got), client() as http:
        answer = await http.post(server.url, content=b"x" * 1001)
        assert answer.status_code == 413

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(100):
                yield b"y" * 100

        answer = await http.post(server.url, content=chunks())  # chunked: no length
        assert answer.status_code == 413
        assert got == [] and server.refused == 2


async def test_a_head_over_64_kib_is_431() -> None:
    async with serving() as (server, _):
        head = b"POST / HTTP/1.1\r\nhost: a\r\nx-big: " + b"a" * 200_000 + b"\r\n\r\n"
        assert b" 431 " in await raw_exchange(server.port or 0, head)


async def test_a_request_must_arrive_whole_within_the_timeout() -> None:
    async with serving(request_timeout=0.3) as (server, got):
        path = server.url.split(":", 2)[2].split("/", 1)[1]
        start = anyio.current_time()
        answer = await raw_exchange(
            server.port or 0, b"POST /" + path.encode() + b" HTTP/1.1\r\ncontent-length: 10\r\n"
        )
        # The 0.3 s given, not the 10 s default: 5 s lies between (16x the one, half the
        # other), so only a stall of over 4.7 s could mistake them.
        assert b" 408 " in answer and anyio.current_time() - start < 5
        assert got == []


def hook_request(server: HookServer, body: bytes = b"{}", *, whole: bool = True) -> bytes:
    """A hook POST on the wire (its head and, if ``whole``, its body)."""
    path = server.url.split("/", 3)[3].encode()
    head = b"POST /%s HTTP/1.1\r\nhost: a\r\ncontent-length: %d\r\n\r\n" % (path, len(body))
    return head + body if whole else head


async def closed_by_the_server(stream: anyio.abc.ByteStream) -> bool:
    """Whether the server ends ``stream`` (within a generous WAIT) without a word."""
    with anyio.fail_after(WAIT):
        try:
            return await stream.receive() == b""
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return True


async def test_idle_connections_never_keep_claude_out() -> None:
    """Any local user can find the port: connections that never send a byte (or never the
    secret) used to fill the cap and silence claude's hooks for the session. Now a new
    connection takes the place of the oldest of them."""
    async with serving(max_connections=4) as (server, got):
        port = server.port or 0
        idle = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(4)]
        trickling = await anyio.connect_tcp("127.0.0.1", port)
        await trickling.send(b"POST /guess")  # a head that never ends, without the secret
        await anyio.sleep(0.1)
        async with client() as http:
            for n in range(3):
                assert (await http.post(server.url, json={"n": n})).status_code == 200
        assert [m["n"] for m in got] == [0, 1, 2]
        assert await closed_by_the_server(idle[0]) and await closed_by_the_server(idle[1])
        for stream in [*idle, trickling]:
            await stream.aclose()


async def test_a_connection_that_showed_the_secret_is_the_last_to_go() -> None:
    """claude's keep-alive connection, idle between hooks, outlives any number of
    strangers; when every connection is in the middle of one of claude's requests, a new
    one is closed at once."""
    async with serving(max_connections=2) as (server, got):
        port = server.port or 0
        async with await anyio.connect_tcp("127.0.0.1", port) as claude:
            await claude.send(hook_request(server, b'{"n": 1}'))
            assert b" 200 " in await claude.receive()
            for _ in range(5):
                stranger = await anyio.connect_tcp("127.0.0.1", port)
                await anyio.sleep(0.05)
                await stranger.aclose()
            await claude.send(hook_request(server, b'{"n": 2}'))  # the same connection
            assert b" 200 " in await claude.receive()
            # Both connections mid-request (head sent, body pending): nothing to close.
            async with await anyio.connect_tcp("127.0.0.1", port) as other:
                await other.send(hook_request(server, b'{"n": 3}', whole=False))
                await claude.send(hook_request(server, b'{"n": 4}', whole=False))
                await anyio.sleep(0.1)
                assert await raw_exchange(port, b"") == b""  # closed at once, nothing said
        assert got == [{"n": 1}, {"n": 2}]


async def test_a_new_connection_must_begin_a_request_within_the_timeout() -> None:
    async with (
        serving(request_timeout=0.3) as (server, _),
        await anyio.connect_tcp("127.0.0.1", server.port or 0) as silent,
    ):
        assert await closed_by_the_server(silent)


async def test_a_client_that_vanishes_mid_request_never_ends_the_server() -> None:
    async with serving() as (server, got), client() as http:
        path = server.url.split("/", 3)[3].encode()
        for data in (b"POST /", b"POST /" + path + b" HTTP/1.1\r\ncontent-length: 99\r\n\r\n{"):
            await raw_exchange(server.port or 0, data, read=False)
        assert (await http.post(server.url, json={"ok": 1})).status_code == 200
        assert got == [{"ok": 1}]


async def test_a_failing_handler_never_costs_claude_its_answer() -> None:
    def broken(message: dict[str, Any], seq: int | None) -> None:
        raise RuntimeError("a bug behind the server")

    server = HookServer(broken)
    async with anyio.create_task_group() as tg, client() as http:
        await tg.start(server.serve)
        for _ in range(2):
            assert (await http.post(server.url, json={"a": 1})).status_code == 200
        tg.cancel_scope.cancel()


async def test_redact_blanks_out_the_secret() -> None:
    async with serving() as (server, _):
        line = b'{"hookInfos":[{"command":"' + server.url.encode() + b'"}]}'
        redacted = server.redact(line)
        assert server.url.split("/")[3].encode() not in redacted
        assert b"/REDACTED/hook" in redacted
        assert server.redact(b"nothing to hide") == b"nothing to hide"


async def test_the_url_is_unknown_before_listening() -> None:
    with pytest.raises(RuntimeError):
        _ = HookServer(lambda m, s: None).url


# -- another local user ------------------------------------------------------------------

OTHER_UID = 65534


def as_other_user(port: int, job: str, out: int) -> int:
    """Fork a process running as another uid (we are root in CI) that does ``job`` against
    the hook server on ``port`` and writes what it saw to the pipe ``out``; its pid."""
    import os
    import socket

    pid = os.fork()
    if pid:
        return pid
    try:
        os.setgroups([])
        os.setgid(OTHER_UID)
        os.setuid(OTHER_UID)
        if job == "wrong-secret":
            sock = socket.socket()
            sock.settimeout(5)
            try:
                sock.connect(("127.0.0.1", port))
                sock.sendall(b"POST /guess/hook HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
                answer = sock.recv(4096)
            except (ConnectionResetError, BrokenPipeError):  # reset before or after sending
                answer = b"reset"
            except OSError as exc:  # said, so that the test shows what happened
                answer = f"error: {exc!r}".encode()
            os.write(out, answer or b"closed")
        else:  # hold connections, a new one as soon as one is closed
            held: list[socket.socket] = []
            while True:
                sock = socket.socket()
                try:
                    sock.connect(("127.0.0.1", port))
                except OSError:
                    sock.close()
                    continue
                held.append(sock)
                if len(held) > 100:
                    held.pop(0).close()
                    os.write(out, b".")
    finally:
        os._exit(0)


async def test_another_users_connection_is_reset_unread() -> None:
    """Another uid's connection (issue 24: 2-4 such flooders took claude's hooks from
    1.7 ms to over a second) is reset at once: no answer, nothing of it read or parsed."""
    import os

    if os.getuid() != 0:
        pytest.fail("needs root, to run a process as another uid")
    async with serving() as (server, got):
        assert server.port is not None
        read, write = os.pipe()
        pid = as_other_user(server.port, "wrong-secret", write)
        os.close(write)
        with anyio.fail_after(WAIT):
            await anyio.to_thread.run_sync(os.waitpid, pid, 0)
        seen = os.read(read, 4096)
        os.close(read)
        assert seen in (b"reset", b"closed")  # not a 404: its request was never read
        assert server.refused == 0 and got == []


async def test_a_connection_closed_before_it_is_read_is_not_called_another_users(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer gone before its connection is accepted (a port probe) has no uid to tell:
    the log says it closed, not that another user came."""
    caplog.set_level(logging.DEBUG, "codex_presence.hooks")
    async with serving() as (server, got):
        assert server.port is not None
        probe = socket.create_connection(("127.0.0.1", server.port))
        probe.close()  # before the server's loop runs again: still in the backlog
        async with client() as http:
            assert (await http.post(server.url, content=b"{}")).status_code == 200
    said = [r.getMessage() for r in caplog.records if "refused connections" in r.getMessage()]
    assert said == ["hook server: refused connections (closed before it was read: 1)"]
    assert len(got) == 1


async def test_a_hook_whose_poster_gave_up_before_it_was_accepted_is_still_handed_on() -> None:
    """Behind another user's flood, a poster's connection can wait in the backlog past
    claude's hook timeout: the poster, killed or giving up, closes a connection that holds
    its whole hook. Its peer is gone (no uid to tell), and it was reset unread: the hook was
    lost. Its first bytes are the secret's request line: it is read and handed on; a gone
    peer's connection without it is still reset unread."""
    async with serving() as (server, got):
        assert server.port is not None
        body = b'{"hook_event_name":"Stop"}'
        path = server.url.split(str(server.port), 1)[1]
        request = (
            f"POST {path} HTTP/1.0\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        poster = socket.create_connection(("127.0.0.1", server.port))
        poster.sendall(request)
        poster.close()  # before the server's loop runs again: still in the backlog
        stranger = socket.create_connection(("127.0.0.1", server.port))
        stranger.sendall(b"POST /guess/hook HTTP/1.0\r\ncontent-length: 2\r\n\r\n{}")
        stranger.close()
        async with client() as http:  # one more hook: the two before were looked at
            assert (await http.post(server.url, content=b"{}")).status_code == 200
        with anyio.fail_after(60):
            while len(got) < 2:
                await anyio.sleep(0.01)
    assert sorted(map(len, got)) == [0, 1] and {"hook_event_name": "Stop"} in got
    assert server.refused == 0  # the stranger's request was never read


async def test_the_users_hooks_are_answered_while_other_users_flood() -> None:
    """Four processes of another uid connecting and holding connections as fast as they
    can: each of the user's hooks on a new connection is answered, and none of the
    flooders' connections takes a place in the server (each was closed on arrival)."""
    import os
    import signal

    if os.getuid() != 0:
        pytest.fail("needs root, to run a process as another uid")
    async with serving() as (server, got), client() as http:
        assert server.port is not None
        read, write = os.pipe()
        os.set_blocking(read, False)
        flooders = [as_other_user(server.port, "hold", write) for _ in range(4)]
        os.close(write)
        try:
            closed = b""
            with anyio.fail_after(WAIT):
                while len(closed) < 400:  # the flooders are at it
                    await anyio.sleep(0.05)
                    with suppress(BlockingIOError):
                        closed += os.read(read, 65536)
                for n in range(20):
                    answer = await http.post(
                        server.url, json={"n": n}, headers={"connection": "close"}
                    )
                    assert answer.status_code == 200
                    assert len(server._clients) <= 1  # only ours, never a flooder's
        finally:
            for pid in flooders:
                os.kill(pid, signal.SIGKILL)
                await anyio.to_thread.run_sync(os.waitpid, pid, 0)
            os.close(read)
        assert [m["n"] for m in got] == list(range(20))


async def test_a_flood_of_refused_connections_is_not_a_flood_of_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With ``-v``, each refused connection wrote a line (29.5k lines in 45 s under the
    review's flood): they are counted, and said at most every few seconds."""
    caplog.set_level(logging.DEBUG, logger="codex_presence")
    async with serving(max_connections=4) as (server, _):
        assert server.port is not None
        caplog.clear()
        async with AsyncExitStack() as idle:
            for _ in range(40):  # idle connections, each new one taking an old one's place
                await idle.enter_async_context(await anyio.connect_tcp("127.0.0.1", server.port))
                await raw_exchange(server.port, b"GET /guess/hook HTTP/1.1\r\nhost: x\r\n\r\n")
            await anyio.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records if r.name == "codex_presence.hooks"]
    assert len(lines) <= 2, lines


def test_both_sources_of_the_peers_uid_agree() -> None:
    """sock_diag and /proc/net/tcp (its fallback) name the same owner: ours for our own
    connection, another uid's for its, and none once the peer has closed its end."""
    import os
    import socket
    import time

    from codex_presence.agent.hooks import peer_uid

    if os.getuid() != 0:
        pytest.fail("needs root, to run a process as another uid")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = listener.getsockname()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(OTHER_UID)
                os.setuid(OTHER_UID)
                sock = socket.socket()
                sock.connect(address)
                time.sleep(5)
            finally:
                os._exit(0)
        try:
            theirs, their_address = listener.accept()
            with socket.create_connection(address):
                ours, our_address = listener.accept()
                for lookup in (peer_uid._by_sock_diag, peer_uid._by_proc_net_tcp):
                    assert lookup(theirs.getsockname(), their_address) == OTHER_UID
                    assert lookup(ours.getsockname(), our_address) == os.getuid()
            for lookup in (peer_uid._by_sock_diag, peer_uid._by_proc_net_tcp):
                assert lookup(ours.getsockname(), our_address) is None  # it closed its end
            theirs.close()
            ours.close()
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)


@pytest.mark.parametrize("size", [0, 300_000])
async def test_the_poster_script_delivers_the_payload_whole_with_its_pid(
    tmp_path: Path, size: int
) -> None:
    """An async command hook's bash poster (claude starts it with ``sh -c``, the payload on
    its stdin, a socket): the payload arrives whole (multi-byte text, a large tool output),
    with bash's pid as its sequence number, and the script exits 0 on our 200 — and 7,
    delivering nothing, once the server is gone."""
    bash, cat = shutil.which("bash"), shutil.which("cat")
    assert bash is not None and cat is not None
    seen: list[tuple[dict[str, Any], int | None]] = []
    server = HookServer(lambda message, seq: seen.append((message, seq)))
    payload = {
        "hook_event_name": "PostToolUse",
        "tool_response": "é ✓ 100% \\n 'q' $x " + "x" * size,
    }
    script = tmp_path / "poster.sh"

    def run() -> tuple[int, int]:
        """Start the hook as claude does; its exit status and pid."""
        here, there = socket.socketpair()  # claude's stdin to a hook is a socket
        with here, there:
            proc = subprocess.Popen(["sh", "-c", script_command(bash, str(script))], stdin=there)
            here.sendall(orjson.dumps(payload) + b"\n")
            here.shutdown(socket.SHUT_WR)
            proc.wait(timeout=WAIT)
        return proc.returncode, proc.pid

    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        script.write_text(poster_script(server.url, cat=cat))
        status, pid = await anyio.to_thread.run_sync(run)
        tg.cancel_scope.cancel()
    assert status == 0
    assert seen == [(payload, pid)]
    status, _ = await anyio.to_thread.run_sync(run)
    assert status == 7 and len(seen) == 1  # the server is gone


def test_the_poster_script_takes_only_a_loopback_hook_url() -> None:
    with pytest.raises(ValueError):
        poster_script("http://example.com:80/s/hook", cat="/bin/cat")
    with pytest.raises(ValueError):
        poster_script("http://127.0.0.1:80/s'; rm -rf ~;'/hook", cat="/bin/cat")


async def test_a_hook_sent_and_given_up_on_before_the_server_loaded_is_still_handled() -> None:
    """Issue 34: claude runs while the server loads, its socket already listening. A poster
    that gave up on its answer (2 s) and closed before the server could ask who it was is
    still handled: a thread took its connection at once and noted its peer's uid (ours),
    which the server trusts when it adopts it; without it, the peer gone reads as one that
    "closed before it was read" and the hook is lost."""
    from functools import partial

    from codex_presence.agent.hooks.listener import (
        EarlyAccepts,
        hook_url,
        listen_loopback,
        new_hook_path,
    )

    listener, path = listen_loopback(), new_hook_path()
    early = EarlyAccepts(listener)
    body = orjson.dumps({"hook_event_name": "SessionStart"})
    with socket.create_connection(("127.0.0.1", listener.getsockname()[1])) as poster:
        poster.sendall(
            b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n\r\n%s"
            % (path, len(body), body)
        )
        while not early.accepted:  # taken, its uid noted: then the poster gives up
            await anyio.sleep(0.01)
    got: list[dict[str, Any]] = []
    server = HookServer(lambda message, seq: got.append(message), path=path)
    async with anyio.create_task_group() as tg:
        url = await tg.start(partial(server.serve, listener=listener, early=early))
        assert url == hook_url(listener, path)
        with anyio.fail_after(60):
            while not got:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert got == [{"hook_event_name": "SessionStart"}]
