"""``wrap`` as a client sees it: the same bytes both ways, the same exit status, signals
forwarded, the child gone with it, bounded memory, ``--record`` that never hurts the relay.

In-process tests run :class:`WrapSession` on pipes of their own (fast enough for hypothesis);
the others run the real ``codex-presence wrap`` command as a subprocess. Every wait is
bounded in time.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import os
import random
import resource
import shlex
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codex_presence import Transition, read_entries
from codex_presence.agent.signals import exit_status
from codex_presence.agent.wrap.session import WrapSession
from codex_presence.core.recording import VERSION
from tests.support.depth import examples
from tests.support.other_user import OTHER_UID
from tests.support.processes import alive
from tests.support.waiting import WAIT, Lines, eventually

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "codex-0.169.0"
WRAP = [sys.executable, "-m", "codex_presence", "wrap"]
PY = sys.executable


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CODEX_PRESENCE_")}


# -- in-process: the relay on our own pipes ------------------------------------------------


async def relay_bytes(
    chunks: list[bytes],
    command: list[str],
    *,
    record: Path | None = None,
    observers: list[Callable[[Transition], object]] | None = None,
) -> tuple[int, bytes]:
    """Run ``command`` behind a WrapSession; write ``chunks`` to its stdin one by one (each a
    separate write), close it, and return (status, everything it wrote to stdout)."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(in_w, False)
    os.set_blocking(out_r, False)
    relay = WrapSession(stdin=in_r, stdout=out_w, record=record, observers=observers or [])
    received = bytearray()
    status = -1

    async def feed() -> None:
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    try:
                        view = view[os.write(in_w, view) :]
                    except BlockingIOError:
                        await anyio.wait_writable(in_w)
                await anyio.lowlevel.checkpoint()
        finally:
            os.close(in_w)

    async def drain() -> None:
        while True:
            try:
                data = os.read(out_r, 1 << 20)
            except BlockingIOError:
                await anyio.wait_readable(out_r)
                continue
            if not data:
                return
            received.extend(data)

    async def run() -> None:
        nonlocal status
        try:
            status = await relay.run(command)
        finally:
            os.close(out_w)
            os.close(in_r)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            tg.start_soon(feed)
            tg.start_soon(run)
    os.close(out_r)
    return status, bytes(received)


def random_stream() -> st.SearchStrategy[list[bytes]]:
    pieces = st.one_of(
        st.binary(max_size=2000),
        st.just(b"\xff\xfe\x80 not utf-8 \xc3\x28\n"),
        st.just(b"\x00\x00NUL\x00\n"),
        st.just(b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'),
        st.just(b"\n\n\n"),
        st.text(max_size=200).map(str.encode),
    )
    return st.lists(pieces, max_size=40)


@settings(max_examples=examples(0.6), suppress_health_check=[HealthCheck.too_slow])
@given(random_stream())
@pytest.mark.anyio
async def test_any_bytes_come_back_identical_through_cat(chunks: list[bytes]) -> None:
    """Both directions at once: our stdin → cat's stdin, cat's stdout → our stdout."""
    status, out = await relay_bytes(chunks, ["cat"])
    assert status == 0
    assert out == b"".join(chunks)


@settings(max_examples=examples(0.4), suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=50_000), st.lists(st.integers(0, 50_000), max_size=20))
@pytest.mark.anyio
async def test_writes_split_at_any_point(data: bytes, cuts: list[int]) -> None:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    status, out = await relay_bytes(chunks, ["cat"])
    assert (status, out) == (0, data)


@pytest.mark.anyio
async def test_a_16_mb_line_without_final_newline() -> None:
    rng = random.Random(16)
    line = rng.randbytes(16 * 1024 * 1024).replace(b"\n", b"x")
    data = b'{"method":"item/agentMessage/delta"}\n' + line
    status, out = await relay_bytes([data[:7], data[7:]], ["cat"])
    assert status == 0
    assert hashlib.sha256(out).digest() == hashlib.sha256(data).digest()


@pytest.mark.anyio
async def test_a_16_mb_json_line_that_matters_is_analysed() -> None:
    """The default line cap is 16 MiB: a big turn/completed still closes the turn."""
    started = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'
    pad = "x" * (15 * 1024 * 1024)
    completed = orjson.dumps(
        {"method": "turn/completed", "params": {"threadId": "a", "turn": {"id": "t", "pad": pad}}}
    )
    seen: list[str] = []
    status, out = await relay_bytes(
        [started, completed[:1000], completed[1000:] + b"\n"],
        ["cat"],
        observers=[lambda t: seen.append(t.state.value)],
    )
    assert status == 0
    assert len(out) == len(started) + len(completed) + 1
    assert seen == ["working", "idle"]


@pytest.mark.anyio
async def test_transitions_reach_observers_and_eof_closes_the_turn() -> None:
    seen: list[tuple[str, str]] = []
    server_lines = [
        orjson.dumps(e.message) + b"\n"
        for e in read_entries((FIXTURES / "command.jsonl").read_bytes().splitlines())
        if e.direction == "server" and e.message is not None
    ]
    # The child replays codex's side of a real session, minus its last line (turn/completed):
    # the session ends mid-turn, so the end of stream must bring the member back to idle.
    script = "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"
    truncated = [ln for ln in server_lines if b'"turn/completed"' not in ln]
    truncated = [ln for ln in truncated if b'"type":"idle"' not in ln]
    status, _ = await relay_bytes(
        truncated, [PY, "-c", script], observers=[lambda t: seen.append((t.state, t.cause))]
    )
    assert status == 0
    assert seen[0] == ("working", "turn/started")
    assert seen[-1] == ("idle", "eof")


