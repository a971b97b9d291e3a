"""``codex-presence codex`` starts the app-server's native codex without npm's node launcher
when it can tell for certain what the launcher would run (issue 27;
:mod:`codex_presence.agent.tui.native`): the same program, arguments and environment, for
every installed codex version; and the launcher itself whenever anything is uncertain.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from codex_presence.agent import native
from codex_presence.agent.native import native_codex
from codex_presence.agent.watchdog import descendants
from tests.support.tui_driver import FIRST_PAINT, Tui, presence_command, short_tempdir, tui_home
from tests.support.tui_launch import launched
from tests.support.waiting import WAIT, eventually


@dataclass
class Started:
    exe: str
    argv: list[str]
    env: dict[str, str]
    nodes: int = 0
    """How many node processes the tree held (npm's launcher, on node < 22.15)."""
    signals: dict[str, int] | None = None
    """Its ignored and blocked signals (:func:`_signal_masks`), where a test reads them."""


def _native_process(proc: subprocess.Popen[bytes], socket: Path) -> Started:
    """The process of ``proc``'s tree that runs a native codex (node's child, or ``proc``
    itself once node has exec'd it), once the app-server listens on ``socket``."""
    eventually(lambda: socket.exists() or proc.poll() is not None, within=60, what="listening")
    assert proc.poll() is None, f"the app-server exited with {proc.returncode}"
    tree = [proc.pid, *descendants(proc.pid)]
    exes: dict[int, Path] = {}
    for pid in tree:
        with suppress(OSError):  # a watchdog's short-lived helper, gone already
            exes[pid] = Path(f"/proc/{pid}/exe").readlink()
    nodes = sum(exe.name.startswith("node") for exe in exes.values())
    for pid, exe in exes.items():
        if exe.name == "codex":
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            raw = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")[:-1]
            return Started(str(exe), argv, dict(entry.split("=", 1) for entry in raw), nodes)
    raise AssertionError(f"no native codex under pid {proc.pid}")


def _start(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=WAIT)


@pytest.mark.codex
def test_the_app_server_is_the_same_program_with_or_without_the_launcher(codex: Path) -> None:
    """The app-server that npm's launcher starts, the one started directly, and the one
    ``wrap -- codex app-server`` starts (its process, found under the command) are the same
    process image: executable, arguments, environment (a stale package-manager flag of
    ours removed by all)."""
    with short_tempdir("cpn-") as root:
        (root / "home").mkdir()
        env = {
            **os.environ,
            "PATH": f"{codex.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
            "CODEX_HOME": str(root / "home"),
            "CODEX_MANAGED_BY_PNPM": "1",
        }
        env.pop("NODE_OPTIONS", None)
        found = native_codex("codex", env)
        assert found is not None, "the launcher of an installed codex was not recognised"
        binary, native_env = found
        seen: list[Started] = []
        for name, (program, program_env) in {
            "launcher": (["codex"], env),
            "native": ([binary], native_env),
            "wrap": ([sys.executable, "-m", "codex_presence", "wrap", "--", "codex"], env),
        }.items():
            socket = root / f"{name}.sock"
            proc = _start(
                [*program, "app-server", "--listen", f"unix://{socket}"], program_env, root
            )
            try:
                started = _native_process(proc, socket)
            finally:
                _stop(proc)
            started.argv[-1] = started.argv[-1].replace(f"{name}.sock", "SOCKET")
            seen.append(started)
        through_launcher, direct, wrapped = seen
        assert direct.exe == through_launcher.exe == wrapped.exe == os.path.realpath(binary)
        assert (
            direct.argv
            == through_launcher.argv
            == wrapped.argv
            == [binary, "app-server", "--listen", "unix://" + str(root / "SOCKET")]
        )
        assert direct.env == through_launcher.env == wrapped.env
        assert direct.nodes == wrapped.nodes == 0  # wrap's start pays no node
        assert (
            direct.env["CODEX_MANAGED_BY_NPM"] == "1" and "CODEX_MANAGED_BY_PNPM" not in direct.env
        )


IGNORED_BY_THE_CALLER = "trap '' HUP INT QUIT USR1; exec \"$@\""
"""A shell that starts its command with signals ignored, as ``nohup`` does (HUP), a
non-interactive shell does for a job it starts in the background (INT, QUIT), or any
program may (USR1): dispositions an ``exec`` passes on."""


def _signal_masks(pid: int) -> dict[str, int]:
    """``pid``'s ignored and blocked signals among the standard ones (1-31: glibc's
    ``posix_spawn`` ignores its own two real-time signals in every program it starts)."""
    masks: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigIgn", "SigBlk"):
            masks[key] = int(value, 16) & 0x7FFFFFFF
    return masks


@pytest.mark.codex
def test_the_app_server_gets_the_signals_the_launcher_would_give_it(codex: Path) -> None:
    """node sets every signal back to its default before it runs codex (its start does so,
    and so does libuv's spawn on node < 22.15): a codex started by npm's launcher from a
    caller that ignores some signals ends on them all the same. Started without node, the
    native codex must get them the same way. (wrap's own handlers already reset those it
    forwards; SIGQUIT and SIGUSR1 came through ignored.)"""
    with short_tempdir("cps-") as root:
        (root / "home").mkdir()
        env = {
            **os.environ,
            "PATH": f"{codex.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
            "CODEX_HOME": str(root / "home"),
        }
        env.pop("NODE_OPTIONS", None)
        assert native_codex("codex", env) is not None
        masks: dict[str, dict[str, int]] = {}
        for name, program in {
            "launcher": ["codex"],
            "wrap": [sys.executable, "-m", "codex_presence", "wrap", "--", "codex"],
        }.items():
            socket = root / f"{name}.sock"
            argv = ["sh", "-c", IGNORED_BY_THE_CALLER, "sh", *program]
            proc = _start([*argv, "app-server", "--listen", f"unix://{socket}"], env, root)
            try:
                started = _native_process(proc, socket)
                pid = next(
                    p
                    for p in [proc.pid, *descendants(proc.pid)]
                    if Path(f"/proc/{p}/exe").readlink() == Path(started.exe)
                )
                masks[name] = _signal_masks(pid)
            finally:
                _stop(proc)
    caller_ignores = sum(
        1 << (signum - 1)
        for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1)
    )
    assert masks["launcher"]["SigIgn"] & caller_ignores == 0  # node put them back
    assert masks["wrap"] == masks["launcher"], masks


