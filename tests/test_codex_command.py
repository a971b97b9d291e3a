"""``codex-presence codex``'s own mechanics, with a stand-in for the codex executable
(``bench/_fake_codex_tui.py``): the arguments each role gets, the exit status, the
signals, the ends of both children and what they leave, the log held while the TUI owns
the terminal, the recording. What the real TUI does through the command is
``tests/test_codex_tui.py``'s.
"""

from __future__ import annotations

import errno
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import timeline
from tests.support.other_user import OTHER_UID
from tests.support.processes import alive
from tests.support.tui_driver import short_tempdir
from tests.support.tui_launch import launched, signals_kept
from tests.support.waiting import eventually
from tests.support.wrap_harness import wrap_env

FAKE = Path(__file__).resolve().parents[1] / "bench" / "_fake_codex_tui.py"
TURN_STARTED = {"method": "turn/started", "params": {"threadId": "th", "turn": {"id": "tu"}}}

EXITS_WITHIN = 120
"""Seconds a command is given to end once told to (generous: a loaded machine ran
these at a load of 10, where 30 s was not enough; docs/development.md)."""


@dataclass
class Setup:
    root: Path
    codex: Path
    log: Path
    daemon_dir: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """Every command :meth:`run` started: ended by the fixture if a test failed first."""

    def seen(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [orjson.loads(line) for line in self.log.read_bytes().splitlines()]

    def first(self, role: str, key: str) -> Any:
        """The first ``key`` the stand-in of ``role`` logged. The bound is generous: the
        app-server starts with a low CPU weight (the TUI first), and on a loaded machine a
        Python stand-in so weighted took over 10 s to start."""
        eventually(
            lambda: any(e["role"] == role and key in e for e in self.seen()),
            within=60,
            what=f"{role} {key}",
        )
        return next(e[key] for e in self.seen() if e["role"] == role and key in e)

    def run(self, *args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(self.argv(*args), env=self.env, cwd=self.root, **kwargs)
        self.procs.append(proc)
        return proc

    def reap(self) -> None:
        """End what a failed test left running (its watchdogs end the children), and
        close its pipes: a Popen still running when collected is an error of whichever
        test runs then (CI: test_codex_schema's, after this file's test had failed)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(EXITS_WITHIN)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "codex_presence", "codex", *args, "--", str(self.codex)]


@pytest.fixture
def setup() -> Iterator[Setup]:
    with short_tempdir("cpc-") as root:
        codex = root / "codex"
        codex.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
        codex.chmod(0o755)
        (root / "daemon").mkdir()
        env = wrap_env(
            {
                "FAKE_CODEX_LOG": str(root / "seen.jsonl"),
                "FAKE_CODEX_DAEMON_DIR": str(root / "daemon"),
                "FAKE_CODEX_FRAMES": orjson.dumps([TURN_STARTED]).decode(),
                "CODEX_PRESENCE_TOKEN": "cp_not-for-children",
                "TMPDIR": str(root),
                "XDG_RUNTIME_DIR": "",
            }
        )
        setup = Setup(root, codex, root / "seen.jsonl", root / "daemon", env)
        try:
            yield setup
        finally:
            setup.reap()


def test_the_tui_status_is_ours_and_the_session_leaves_nothing_behind(setup: Setup) -> None:
    setup.env["FAKE_TUI"] = "exit:3"
    proc = setup.run("--record", str(setup.root / "rec.jsonl"), stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 3, err
    tui = next(e for e in setup.seen() if e["role"] == "tui" and "remote" in e)
    server = next(e for e in setup.seen() if e["role"] == "app-server" and "pid" in e)
    # The TUI got the relay's socket, in a private directory; the app-server our directory.
    outer = Path(tui["remote"])
    assert outer.name == "tui.sock" and outer.parent.parent == setup.root
    assert server["cwd"] == str(setup.root)
    assert not tui["token"] and not server["token"]
    # Its request head came through without the compression offer.
    head = next(e["head"] for e in setup.seen() if "head" in e)
    assert head.startswith("GET /rpc HTTP/1.1") and "zstd" not in head
    # Nothing is left: the app-server, the command it started (in a session of its own),
    # the sockets and their directory, the socket and lock behind INNER's symlink.
    eventually(lambda: not alive(server["pid"]) and not alive(server["command"]), within=60)
    assert not outer.parent.exists()
    assert list(setup.daemon_dir.iterdir()) == []
    # The recording: the connection, the turn, the client's hang-up.
    entries = list(read_entries((setup.root / "rec.jsonl").read_bytes().splitlines()))
    assert [(r.state, r.cause) for r in timeline(entries)] == [
        ("working", "turn/started"),
        ("idle", "hangup"),
    ]


def test_after_exit_it_says_the_command_that_resumes_the_session(setup: Setup) -> None:
    """Before: only the TUI's own parting hint, ``codex --remote unix://…/tui.sock resume
    ID``, naming a socket gone with the session. The TUI unsubscribes from its thread on
    /exit; that thread is the one to resume, through the command."""
    unsubscribe = {"id": 7, "method": "thread/unsubscribe", "params": {"threadId": "th-1"}}
    setup.env["FAKE_TUI_SENDS"] = orjson.dumps([unsubscribe]).decode()
    proc = setup.run(stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 0, err
    assert err.decode().endswith(
        "codex-presence: the session ended, its running work with it, and the socket in"
        f" codex's hint is gone; resume with:\n  codex-presence codex -- {setup.codex} resume"
        " th-1\n"
    ), err
    # A resumed session says the same, not "resume th-1 resume th-1" (its arguments are
    # codex's to say, as its own hint does: only the executable is kept).
    proc = subprocess.Popen(
        [*setup.argv(), "resume", "th-1"], env=setup.env, cwd=setup.root, stderr=subprocess.PIPE
    )
    _, again = proc.communicate(timeout=EXITS_WITHIN)
    assert again.decode().endswith(f"codex-presence codex -- {setup.codex} resume th-1\n"), again
    # No unsubscribe seen (the TUI ended otherwise): nothing to say.
    del setup.env["FAKE_TUI_SENDS"]
    proc = setup.run(stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 0 and b"resume" not in err, err


def test_an_app_server_that_ignores_sigterm_is_killed_with_its_commands(setup: Setup) -> None:
    setup.env.update(FAKE_APP_SERVER="stubborn", FAKE_TUI="exit:0")
    proc = setup.run(stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 0, err
    server = next(e for e in setup.seen() if e["role"] == "app-server" and "pid" in e)
    eventually(lambda: not alive(server["pid"]) and not alive(server["command"]), within=60)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_are_forwarded_to_the_tui(setup: Setup, signum: signal.Signals) -> None:
    setup.env["FAKE_TUI"] = "wait"
    proc = setup.run(stderr=subprocess.PIPE)
    setup.first("tui", "received")
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 128 + signum, err


def test_the_app_server_dying_ends_the_session_and_says_so(setup: Setup) -> None:
    setup.env["FAKE_TUI"] = "wait"
    proc = setup.run(stderr=subprocess.PIPE)
    tui_pid = setup.first("tui", "pid")
    setup.first("tui", "received")
    os.kill(setup.first("app-server", "pid"), signal.SIGKILL)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 1
    said = err.decode()
    assert "codex app-server exited (status 137) while the TUI was running" in said
    assert "fake app-server: listening" in said  # its last words
    assert not alive(tui_pid)


def test_an_app_server_that_cannot_start_is_said(setup: Setup) -> None:
    setup.env["FAKE_APP_SERVER"] = "fail"
    proc = setup.run(stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 1
    assert "exited (status 3) before it listened" in err.decode()
    assert "boom: the fake app-server cannot start" in err.decode()
    # The TUI starts with the app-server (it waits for it in its first connection); it is
    # ended with the session.
    assert not any(alive(e["pid"]) for e in setup.seen() if e["role"] == "tui" and "pid" in e)


def test_a_codex_that_is_not_there(setup: Setup) -> None:
    argv = [sys.executable, "-m", "codex_presence", "codex", "--", str(setup.root / "nope")]
    proc = subprocess.run(
        argv, env=setup.env, capture_output=True, timeout=EXITS_WITHIN, check=False
    )
    assert proc.returncode == 127
    assert "cannot run" in proc.stderr.decode() and "nope" in proc.stderr.decode()


def test_while_the_tui_has_the_terminal_our_words_wait(setup: Setup) -> None:
    """On a terminal, what the command says (here: no token, so no reporting) comes after
    the TUI is done, not across its screen."""
    setup.env["FAKE_TUI"] = "exit:0"
    del setup.env["CODEX_PRESENCE_TOKEN"]
    master, slave = pty.openpty()
    try:
        proc = setup.run("--broker", "http://127.0.0.1:9", stdin=slave, stdout=slave, stderr=slave)
        os.close(slave)
        out = b""
        deadline = time.monotonic() + EXITS_WITHIN  # the TUI ends at once: the command must
        while proc.poll() is None or select.select([master], [], [], 0.1)[0]:
            assert time.monotonic() < deadline, f"still running after {EXITS_WITHIN} s: {out!r}"
            if select.select([master], [], [], 0.1)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:  # EIO: every writer is gone
                    break
    finally:
        os.close(master)
    assert proc.wait(EXITS_WITHIN) == 0
    text = out.decode()
    assert text.index("TUI START") < text.index("TUI END") < text.index("not reporting to")


def test_a_runtime_directory_that_cannot_hold_the_sockets_is_passed_over(setup: Setup) -> None:
    """``$XDG_RUNTIME_DIR`` where no directory can be made (/proc): the next base serves."""
    setup.env.update(XDG_RUNTIME_DIR="/proc", FAKE_TUI="exit:3")
    proc = setup.run(stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 3, err
    tui = next(e for e in setup.seen() if e["role"] == "tui" and "remote" in e)
    assert Path(tui["remote"]).parent.parent == setup.root  # $TMPDIR
    assert b"Traceback" not in err


def test_with_nowhere_for_the_sockets_it_says_so_in_one_line_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import anyio

    from codex_presence.agent.tui import launch as tui
    from codex_presence.agent.tui.session import TuiSession

    make = tui.private_directory
    with pytest.raises(OSError, match=r"^no directory for them \(/proc: .+; /sys: .+\)$"):
        make(["/proc", "/sys", "/proc"])
    monkeypatch.setattr(tui, "private_directory", lambda: make(["/proc"]))
    with signals_kept():
        launch = tui.launch_tui(["codex"])
        assert launch.tui is None and launch.app_server is None
        assert anyio.run(TuiSession(launch).run) == 1
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    said = record.getMessage()
    assert said == (
        "cannot make the session's sockets: no directory for them "
        "(/proc: No such file or directory)"
    )
    assert record.exc_info is None


SPAWN_SPY = """\
import os, sys
import codex_presence.agent.tui.launch as launch

def spy(*args, **kwargs):  # the TUI's spawn
    sys.stdout.write(" ".join(sorted(sys.modules)))
    sys.stdout.flush()
    os._exit(0)

launch.spawn = spy
from codex_presence.cli.main import main
main(["codex", "--", "codex"])
"""


@pytest.mark.codex
def test_the_tui_is_spawned_before_anything_slow_is_loaded(codex: Path) -> None:
    """Issue 27: what ``codex-presence codex`` loads before its spawn delays the TUI's first
    paint one for one. At the launch, none of the session's heavy parts are loaded: not the
    log, nor typing, anyio, the mapping (jsonrpcserver, jsonschema), the relay (wsproto) or
    the broker's client (httpx); nor the sockets' modules (socket, pathlib with
    urllib.parse, tempfile, shutil): the directory is made with ``os``, OUTER bound with
    ``_socket`` alone; nor json or hashlib's OpenSSL for finding npm's native codex (the real
    one, on PATH here)."""
    path = f"{codex.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    out = subprocess.run(
        [sys.executable, "-c", SPAWN_SPY],
        capture_output=True,
        text=True,
        timeout=EXITS_WITHIN,
        check=True,
        env={**os.environ, "PATH": path},
    )
    loaded = set(out.stdout.split())
    assert "codex_presence.cli.codex" in loaded  # the spy ran where the launch is
    slow = {
        "logging",
        "typing",
        "anyio",
        "asyncio",
        "jsonrpcserver",
        "jsonschema",
        "wsproto",
        "httpx",
        "codex_presence.core.codex.mapping",
        "codex_presence.agent.tui.session",
        "socket",
        "pathlib",
        "tempfile",
        "shutil",
        "json",
        "_hashlib",
    }
    assert loaded & slow == set()
    assert "_sha256" in loaded or "_sha2" in loaded  # the launcher was read: it is known


def test_the_app_server_has_a_session_of_its_own_and_the_tui_ours(setup: Setup) -> None:
    """Issue 27: the app-server is a server, not part of the terminal's job; in a session of
    its own (where Linux's autogroup shares CPU time by session) its start takes no CPU from
    the TUI's. The TUI stays in ours: it reads the terminal."""
    setup.env["FAKE_TUI"] = "exit:0"
    proc = setup.run(stderr=subprocess.PIPE, start_new_session=True)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 0, err
    tui = next(e for e in setup.seen() if e["role"] == "tui" and "pid" in e)
    server = next(e for e in setup.seen() if e["role"] == "app-server" and "pid" in e)
    assert tui["sid"] == proc.pid  # the session codex-presence leads here
    assert server["sid"] == server["pid"] != proc.pid


def test_when_outer_cannot_listen_nothing_is_spawned_and_it_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """OUTER listens before the TUI's spawn (a TUI that connects before it listened would
    find no socket and exit); a bind that fails is said in one line, status 1, and no
    child ran."""
    import anyio

    from codex_presence.agent.tui import launch as tui
    from codex_presence.agent.tui.session import TuiSession

    def cannot_listen(path: str) -> None:
        raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE), path)

    codex = tmp_path / "codex"
    codex.write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'ran'}\nexec sleep 30\n")
    codex.chmod(0o755)
    monkeypatch.setattr(tui, "listen", cannot_listen)
    with signals_kept():
        launch = tui.launch_tui([str(codex)], {**os.environ, "TMPDIR": str(tmp_path)})
        assert launch.tui is None and launch.app_server is None
        assert anyio.run(TuiSession(launch).run) == 1
    assert not (tmp_path / "ran").exists()
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.getMessage().startswith("cannot make the session's sockets: ")
    assert record.getMessage().endswith("tui.sock: Address already in use")
    assert not Path(launch.outer).parent.exists()