@pytest.mark.anyio
async def test_record_writes_both_directions_in_the_recording_format(tmp_path: Path) -> None:
    rec = tmp_path / "session.jsonl"
    script = (
        "import sys\n"
        "for line in sys.stdin.buffer:\n"
        "    sys.stdout.buffer.write(b'{\"id\":1,\"result\":' + line.rstrip() + b'}\\n')\n"
        "    sys.stdout.buffer.flush()\n"
        "sys.stdout.buffer.write(b'\\xff tail without newline')\n"
    )
    chunks = [b'{"a":1}\n', b'{"b"', b":2}\n", b"not json\n"]
    started = time.monotonic()
    status, out = await relay_bytes(chunks, [PY, "-c", script], record=rec)
    took = time.monotonic() - started
    assert status == 0
    version, *entries, end = read_entries(rec.read_bytes().splitlines(keepends=True))
    assert version.version == VERSION and version.t == 0.0 and version.message is None
    client = [(e.message, e.raw) for e in entries if e.direction == "client"]
    server = [(e.message, e.raw) for e in entries if e.direction == "server"]
    assert client == [({"a": 1}, None), ({"b": 2}, None), (None, b"not json")]
    assert server[:2] == [
        ({"id": 1, "result": {"a": 1}}, None),
        ({"id": 1, "result": {"b": 2}}, None),
    ]
    assert server[-1] == (None, b"\xff tail without newline")  # unterminated: kept at exit
    assert end.end and end.message is None
    # Times are seconds since the session's start (the unterminated tail too), in order,
    # and the end line dates the end.
    ts = [e.t for e in [*entries, end]]
    assert all(t is not None and 0 <= t <= took for t in ts), ts
    assert ts == sorted(ts)  # type: ignore[type-var]
    assert out.endswith(b"\xff tail without newline")


@pytest.mark.parametrize(
    "target",
    [
        "/dev/full",  # ENOSPC on every write
        "/sys/codex-presence-rec.jsonl",  # EACCES, even for root
        "missing-dir/rec.jsonl",  # ENOENT
    ],
)
@pytest.mark.anyio
async def test_a_failing_record_target_never_hurts_the_relay(
    target: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A read-only directory is EACCES too, but not for root (CI runs as root): /sys is
    # EACCES for everyone, so that case is covered wherever the suite runs.
    path = Path(target) if target.startswith("/") else tmp_path / target
    data = [b'{"method":"x"}\n' * 1000] * 50
    with caplog.at_level("WARNING", logger="codex_presence"):
        status, out = await relay_bytes(data, ["cat"], record=path)
    assert (status, out) == (0, b"".join(data))
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "recording" in warnings[0].getMessage()


def test_exit_status_of_a_signalled_child_is_128_plus_n() -> None:
    assert exit_status(0) == 0
    assert exit_status(3) == 3
    assert exit_status(-signal.SIGTERM) == 143


# -- the real command --------------------------------------------------------------------


_PROCS: list[subprocess.Popen[bytes]] = []


def wrap(*args: str, **kwargs: object) -> subprocess.Popen[bytes]:
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        [*WRAP, *args], env=clean_env(), **kwargs
    )
    _PROCS.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _reap_wraps() -> Iterator[None]:
    """Every wrap a test started is gone, and its pipes closed, after the test."""
    yield
    while _PROCS:
        proc = _PROCS.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with suppress(OSError):
                    stream.close()


def wait_line(stream: object, timeout: float = WAIT) -> bytes:
    """One line from a pipe, with a deadline (a reader thread, so a hang fails cleanly)."""
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)  # type: ignore[attr-defined]
    reader.start()
    reader.join(timeout)
    assert box, "no line within the timeout"
    return box[0]


@pytest.mark.parametrize(
    ("script", "status"),
    [
        ("raise SystemExit(0)", 0),
        ("raise SystemExit(7)", 7),
        ("import os; os.kill(os.getpid(), 9)", 137),
        ("import os; os.abort()", 134),  # a crash: SIGABRT
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 143),
    ],
)
def test_exit_status_is_the_childs(script: str, status: int) -> None:
    proc = wrap("--quiet", "--", PY, "-c", script, stdin=subprocess.DEVNULL)
    assert proc.wait(WAIT) == status