def _tui_process(tui: Tui) -> Started:
    """The pane's native codex TUI (not an app-server), once it has painted."""
    tui.wait_for(FIRST_PAINT, timeout=60)
    found: Started | None = None
    nodes = 0
    for pid in descendants(tui.pane_pid()):
        with suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
            exe = str(Path(f"/proc/{pid}/exe").readlink())
            nodes += Path(exe).name.startswith("node")
            if found is None and Path(exe).name == "codex" and "app-server" not in argv:
                raw = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")[:-1]
                found = Started(exe, argv, dict(entry.split("=", 1) for entry in raw))
                found.signals = _signal_masks(pid)
    assert found is not None, "no native codex TUI in the pane"
    found.nodes = nodes
    return found


@pytest.mark.codex
def test_the_tui_is_the_program_plain_codex_runs(codex: Path) -> None:
    """The TUI that ``codex-presence codex`` starts without node is the process npm's
    launcher starts for plain ``codex``: the same executable, environment (beside the
    launcher's two variables, only tmux's own) and signals (both started by a shell that
    ignores some: :data:`IGNORED_BY_THE_CALLER`), with ``--remote`` to the relay added to
    the arguments as given."""
    seen: dict[str, Started] = {}
    with short_tempdir("cpt-") as root:
        home = tui_home(root, "http://127.0.0.1:9")
        env = home.env | {"PATH": f"{codex.parent}{os.pathsep}{home.env.get('PATH', '')}"}
        for way, argv in {
            "plain": ["codex", "-c", "model=plain-and-native"],
            "command": [*presence_command(Path("codex")), "-c", "model=plain-and-native"],
        }.items():
            (root / way).mkdir()  # a tmux server of its own each
            argv = ["sh", "-c", IGNORED_BY_THE_CALLER, "sh", *argv]
            tui = Tui(argv, env=env, cwd=home.work, sock_dir=root / way)
            try:
                seen[way] = _tui_process(tui)
            finally:
                tui.close()
    plain, command = seen["plain"], seen["command"]
    assert command.exe == plain.exe and Path(plain.exe).name == "codex"
    assert plain.argv[1:] == ["-c", "model=plain-and-native"]
    assert command.argv[0] == plain.argv[0]
    assert command.argv[1] == "--remote" and command.argv[2].startswith("unix://")
    assert command.argv[3:] == plain.argv[1:]
    differ = {
        k for k in plain.env.keys() | command.env.keys() if plain.env.get(k) != command.env.get(k)
    }
    assert differ <= {"TMUX"}, differ  # each pane has a tmux server of its own
    assert command.signals == plain.signals, (command.signals, plain.signals)
    assert command.env["CODEX_MANAGED_BY_NPM"] == "1"
    assert command.nodes == 0  # node's start is off the way to the first paint


LAUNCHER_TEXT = b'#!/bin/sh\necho "launcher $0 $*" >> "$SEEN"\nexec sleep 30\n'


@dataclass
class Tree:
    """An npm prefix laid out as npm installs codex, its launcher a stand-in."""

    prefix: Path
    bin: Path
    binary: Path
    env: dict[str, str]