def test_the_tui_finds_its_socket_listening_however_soon_it_connects(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CI saw the stand-in TUI, which connects as soon as it runs, exit on ENOENT: OUTER
    was bound after the spawns, and under load this process got the CPU back late. OUTER
    listens before the TUI is spawned, whenever the TUI connects."""
    import stat

    from codex_presence.agent.tui import launch as tui

    listening_at_the_tui_spawn: list[bool] = []
    spawn = tui.spawn

    def spawn_and_look(argv: list[str], **kwargs: Any) -> Any:
        if argv[1] == "--remote":
            outer = Path(argv[2].removeprefix("unix://"))
            listening_at_the_tui_spawn.append(
                outer.exists() and stat.S_ISSOCK(outer.stat().st_mode)
            )
        return spawn(argv, **kwargs)

    codex = tmp_path / "codex"
    codex.write_text("#!/bin/sh\nexec sleep 30\n")
    codex.chmod(0o755)
    monkeypatch.setattr(tui, "spawn", spawn_and_look)
    with launched([str(codex)], {**os.environ, "TMPDIR": str(tmp_path)}) as launch:
        assert launch.error is None and launch.listener is not None
    assert listening_at_the_tui_spawn == [True]


def _autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def _autogrouped() -> bool:
    flag = Path("/proc/sys/kernel/sched_autogroup_enabled")
    return flag.exists() and flag.read_text().strip() == "1"


def test_the_app_server_yields_the_cpu_to_the_tui_from_its_spawn(tmp_path: Path) -> None:
    """Issue 27: the app-server's start ran beside the TUI's with as large a CPU share (its
    own session's autogroup); the TUI's threads waited twice as long for a CPU as plain
    codex's. From its spawn its session has the lowest weight (where the kernel groups by
    session; elsewhere nothing changes)."""

    codex = tmp_path / "codex"
    codex.write_text("#!/bin/sh\nexec sleep 30\n")
    codex.chmod(0o755)
    with launched([str(codex)], {**os.environ, "TMPDIR": str(tmp_path)}) as launch:
        assert launch.error is None and launch.app_server is not None
        assert launch.app_server_yields == _autogrouped()
        assert _autogroup_nice(launch.app_server.pid) == (19 if _autogrouped() else 0)


def test_once_the_tui_connects_the_app_server_has_its_share_again(setup: Setup) -> None:
    """The TUI has painted when it connects; from then the app-server answers it, with the
    CPU weight of any other session."""
    setup.env["FAKE_TUI"] = "wait"
    proc = setup.run(stderr=subprocess.PIPE)
    try:
        server = setup.first("app-server", "pid")
        setup.first("tui", "received")  # connected, through the relay
        eventually(lambda: _autogroup_nice(server) == 0, what="the app-server's share back")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=EXITS_WITHIN)


def test_the_socket_directory_of_a_killed_session_is_swept_at_the_next_start() -> None:
    """After SIGKILL, the session's socket directory stayed in the temporary directory for
    good. The next session's start removes it: ours (same uid), its owner gone; never a
    live session's, another user's, nor a symlink."""
    with short_tempdir() as tmp_path:
        _the_socket_directory_of_a_killed_session_is_swept(tmp_path)


def _the_socket_directory_of_a_killed_session_is_swept(tmp_path: Path) -> None:
    from codex_presence.agent.tui.sockets import private_directory, sweep_beside

    make_and_die = (
        "import os, signal, sys; from codex_presence.agent.tui.sockets import private_directory; "
        "open(os.path.join(private_directory([sys.argv[1]]), 'app-server.sock'), 'w'); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    killed = subprocess.run(
        [sys.executable, "-c", make_and_die, str(tmp_path)], capture_output=True, check=False
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (left,) = tmp_path.iterdir()
    live = tmp_path / f"codex-presence-{os.getpid()}-abcdefgh"
    live.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    foreign = tmp_path / f"codex-presence-{gone.pid}-abcdefgh"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / f"codex-presence-{gone.pid}-symlinkk"
    link.symlink_to(elsewhere)
    made = Path(private_directory([str(tmp_path)]))
    assert made.name.startswith(f"codex-presence-{os.getpid()}-")
    assert left.exists()  # not before the TUI's spawn: the session sweeps once it runs
    sweep_beside(made)
    assert not left.exists()
    assert sorted(tmp_path.iterdir()) == sorted([live, foreign, elsewhere, link, made])


def test_when_the_kernel_refuses_to_lower_its_share_the_app_server_runs_as_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An unprivileged user may change an autogroup's weight once a tenth of a second,
    system-wide (EAGAIN): the launch goes on, the app-server keeps its share."""
    from codex_presence.agent.tui import launch as tui

    def refused(pid: int, nice: int) -> bool:
        raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    monkeypatch.setattr(tui, "set_autogroup_nice", refused)
    monkeypatch.setattr(tui, "_autogrouped", lambda: True)  # as where the kernel has it
    codex = tmp_path / "codex"
    codex.write_text("#!/bin/sh\nexec sleep 30\n")
    codex.chmod(0o755)
    with launched([str(codex)], {**os.environ, "TMPDIR": str(tmp_path)}) as launch:
        assert launch.error is None and launch.listener is not None
        assert launch.app_server is not None and not launch.app_server_yields


@pytest.mark.parametrize("whose", ["theirs", "writable by others"])
def test_a_temporary_directory_another_user_owns_or_can_write_holds_no_socket_of_ours(
    setup: Setup, whose: str
) -> None:
    """The sockets' private directory, in a ``$TMPDIR`` another user owns (or may write,
    not sticky), could be swapped for theirs between its creation and the TUI's connect:
    the TUI would talk to their socket. Such a base is passed over, the next one serves."""
    theirs = setup.root / "theirs"
    theirs.mkdir()
    if whose == "theirs":
        os.chown(theirs, OTHER_UID, OTHER_UID)
    else:
        theirs.chmod(0o777)
    setup.env.update(TMPDIR=str(theirs), FAKE_TUI="exit:3")
    proc = setup.run(stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EXITS_WITHIN)
    assert proc.returncode == 3, err
    tui = next(e for e in setup.seen() if e["role"] == "tui" and "remote" in e)
    assert theirs not in Path(tui["remote"]).parents, tui
    assert list(theirs.iterdir()) == []