def test_a_command_that_does_not_exist() -> None:
    proc = wrap("--", "/nonexistent/codex", stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 127
    assert b"cannot run /nonexistent/codex" in err


def test_the_command_is_looked_up_on_path_as_execvpe_does(tmp_path: Path) -> None:
    """The watchdog starts the command with posix_spawn (issue 27), looking it up itself:
    as ``execvpe``, a file of that name it cannot run is passed over for a later one, and
    with none it can run the status is 126 (found, not runnable), not 127."""
    first, second = tmp_path / "a", tmp_path / "b"
    for directory in (first, second):
        directory.mkdir()
    (first / "tool").write_text("#!/bin/sh\necho first\n")  # not executable
    (second / "tool").write_text("#!/bin/sh\necho second\n")
    (second / "tool").chmod(0o755)
    env = {**clean_env(), "PATH": f"{tmp_path / 'none'}:{first}:{second}:/usr/bin:/bin"}
    ran = subprocess.run(
        [*WRAP, "--quiet", "--", "tool"], env=env, capture_output=True, timeout=WAIT, check=False
    )
    assert (ran.returncode, ran.stdout) == (0, b"second\n"), ran.stderr
    (second / "tool").chmod(0o644)
    ran = subprocess.run(
        [*WRAP, "--quiet", "--", "tool"], env=env, capture_output=True, timeout=WAIT, check=False
    )
    assert ran.returncode == 126 and b"cannot run tool: Permission denied" in ran.stderr


SIGNAL_CHILD = r"""
import os, signal, sys, time
def on(signum, frame):
    sys.stdout.write(f"got {signal.Signals(signum).name}\n"); sys.stdout.flush()
    if signum != signal.SIGHUP:
        sys.exit(signum + 100)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, on)
sys.stdout.write(f"ready {os.getpid()} {os.getpgrp()}\n"); sys.stdout.flush()
for _ in range(600):
    time.sleep(0.05)
sys.exit(99)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signals_are_forwarded_and_the_status_follows(signum: int) -> None:
    proc = wrap(
        "--quiet", "--", PY, "-c", SIGNAL_CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert wait_line(proc.stdout).startswith(b"ready")
    proc.send_signal(signal.SIGHUP)  # forwarded; this child keeps running on SIGHUP
    assert wait_line(proc.stdout) == b"got SIGHUP\n"
    proc.send_signal(signum)
    assert wait_line(proc.stdout) == f"got {signal.Signals(signum).name}\n".encode()
    assert proc.wait(WAIT) == signum + 100


IGNORING_CHILD = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.stdout.write("ready\n"); sys.stdout.flush()
for _ in range(600):
    time.sleep(0.05)
"""


def test_a_second_sigint_kills() -> None:
    proc = wrap(
        "--quiet", "--", PY, "-c", IGNORING_CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert wait_line(proc.stdout) == b"ready\n"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)  # the first one is ignored by the child…
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)  # …the second kills it
    assert proc.wait(WAIT) == 128 + signal.SIGKILL