@pytest.fixture
def tree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Tree]:
    prefix = tmp_path / "lib"
    modules = prefix / "node_modules"
    launcher = modules / "@openai" / "codex" / "bin" / "codex.js"
    launcher.parent.mkdir(parents=True)
    launcher.write_bytes(LAUNCHER_TEXT)
    launcher.chmod(0o755)
    bin_dir = modules / ".bin"
    bin_dir.mkdir()
    (bin_dir / "codex").symlink_to("../@openai/codex/bin/codex.js")
    target = {"x86_64": "x86_64-unknown-linux-musl", "aarch64": "aarch64-unknown-linux-musl"}
    triple = target.get(os.uname().machine)
    if triple is None:
        pytest.skip(f"npm's codex has no Linux build for {os.uname().machine}")
    platform = modules / "@openai" / f"codex-linux-{'x64' if 'x86' in triple else 'arm64'}"
    binary = platform / "vendor" / triple / "bin" / "codex"
    binary.parent.mkdir(parents=True)
    binary.write_text('#!/bin/sh\necho "native $0 $*" >> "$SEEN"\nexec sleep 30\n')
    binary.chmod(0o755)
    (platform / "package.json").write_text('{"name": "@openai/codex"}')
    digest = hashlib.sha256(LAUNCHER_TEXT).hexdigest()
    monkeypatch.setattr(native, "KNOWN_LAUNCHERS", frozenset({digest}))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SEEN": str(tmp_path / "seen"),
        "CODEX_MANAGED_BY_BUN": "1",
    }
    yield Tree(prefix, bin_dir, binary, env)


def test_a_known_launcher_is_resolved_as_node_would(tree: Tree) -> None:
    found = native_codex("codex", tree.env)
    assert found == (
        str(tree.binary),
        {
            "PATH": tree.env["PATH"],
            "SEEN": tree.env["SEEN"],
            "CODEX_MANAGED_PACKAGE_ROOT": str(tree.prefix / "node_modules/@openai/codex"),
            "CODEX_MANAGED_BY_NPM": "1",
        },
    )
    # Named by its path, the launcher is the same; PATH plays no part then.
    assert native_codex(str(tree.bin / "codex"), tree.env | {"PATH": "/bin"}) == (
        found[0],
        found[1] | {"PATH": "/bin"},
    )


def _unknown_launcher(tree: Tree) -> None:
    (tree.prefix / "node_modules/@openai/codex/bin/codex.js").write_bytes(LAUNCHER_TEXT + b"#\n")


def _vite_plus(tree: Tree) -> None:
    """Its installs live under a ``packages`` directory."""
    tree.prefix.rename(tree.prefix.with_name("packages"))
    tree.env["PATH"] = tree.env["PATH"].replace("/lib/", "/packages/")


UNCERTAIN: dict[str, Callable[[Tree], object]] = {
    "an unknown launcher": _unknown_launcher,
    "pnpm's install": lambda t: (t.prefix / "node_modules/.modules.yaml").write_text(""),
    "a Vite+ install": _vite_plus,
    "an exports map": lambda t: (t.binary.parents[3] / "package.json").write_text(
        '{"exports": {}}'
    ),
    "no native binary": lambda t: t.binary.unlink(),
    "NODE_OPTIONS": lambda t: t.env.update(NODE_OPTIONS="--preserve-symlinks-main"),
    "bun's user agent": lambda t: t.env.update(npm_config_user_agent="bun/1.2.0 npm/?"),
    "not on PATH": lambda t: t.env.update(PATH="/usr/bin:/bin"),
}


@pytest.mark.parametrize("case", list(UNCERTAIN))
def test_anything_uncertain_leaves_the_launcher_to_run(tree: Tree, case: str) -> None:
    assert native_codex("codex", tree.env) is not None
    UNCERTAIN[case](tree)
    assert native_codex("codex", tree.env) is None


@pytest.mark.parametrize("known", [True, False], ids=["known launcher", "unknown launcher"])
def test_the_command_starts_the_tui_and_its_app_server_as_the_launcher_would(
    tree: Tree, known: bool
) -> None:
    """What ``codex-presence codex`` spawns: the TUI and its app-server both as a known
    launcher would have run them (node's start is off the way to the first paint), or both
    through the launcher when it is not one we have read."""
    if not known:
        _unknown_launcher(tree)
    program, way = (tree.binary, "native") if known else (tree.bin / "codex", "launcher")
    with launched(["codex", "--flag"], tree.env | {"TMPDIR": str(tree.prefix)}) as launch:
        assert launch.error is None and launch.tui and launch.app_server
        assert launch.listener is not None
        seen = Path(tree.env["SEEN"])
        eventually(lambda: seen.exists() and len(seen.read_text().splitlines()) == 2)
        assert sorted(seen.read_text().splitlines()) == [
            f"{way} {program} --remote unix://{launch.outer} --flag",
            f"{way} {program} app-server --listen unix://{launch.inner}",
        ]