def test_stdin_eof_closes_the_childs_stdin_and_wrap_waits() -> None:
    script = (
        "import sys, time; data = sys.stdin.buffer.read(); time.sleep(0.5);"
        " sys.stdout.write(str(len(data))); raise SystemExit(5)"
    )
    proc = wrap("--quiet", "--", PY, "-c", script, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, _ = proc.communicate(b"x" * 100_000, timeout=WAIT)
    assert (proc.returncode, out) == (5, b"100000")


def test_the_child_dies_when_wrap_is_sigkilled() -> None:
    proc = wrap(
        "--quiet", "--", PY, "-c", SIGNAL_CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    ready = wait_line(proc.stdout).split()
    child, group = int(ready[1]), int(ready[2])
    assert child != proc.pid
    assert group == child  # its own process group, so signals reach its helpers too
    proc.kill()
    proc.wait(WAIT)
    eventually(lambda: not alive(child), 60, "the child's death")
    assert not alive(child)


TREE = str(Path(__file__).resolve().parents[1] / "bench" / "_process_tree.py")


def tree_of(proc: subprocess.Popen[bytes]) -> list[int]:
    assert proc.stdout is not None
    pids = [int(p) for p in wait_line(proc.stdout).split()]
    assert all(alive(pid) for pid in pids[1:])
    return pids


@pytest.mark.parametrize("target", ["wrap", "its process group"])
def test_the_childs_whole_tree_dies_when_wrap_is_sigkilled(target: str) -> None:
    """Descendants in the child's process group, in sessions of their own, and orphans
    re-parented away from it: none outlives a SIGKILLed wrap, nor a SIGKILL sent to wrap's
    whole process group (bench/relay.py says how long they take)."""
    proc = wrap(
        "--quiet",
        "--",
        PY,
        TREE,
        "wait",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    pids = tree_of(proc)
    if target == "wrap":
        proc.kill()
    else:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(WAIT)
    eventually(lambda: not any(alive(pid) for pid in pids), 60, "the whole tree's death")


def test_what_the_child_leaves_running_dies_with_wrap() -> None:
    """The child exits leaving commands running (in sessions of their own, orphans): wrap
    ends with the child's status, and takes them with it."""
    proc = wrap("--quiet", "--", PY, TREE, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    pids = tree_of(proc)
    assert proc.wait(WAIT) == 0
    eventually(lambda: not any(alive(pid) for pid in pids), 60, "the leftovers' death")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_stops_reading_keeps_memory_bounded() -> None:
    """The child says a turn started, then writes 400 MB; we read nothing for a while: wrap
    stops reading the child (its memory stays flat), and once we read, every byte arrives.

    Flat from when wrap is stalled, known by order, not by how long it took: its analysis
    is loaded (it says the turn's ``working``, which it can only once the mapping is
    attached; before that, its memory grows for as long as a loaded machine takes, and
    memory that merely paused growing is not settled: CI under load took 7.9 MB for
    settled, and wrap went on loading to 29 MB) and the pipe to us is full (the kernel's
    buffer, not wrap's memory: no page of it free)."""
    first = b'{"method":"turn/started","params":{"threadId":"th","turn":{"id":"tu"}}}\n'
    total = 400 * 1024 * 1024
    script = (
        f"import sys\nsys.stdout.buffer.write({first!r}); sys.stdout.buffer.flush()\n"
        'block = b\'{"method":"item/agentMessage/delta"}\\n\' * 30000\n'
        f"left = {total}\n"
        "while left > 0:\n"
        "    n = min(left, len(block)); sys.stdout.buffer.write(block[:n]); left -= n\n"
    )
    proc = wrap(
        "--",
        PY,
        "-c",
        script,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    said = Lines(line.decode(errors="replace") for line in proc.stderr)
    said.until(r"working \(turn/started\)")  # the analysis is loaded and attached
    ours = proc.stdout.fileno()
    capacity = fcntl.fcntl(ours, fcntl.F_GETPIPE_SZ)
    eventually(  # no page left in it: wrap waits to write, and holds one chunk at most
        lambda: capacity - queued(ours) < resource.getpagesize(),
        what="the pipe to us full",
        seen=lambda: f"{queued(ours)} of {capacity} bytes in it; wrap at {rss_kb(proc.pid)} kB",
    )
    settled = rss_kb(proc.pid)
    samples = [settled]
    for _ in range(8):
        time.sleep(0.2)  # nobody reads meanwhile: the memory must stay put all along
        samples.append(rss_kb(proc.pid))
    assert max(samples) < 80 * 1024, samples
    assert max(samples) - settled < 8 * 1024, samples  # flat while stalled
    received = 0
    while chunk := proc.stdout.read(1 << 20):
        received += len(chunk)
    assert proc.wait(WAIT) == 0
    assert received == len(first) + total
    assert said.rest().endswith("idle (eof)\n")


def queued(fd: int) -> int:
    """How many bytes wait in the pipe ``fd`` reads."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def _blocks(seed: int, count: int, size: int) -> Iterator[bytes]:
    base = random.Random(seed).randbytes(size)
    for n in range(count):
        yield n.to_bytes(8, "little") + base[8:]


@pytest.mark.slow
def test_one_gigabyte_has_the_same_sha256_on_both_sides() -> None:
    count, size = 1024, 1024 * 1024
    proc = wrap("--quiet", "--", "cat", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    sent = hashlib.sha256()

    def produce() -> None:
        assert proc.stdin is not None
        for block in _blocks(1, count, size):
            sent.update(block)
            proc.stdin.write(block)
        proc.stdin.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    got = hashlib.sha256()
    received = 0
    assert proc.stdout is not None
    deadline = time.monotonic() + 300
    while chunk := proc.stdout.read(1 << 20):
        got.update(chunk)
        received += len(chunk)
        assert time.monotonic() < deadline
    producer.join(WAIT)
    assert proc.wait(WAIT) == 0
    assert received == count * size
    assert got.hexdigest() == sent.hexdigest()


def test_transitions_are_logged_on_stderr_never_stdout(tmp_path: Path) -> None:
    lines = [
        orjson.dumps(e.message) + b"\n"
        for e in read_entries((FIXTURES / "command.jsonl").read_bytes().splitlines())
        if e.direction == "server" and e.message is not None
    ]
    source = tmp_path / "server.jsonl"
    source.write_bytes(b"".join(lines))

    def wrap_cat(*options: str) -> tuple[bytes, str]:
        proc = wrap(
            *options,
            "--",
            "cat",
            str(source),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0
        assert out == source.read_bytes()
        return out, err.decode()

    # Other lines (such as wrap's note that it reports to no broker) may come and go.
    states = ("codex-presence: working ", "codex-presence: idle ", "codex-presence: blocked ")
    _, err = wrap_cat()
    assert [line for line in err.splitlines() if line.startswith(states)] == [
        "codex-presence: working (turn/started)",
        "codex-presence: idle (thread/status/changed)",
    ]
    assert wrap_cat("--quiet")[1] == ""


def test_options_also_come_from_the_environment(tmp_path: Path) -> None:
    rec = tmp_path / "env.jsonl"
    env = clean_env() | {"CODEX_PRESENCE_RECORD": str(rec), "CODEX_PRESENCE_QUIET": "1"}
    proc = subprocess.run(
        [*WRAP, "--", PY, "-c", "print('{\"id\":1}')"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b'{"id":1}\n', b"")
    version, *entries, end = read_entries(rec.read_bytes().splitlines())
    assert version.version == VERSION
    assert [e.message for e in entries] == [{"id": 1}]
    assert end.end


def test_sigterm_leaves_a_complete_recording(tmp_path: Path) -> None:
    rec = tmp_path / "term.jsonl"
    proc = wrap(
        "--quiet",
        "--record",
        str(rec),
        "--",
        PY,
        "-c",
        SIGNAL_CHILD,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert wait_line(proc.stdout).startswith(b"ready")
    assert proc.stdin is not None
    proc.stdin.write(b'{"id":0,"result":{}}\n')
    proc.stdin.flush()
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(WAIT) == signal.SIGTERM + 100
    version, *entries, end = read_entries(rec.read_bytes().splitlines())
    assert version.version == VERSION
    assert [(e.direction, e.message, e.raw) for e in entries] == [
        ("server", None, entries[0].raw),
        ("client", {"id": 0, "result": {}}, None),
        ("server", None, b"got SIGTERM"),
    ]
    assert entries[0].raw is not None and entries[0].raw.startswith(b"ready")
    assert end.end  # dated: the session's end made it to disk too


def test_closed_standard_descriptors_are_not_mixed_up_with_the_childs_pipes() -> None:
    """With fd 0 closed, our pipes to the child must not land on it (reads then see EOF)."""
    proc = subprocess.run(
        ["sh", "-c", f"exec {shlex.join(WRAP)} --quiet -- sh -c 'echo hi; cat; echo bye' <&-"],
        env=clean_env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"hi\nbye\n", b"")


def test_log_file_takes_the_transitions_and_stderr_stays_the_childs(tmp_path: Path) -> None:
    log = tmp_path / "wrap.log"
    line = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}'
    script = f"import sys; sys.stderr.write('child says hi'); print({line.decode()!r})"
    proc = subprocess.run(
        [*WRAP, "--log-file", str(log), "--", PY, "-c", script],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, line + b"\n", b"child says hi")
    text = log.read_text()
    assert "working (turn/started)" in text
    assert "idle (eof)" in text
    bad = subprocess.run(
        [*WRAP, "--log-file", str(tmp_path / "no" / "such.log"), "--", "true"],
        env=clean_env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith(b"codex-presence wrap: --log-file")


@pytest.mark.anyio
async def test_companions_span_the_session_and_see_the_final_transition() -> None:
    """The hook for the reporter (issue 5): entered before the child starts, left after
    the end-of-stream transition was delivered to the observers."""
    from contextlib import asynccontextmanager

    events: list[str] = []

    @asynccontextmanager
    async def companion() -> Any:
        events.append("enter")
        yield
        events.append("exit")

    started = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'
    in_r, in_w = os.pipe()
    os.close(in_w)
    out_r, out_w = os.pipe()
    relay = WrapSession(
        stdin=in_r,
        stdout=out_w,
        observers=[lambda t: events.append(f"{t.state.value} ({t.cause})")],
        companions=[companion],
    )
    with anyio.fail_after(WAIT):
        status = await relay.run([PY, "-c", f"import sys; sys.stdout.buffer.write({started!r})"])
    for fd in (in_r, out_r, out_w):
        os.close(fd)
    assert status == 0
    assert events == ["enter", "working (turn/started)", "idle (eof)", "exit"]


@pytest.mark.anyio
async def test_the_copy_thread_never_waits_for_transitions_to_be_delivered() -> None:
    """The child's output keeps flowing while the event loop that delivers transitions is
    busy: the copy thread hands them over and goes on. (An observer that blocks breaks the
    observer contract; it is the plainest way to make the event loop busy.)"""
    started = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'
    child = (
        "import sys, time; out = sys.stdout.buffer"
        f"; out.write({started!r}); out.flush(); time.sleep(0.2)"
        "; out.write(b'after\\n'); out.flush()"
    )
    in_r, in_w = os.pipe()
    os.close(in_w)
    out_r, out_w = os.pipe()
    received = bytearray()
    got_after = threading.Event()

    def read_stdout() -> None:
        while data := os.read(out_r, 1 << 16):
            received.extend(data)
            if b"after\n" in received:
                got_after.set()

    waited: list[bool] = []

    def busy_observer(transition: Transition) -> None:
        if transition.state == "working":
            waited.append(got_after.wait(WAIT))  # blocks the event loop until "after" is out

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    relay = WrapSession(stdin=in_r, stdout=out_w, observers=[busy_observer])
    with anyio.fail_after(WAIT):
        status = await relay.run([PY, "-c", child])
    os.close(out_w)
    reader.join(WAIT)
    for fd in (in_r, out_r):
        os.close(fd)
    assert status == 0
    assert waited == [True]
    assert bytes(received) == started + b"after\n"


CHILD_REPORTS_STDERR_MODE = (
    "import os, sys; sys.stdout.write(f'stderr-blocking={os.get_blocking(2)}\\n')"
)


def test_in_a_terminal_the_childs_stderr_stays_blocking() -> None:
    """A terminal's stdin, stdout and stderr are one open file description: making our
    stdin/stdout non-blocking must not make the child's stderr so (a stalled terminal
    would then fail its writes with EAGAIN)."""
    import pty

    master, slave = pty.openpty()
    child = (
        "import os, sys; line = sys.stdin.readline().strip()"
        "; sys.stdout.write(f'stderr-blocking={os.get_blocking(2)} got {line}\\n')"
    )
    try:
        proc = subprocess.Popen(
            [*WRAP, "--", PY, "-c", child],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=clean_env(),
        )
        os.close(slave)
        slave = -1
        os.write(master, b"ping\n")  # typed at the terminal: it must reach the child
        seen = b""
        deadline = time.monotonic() + WAIT
        while b"got ping" not in seen:
            assert time.monotonic() < deadline, seen
            try:
                seen += os.read(master, 4096)
            except OSError:  # EIO: every holder of the terminal is gone
                break
        assert proc.wait(WAIT) == 0
        assert b"stderr-blocking=True got ping" in seen, seen
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_with_stderr_into_stdout_the_childs_stderr_stays_blocking() -> None:
    result = subprocess.run(
        [*WRAP, "--", PY, "-c", CHILD_REPORTS_STDERR_MODE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=clean_env(),
        timeout=WAIT,
    )
    assert result.returncode == 0
    # Our notice and the child's line share the pipe, in either order: the child starts
    # before wrap has loaded what it logs with.
    assert b"stderr-blocking=True\n" in result.stdout, result.stdout


def deschedule_after_writing(
    monkeypatch: pytest.MonkeyPatch, when: Callable[[int, bytes], bool], seconds: float = 0.3
) -> None:
    """Make the relay's thread that just wrote a part for which ``when(fd, part)`` holds
    lose the CPU for ``seconds`` right after that write, as a busy machine may."""
    import codex_presence.agent.wrap.pump as pump_module  # the copy threads write there

    class Descheduled:
        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def write(fd: int, data: Any) -> int:
            written = os.write(fd, data)
            if when(fd, bytes(data[:written])):
                time.sleep(seconds)
            return written

    monkeypatch.setattr(pump_module, "os", Descheduled())


@pytest.mark.anyio
async def test_a_quick_answer_is_never_analysed_before_the_request_it_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An automatic client answers an approval the moment it reads it, while the copy
    thread has written the request but not yet analysed it (descheduled right after its
    write, simulated here). The answer must still count: the member is working again, not
    left blocked until the server's own resolution."""
    started = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'
    request = (
        b'{"method":"item/commandExecution/requestApproval","id":7,'
        b'"params":{"threadId":"a","turnId":"t","itemId":"c"}}\n'
    )
    child = (
        "import sys; out = sys.stdout.buffer"
        f"; out.write({started + request!r}); out.flush(); sys.stdin.buffer.readline()"
    )
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()

    # the client's answer arrives while the copy thread is away
    deschedule_after_writing(monkeypatch, lambda fd, part: b"requestApproval" in part)

    def client() -> None:
        seen = b""
        while b"requestApproval" not in seen and (data := os.read(out_r, 1 << 16)):
            seen += data
        os.write(in_w, b'{"id":7,"result":{"decision":"accept"}}\n')
        os.close(in_w)

    answering = threading.Thread(target=client, daemon=True)
    answering.start()
    seen: list[str] = []
    relay = WrapSession(
        stdin=in_r,
        stdout=out_w,
        observers=[lambda t: seen.append(f"{t.state.value} ({t.cause})")],
    )
    with anyio.fail_after(WAIT):
        status = await relay.run([PY, "-c", child])
    answering.join(WAIT)
    for fd in (in_r, out_r, out_w):
        os.close(fd)
    assert status == 0
    assert seen == [
        "working (turn/started)",
        "blocked (item/commandExecution/requestApproval)",
        "working (response)",
        "idle (eof)",
    ]


# -- a recording replays as the session went -------------------------------------------------


async def session_and_replay(
    child: str, answer: Callable[[bytes], bytes | None], tmp_path: Path
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[Any]]:
    """Run ``child`` behind a recording WrapSession; a client thread reads its output and, once
    ``answer(seen)`` returns bytes, writes them and closes stdin. Returns the transitions
    seen live, those of the recording's replay, and the replay's rows."""
    from codex_presence.core.recording import read_relevant_entries
    from codex_presence.core.timeline import timeline

    rec = tmp_path / "session.jsonl"
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()

    def client() -> None:
        seen = b""
        try:
            while (reply := answer(seen)) is None and (data := os.read(out_r, 1 << 20)):
                seen += data
            if reply is not None:
                with suppress(BrokenPipeError):
                    os.write(in_w, reply)
        finally:
            os.close(in_w)
        while os.read(out_r, 1 << 20):
            pass

    answering = threading.Thread(target=client, daemon=True)
    answering.start()
    live: list[tuple[str, str]] = []
    relay = WrapSession(
        stdin=in_r,
        stdout=out_w,
        record=rec,
        observers=[lambda t: live.append((t.state.value, t.cause))],
    )
    with anyio.fail_after(WAIT):
        status = await relay.run([PY, "-c", child])
    os.close(out_w)
    answering.join(WAIT)
    for fd in (in_r, out_r):
        os.close(fd)
    assert status == 0
    rows = timeline(read_relevant_entries(rec.read_bytes()))
    return live, [(r.state, r.cause) for r in rows], rows


STARTED = b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}\n'
APPROVAL = (
    b'{"method":"item/commandExecution/requestApproval","id":7,'
    b'"params":{"threadId":"a","turnId":"t","itemId":"c"}}\n'
)
ANSWER = b'{"id":7,"result":{"decision":"accept"}}\n'


@pytest.mark.anyio
async def test_the_replay_ends_when_the_session_did(tmp_path: Path) -> None:
    child = (
        f"import sys, time; sys.stdout.buffer.write({STARTED!r}); sys.stdout.flush()"
        "; time.sleep(0.5)"
    )
    live, replayed, rows = await session_and_replay(child, lambda seen: None, tmp_path)
    assert replayed == live == [("working", "turn/started"), ("idle", "eof")]
    assert rows[-1].t - rows[0].t >= 0.4  # dated by the end line, not by the last message


@pytest.mark.anyio
async def test_an_answer_the_child_never_read_is_in_neither_timeline(tmp_path: Path) -> None:
    # The child closes its stdin, asks, and lingers: the client's answer cannot reach it
    # (EPIPE), so it is neither analysed nor recorded.
    child = (
        f"import os, sys, time; os.close(0); sys.stdout.buffer.write({STARTED + APPROVAL!r})"
        "; sys.stdout.flush(); time.sleep(0.5)"
    )
    live, replayed, _ = await session_and_replay(
        child, lambda seen: ANSWER if b"requestApproval" in seen else None, tmp_path
    )
    assert live == [
        ("working", "turn/started"),
        ("blocked", "item/commandExecution/requestApproval"),
        ("idle", "eof"),
    ]
    assert replayed == live


@pytest.mark.anyio
async def test_a_line_too_long_to_analyse_live_is_not_analysed_in_the_replay(
    tmp_path: Path,
) -> None:
    head = STARTED[:-2] + b',"pad":"'  # a turn/started of 17 MiB: over the 16 MiB cap
    child = f"import sys; sys.stdout.buffer.write({head!r} + b'x' * (17 << 20) + b'\"}}\\n')"
    live, replayed, _ = await session_and_replay(child, lambda seen: None, tmp_path)
    assert replayed == live == []


@pytest.mark.parametrize(
    "away",
    [
        # the copy thread, right after writing the request: the client answers meanwhile
        pytest.param(lambda fd, part: b"requestApproval" in part, id="after-the-request"),
        # the event loop, right after writing the answer: the child ends the turn meanwhile
        pytest.param(lambda fd, part: part == ANSWER, id="after-the-answer"),
    ],
)
@pytest.mark.anyio
async def test_the_analysis_and_the_recording_follow_the_wire(
    away: Callable[[int, bytes], bool], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A relay thread loses the CPU right after a write, and the other side of the session
    reacts meanwhile. The analysis must still see the bytes in the order they crossed the
    wire (no answer before its request, no reply before the answer it follows), and the
    recording must say what the analysis saw, in that order."""
    completed = b'{"method":"turn/completed","params":{"threadId":"a","turn":{"id":"t"}}}\n'
    child = (
        "import sys; out = sys.stdout.buffer"
        f"; out.write({STARTED + APPROVAL!r}); out.flush(); sys.stdin.buffer.readline()"
        f"; out.write({completed!r}); out.flush()"
    )
    deschedule_after_writing(monkeypatch, away)
    live, replayed, _ = await session_and_replay(
        child, lambda seen: ANSWER if b"requestApproval" in seen else None, tmp_path
    )
    assert live == [
        ("working", "turn/started"),
        ("blocked", "item/commandExecution/requestApproval"),
        ("working", "response"),
        ("idle", "turn/completed"),
    ]
    assert replayed == live


def test_a_recorder_that_cannot_keep_up_marks_the_gap(tmp_path: Path) -> None:
    """Chunks dropped for lack of room leave a gap line for their direction; the line they
    cut is left out whole (nothing after the gap is glued to what came before it), the
    other direction keeps every line, and a gap at the very end is marked too."""
    from codex_presence.agent.recorder import Recorder
    from codex_presence.core.recording import read_entries

    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path, max_pending=64)
    assert recorder.open()
    recorder.add(0.1, "server", b'{"id":1}\n{"id":2,"cut":"')  # a line the gap will cut
    recorder.add(0.2, "server", b"x" * 100)  # no room: dropped
    recorder.add(0.25, "client", b'{"id":7,"result":{}}\n')  # untouched by the server's gap
    recorder.add(0.3, "server", b'y"}\n{"id":3}\n')  # the cut line's end, then a whole one
    recorder.add(0.35, "client", b"z" * 100)  # dropped, and nothing follows it
    recorder.finish(0.4)
    recorder.start()
    assert recorder.join(WAIT), "the recorder did not finish"
    entries = list(read_entries(path.read_bytes().splitlines()))
    assert [(e.t, e.direction, e.message, e.gap, e.end) for e in entries] == [
        (0.0, "server", None, 0, False),  # the version line
        (0.1, "server", {"id": 1}, 0, False),
        (0.25, "client", {"id": 7, "result": {}}, 0, False),
        (0.2, "server", None, 100, False),
        (0.3, "server", {"id": 3}, 0, False),
        (0.35, "client", None, 100, False),
        (0.4, "server", None, 0, True),
    ]


def test_a_line_too_long_to_record_is_kept_as_its_size(tmp_path: Path) -> None:
    """A line longer than the longest the relay analyses is not kept in memory nor written:
    an ``oversized`` line gives its size (its bytes past the limit are queued as a count),
    the lines around it are whole, and a replay counts it as a line it did not analyse."""
    from codex_presence.agent.recorder import Recorder
    from codex_presence.core.recording import read_entries, read_relevant_entries
    from codex_presence.core.timeline import TimelineBuilder

    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path, max_line=100, max_pending=400)
    assert recorder.open()
    recorder.add(0.1, "server", STARTED + b'{"pad":"' + b"x" * 50)
    for n in range(20):  # 2,000 bytes more: past the limit, and far past max_pending
        recorder.add(0.2 + n / 100, "server", b"x" * 100)
    recorder.add(0.5, "server", b'"}\n{"id":1}\n')
    recorder.finish(0.6)
    recorder.start()
    assert recorder.join(WAIT), "the recorder did not finish"
    entries = list(read_entries(path.read_bytes().splitlines()))
    messages = [e for e in entries if not e.end and e.version is None]
    assert [(e.t, e.message, e.raw, e.size, e.gap) for e in messages] == [
        (0.1, orjson.loads(STARTED), None, len(STARTED) - 1, 0),
        (0.5, None, None, 8 + 50 + 2000 + 2, 0),  # no gap: nothing was dropped
        (0.5, {"id": 1}, None, 8, 0),
    ]
    builder = TimelineBuilder(max_line=100)
    for entry in read_relevant_entries(path.read_bytes()):
        builder.feed(entry)
    assert builder.oversized == 1


def test_record_keeps_memory_bounded_with_a_100_mb_line(tmp_path: Path) -> None:
    """``--record`` used about five times the longest line (a 100 MB line: ~500 MB). The
    line is now kept as its size, and wrap's peak RSS stays far below the line."""
    from codex_presence.core.recording import read_entries

    line = tmp_path / "line.jsonl"
    with line.open("wb") as f:
        f.write(b'{"method":"item/completed","params":{"output":"')
        for _ in range(100):
            f.write(b"x" * 1_000_000)
        f.write(b'"}}\n')
    record = tmp_path / "rec.jsonl"
    usage = tmp_path / "usage"
    # Peak RSS measured by a small parent: a process spawned with vfork takes its parent's
    # peak as its own at exec, and pytest's is large.
    measure = (
        "import os, subprocess, sys; p = subprocess.Popen(sys.argv[2:])"
        "; _, status, ru = os.wait4(p.pid, 0); open(sys.argv[1], 'w').write(str(ru.ru_maxrss))"
        "; sys.exit(os.waitstatus_to_exitcode(status))"
    )
    # The line comes once wrap has loaded all (at a start-up, what does not fit in the
    # start-up buffer is a gap: tests/test_startup.py).
    late_cat = ["sh", "-c", 'sleep 2; exec cat "$0"', str(line)]
    argv = [*WRAP, "-q", "--record", str(record), "--", *late_cat]
    proc = subprocess.run(
        [PY, "-c", measure, str(usage), *argv],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0
    assert hashlib.sha256(proc.stdout).digest() == hashlib.sha256(line.read_bytes()).digest()
    entries = read_entries(record.read_bytes().splitlines())
    (entry,) = [e for e in entries if not e.end and e.version is None]
    assert (entry.message, entry.raw, entry.size) == (None, None, line.stat().st_size - 1)
    assert int(usage.read_text()) < 100 * 1024  # KB


def test_an_idle_recorder_costs_no_wake_ups(tmp_path: Path) -> None:
    """``--record`` keeps "an idle session costs no wake-ups": the recorder's thread sleeps
    on a condition, not on a timer. Over an idle second it never wakes; a chunk wakes it
    at once, and is on disk."""
    from codex_presence.agent.recorder import Recorder
    from codex_presence.core.recording import read_entries

    path = tmp_path / "rec.jsonl"
    recorder = Recorder(path)
    assert recorder.open()
    recorder.start()
    recorder.add(0.1, "server", b'{"id":1}\n')
    eventually(lambda: path.read_bytes().count(b"\n") == 2, 60, "the first line")
    woken = recorder.wakeups
    time.sleep(1.0)
    assert recorder.wakeups == woken  # idle: not one wake-up
    recorder.add(1.1, "client", b'{"id":0,"result":{}}\n')
    eventually(lambda: path.read_bytes().count(b"\n") == 3, 60, "the second")
    assert recorder.wakeups == woken + 1
    recorder.finish(1.2)
    assert recorder.join(WAIT), "the recorder did not finish"
    entries = list(read_entries(path.read_bytes().splitlines()))
    assert [(e.direction, e.message, e.end) for e in entries] == [
        ("server", None, False),  # the version line
        ("server", {"id": 1}, False),
        ("client", {"id": 0, "result": {}}, False),
        ("server", None, True),
    ]


@pytest.mark.parametrize("option", ["--record", "--log-file"])
def test_a_symlink_at_the_record_or_log_path_is_refused_not_followed(
    tmp_path: Path, option: str
) -> None:
    """A symlink planted at ``--record``'s path had its target overwritten (and made 0600),
    wherever it pointed; ``--log-file`` too. Neither path is followed: the recording is
    refused with a line that says why (the session goes on), the log file is a usage error."""
    victim = tmp_path / "victim.conf"
    victim.write_bytes(b"precious\n")
    victim.chmod(0o644)
    planted = tmp_path / "planted"
    planted.symlink_to(victim)
    proc = subprocess.run(
        [*WRAP, option, str(planted), "--", PY, "-c", "print('hi')"],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert victim.read_bytes() == b"precious\n"
    assert victim.stat().st_mode & 0o777 == 0o644
    assert planted.is_symlink()
    assert b"is a symbolic link" in proc.stderr, proc.stderr
    if option == "--record":
        assert (proc.returncode, proc.stdout) == (0, b"hi\n")
    else:
        assert proc.returncode == 2 and proc.stdout == b""


@pytest.mark.parametrize("option", ["--record", "--log-file"])
def test_a_file_another_user_created_at_the_record_or_log_path_is_refused(
    tmp_path: Path, option: str
) -> None:
    """Another user who created ``--record``'s or ``--log-file``'s file first, 0666 in a
    shared sticky directory, got the session in a file they can read. A regular file that
    is not ours is refused, its owner named, and left as it was (not truncated, not
    chmodded); the recording is skipped with that line (the session goes on), the log file
    is a usage error."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "session.out"
    theirs.write_bytes(b"theirs\n")
    theirs.chmod(0o666)
    os.chown(theirs, OTHER_UID, OTHER_UID)  # we are root in CI: as if they created it
    proc = subprocess.run(
        [*WRAP, option, str(theirs), "--", PY, "-c", "print('hi')"],
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert theirs.read_bytes() == b"theirs\n"
    assert theirs.stat().st_mode & 0o777 == 0o666
    said = proc.stderr.decode()
    assert f"{theirs}" in said and f"uid {OTHER_UID}), not us" in said, said
    assert len([line for line in said.splitlines() if "not us" in line]) == 1, said
    if option == "--record":
        assert (proc.returncode, proc.stdout) == (0, b"hi\n")
    else:
        assert proc.returncode == 2 and proc.stdout == b""
