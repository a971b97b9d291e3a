"""Runs the real ``codex`` TUI in a pseudo-terminal (tmux), offline, against the fake model.

Pieces, each usable alone:

* :func:`tui_home` makes a private ``CODEX_HOME`` and work directory configured for the
  fake Responses-API model (the config of :class:`tests.support.codex_driver.Config`) plus what the
  TUI itself asks on a first start, so that it starts straight into the composer:
  ``[tui] screen_reader_detection_done`` (else it probes and writes it on first start) and
  ``[projects."<work>"] trust_level = "trusted"`` (else a git work directory gets the
  "Trust this folder?" screen). Login is never asked: the mock provider needs no auth.
  The environment is that of :func:`tests.support.codex_driver.session`: ``HOME`` and
  ``CODEX_HOME`` private, every proxy variable at a dead loopback port (plugin and update
  fetches fail at once), ``NO_PROXY`` for the model on 127.0.0.1.
* :class:`AppServer` runs ``codex app-server --listen unix://PATH`` in the work directory.
* :class:`Tui` runs one command (``codex --remote unix://PATH`` or plain ``codex``) in a
  detached tmux session on a private tmux socket: keys in (``send-keys``), screen out
  (``capture-pane``), exit status kept (``remain-on-exit``).
* :data:`SCENARIOS` and :func:`record` drive the issue-16 scenarios through the relay
  probe (:mod:`tests.support.ws_relay_probe`) and save recording, wire log and screens.

``python -m tests.support.tui_driver [--codex BIN] [--out DIR] [NAME ...]`` records scenarios.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.from_thread
import orjson

from tests.support.codex_driver import Config, codex_binary
from tests.support.fake_model import FakeModel, Step, exec_command, message, reply, user_texts
from tests.support.ws_relay_probe import RelayProbe, running_relay

__all__ = [
    "SCENARIOS",
    "AppServer",
    "Tui",
    "TuiHome",
    "codex_version",
    "record",
    "short_tempdir",
    "tui_home",
]

COMPOSER = "Ask Codex to do anything"
"""The composer's placeholder. It shows while the session still loads, too."""
FIRST_PAINT = "OpenAI Codex"
"""The header: the first thing the TUI draws."""
READY = "mock-model default"
"""The footer once the session is loaded (model and effort): ready for a prompt."""
TITLE_PROMPT = "single-line task title"
"""Text of the prompt of the TUI's side thread that names a task."""

ROOT = Path(__file__).resolve().parents[2]


def codex_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


@contextmanager
def short_tempdir(prefix: str = "cp-") -> Iterator[Path]:
    """A private directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class TuiHome:
    root: Path
    home: Path
    work: Path
    env: dict[str, str]


def tui_home(
    root: Path,
    base_url: str,
    config: Config | None = None,
    *,
    trust: bool = True,
    skip_screen_reader_probe: bool = True,
    git: bool = True,
) -> TuiHome:
    """A fresh private ``CODEX_HOME`` (``root/home``) and work directory (``root/work``)."""
    home, work = root / "home", root / "work"
    for path in (home, work):
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    if git:  # the user's directory usually is a repository; the TUI treats it apart
        subprocess.run(["git", "init", "-q", str(work)], check=True)
    text = (config or Config()).toml(base_url)
    if skip_screen_reader_probe:
        text += "\n[tui]\nscreen_reader_detection_done = true\n"
    if trust:
        text += f'\n[projects."{work}"]\ntrust_level = "trusted"\n'
    (home / "config.toml").write_text(text)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("CODEX_", "OPENAI_", "RUST_", "TMUX"))
    }
    dead = "http://127.0.0.1:9"
    env.update(
        HOME=str(home),
        CODEX_HOME=str(home),
        CODEX_APP_SERVER_MANAGED_CONFIG_PATH=str(home / "managed_config.toml"),
        HTTPS_PROXY=dead,
        HTTP_PROXY=dead,
        https_proxy=dead,
        http_proxy=dead,
        ALL_PROXY=dead,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        RUST_LOG="warn",
        TERM="xterm-256color",
        LANG="C.UTF-8",
    )
    return TuiHome(root, home, work, env)


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (from /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


class AppServer:
    """``codex app-server --listen unix://PATH`` in the work directory, own process group."""

    def __init__(self, binary: Path, home: TuiHome, socket_path: Path, log: Path) -> None:
        self.socket = socket_path
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [str(binary), "app-server", "--listen", f"unix://{socket_path}"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            cwd=home.work,
            env=home.env,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 20.0) -> float:
        """Seconds until the socket accepts connections."""
        import socket

        start = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app-server exited with {self.proc.returncode}")
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(self.socket))
                except OSError:
                    pass
                else:
                    return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise TimeoutError("app-server socket never came up")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the app-server and everything it started. Its commands (background
        terminals too) run in process groups of their own, so its group is not enough."""
        doomed = [self.proc.pid, *descendants(self.proc.pid)]
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in doomed:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        self.kill()
        self._log.close()


class Tui:
    """One command in a detached tmux session of its own tmux server."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        sock_dir: Path,
        width: int = 120,
        height: int = 40,
    ) -> None:
        self.argv = argv
        self._socket = sock_dir / "tmux.sock"
        conf = sock_dir / "tmux.conf"
        conf.write_text("set -g remain-on-exit on\nset -g history-limit 5000\n")
        self._env = env
        self._status = sock_dir / "tui.status"
        self._status.unlink(missing_ok=True)
        self.started = time.monotonic()
        # The tmux server starts with this environment; the pane inherits it.
        self._tmux(
            "-f",
            str(conf),
            "new-session",
            "-d",
            "-s",
            "tui",
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(cwd),
            "--",
            # The status through a file: tmux sometimes leaves the dead command unreaped
            # (pane_dead=1 with no pane_dead_status).
            "/bin/sh",
            "-c",
            '"$@"; echo $? > "$0"',
            str(self._status),
            *argv,
        )
        self.screens: list[tuple[float, str, str]] = []
        """(seconds since start, label, screen text) of every :meth:`snap`."""

    def _tmux(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(
            ["tmux", "-S", str(self._socket), *args],
            capture_output=True,
            text=True,
            env=self._env,
            check=False,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {out.stderr.strip()}")
        return out.stdout

    # -- screen ----------------------------------------------------------------------------

    def screen(self) -> str:
        """The visible screen as text, trailing blanks removed."""
        text = self._tmux("capture-pane", "-p", "-t", "tui")
        return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")

    def snap(self, label: str) -> str:
        text = self.screen()
        self.screens.append((time.monotonic() - self.started, label, text))
        return text

    def wait_for(
        self, pattern: str, timeout: float = 20.0, *, regex: bool = False, gone: bool = False
    ) -> float:
        """Poll the screen until ``pattern`` is on it (or, with ``gone``, no longer is);
        returns the seconds since the TUI started."""
        deadline = time.monotonic() + timeout
        found = re.compile(pattern).search if regex else (lambda s: pattern in s)
        while True:
            text = self.screen()
            if bool(found(text)) != gone:
                return time.monotonic() - self.started
            if time.monotonic() > deadline:
                self.screens.append((time.monotonic() - self.started, f"TIMEOUT {pattern}", text))
                raise TimeoutError(f"screen never {'lost' if gone else 'showed'} {pattern!r}")
            time.sleep(0.01)

    # -- keys ------------------------------------------------------------------------------

    def keys(self, *keys: str) -> None:
        """tmux key names: ``Enter``, ``Escape``, ``y``, ``C-c``…"""
        self._tmux("send-keys", "-t", "tui", *keys)

    def type(self, text: str) -> None:
        """Literal text, as typed (not a paste)."""
        for char in text:
            self._tmux("send-keys", "-t", "tui", "-l", char)
            time.sleep(0.01)

    def prompt(self, text: str, before_enter: Callable[[], object] | None = None) -> None:
        self.type(text)
        time.sleep(0.2)  # past the TUI's paste-burst window, so Enter submits
        if before_enter is not None:
            before_enter()
        self.keys("Enter")

    # -- process ---------------------------------------------------------------------------

    def exit_status(self) -> int | None:
        """The command's exit status once it ended, else None."""
        try:
            text = self._status.read_text()
        except FileNotFoundError:
            return None
        return int(text) if text.endswith("\n") else None

    def wait_exit(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while (status := self.exit_status()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the TUI did not exit")
            time.sleep(0.05)
        return status

    def close(self) -> None:
        self._tmux("kill-server", check=False)


# -- scenarios -----------------------------------------------------------------------------


def is_title(body: dict[str, Any]) -> bool:
    return any(TITLE_PROMPT in text for text in user_texts(body))


def main_turn(body: dict[str, Any]) -> bool:
    return not is_title(body)


APPROVALS = Config(approval_policy="on-request", sandbox_mode="read-only")
NO_APPROVALS = Config(approval_policy="never", sandbox_mode="danger-full-access")


@dataclass
class Session:
    """What a scenario drives: the TUI, the relay, the model, the app-server."""

    tui: Tui
    relay: RelayProbe
    model: FakeModel
    server: AppServer
    home: TuiHome
    portal: anyio.from_thread.BlockingPortal
    marks: list[tuple[float, str]] = field(default_factory=list)

    def mark(self, what: str) -> None:
        """A timestamp on the recording's clock, for the expected timeline."""
        self.marks.append((self.relay.now(), what))

    def prompt(self, text: str) -> None:
        """Type ``text`` and press Enter; the mark is the moment of the Enter key."""
        self.tui.prompt(text, before_enter=lambda: self.mark(f"Enter {text}"))


@dataclass
class Scenario:
    name: str
    about: str
    steps: Callable[[], list[Step]]
    drive: Callable[[Session], None]
    config: Config = field(default_factory=lambda: APPROVALS)


SCENARIOS: dict[str, Scenario] = {}


def _scenario(
    about: str, steps: Callable[[], list[Step]], config: Config = APPROVALS
) -> Callable[[Callable[[Session], None]], Callable[[Session], None]]:
    def register(fn: Callable[[Session], None]) -> Callable[[Session], None]:
        SCENARIOS[fn.__name__] = Scenario(fn.__name__, about, steps, fn, config)
        return fn

    return register


def _title(text: str = "Probe task") -> Step:
    return message(text, deltas=0, match=is_title)


def _approval_steps() -> list[Step]:
    return [
        _title(),
        reply(
            exec_command("touch made.txt && echo done", call_id="call_touch", escalate=True),
            match=main_turn,
        ),
        message("Finished.", match=main_turn),
    ]


APPROVAL_SCREEN = "Would you like to run the following command?"


def _exit(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.tui.wait_for(READY)
    s.prompt("/exit")
    s.tui.wait_exit()
    s.tui.snap("after /exit")


@_scenario(
    "A command that needs approval; the user presses y; it runs; the model answers; /exit.",
    _approval_steps,
)
def approval_accepted(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make a file")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.tui.snap("approval")
    s.mark("y")
    s.tui.keys("y")
    s.tui.wait_for("Finished.")
    s.tui.snap("answered")
    _exit(s)


@_scenario(
    "A command that needs approval; the user declines (Esc: 'No, and tell Codex what to do "
    "differently'); /exit.",
    _approval_steps,
)
def approval_denied(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make a file")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.tui.snap("approval")
    s.mark("Escape")
    s.tui.keys("Escape")
    s.tui.wait_for(APPROVAL_SCREEN, gone=True)
    time.sleep(1.0)
    s.tui.snap("declined")
    _exit(s)


def _long_command_steps() -> list[Step]:
    return [
        _title(),
        reply(
            exec_command(
                "echo started; sleep 40; echo ended", call_id="call_sleep", yield_time_ms=30000
            ),
            match=main_turn,
        ),
        message("Stopped.", match=main_turn),
    ]


@_scenario(
    "A 40 s command runs (no approval); the user presses Esc; the turn is interrupted and the "
    "command goes on; /exit while it runs.",
    _long_command_steps,
    NO_APPROVALS,
)
def esc_during_command(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("sleep a while")
    s.tui.wait_for("esc to interrupt")
    time.sleep(1.5)
    s.tui.snap("running")
    s.mark("Escape")
    s.tui.keys("Escape")
    s.tui.wait_for("interrupted", timeout=10, regex=False)
    time.sleep(1.0)
    s.tui.snap("interrupted")
    _exit(s)


@_scenario(
    "An approval is pending when the relay drops the connection (test only); the TUI "
    "reconnects and shows the approval again; the user presses y; /exit.",
    _approval_steps,
)
def reconnect_pending_approval(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make a file")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.tui.snap("approval")
    s.mark("drop")
    before = s.relay.connections
    assert s.portal.call(s.relay.drop) == 1
    deadline = time.monotonic() + 10
    while s.relay.connections == before and time.monotonic() < deadline:
        time.sleep(0.01)
    s.mark("reconnected")
    time.sleep(1.5)
    s.tui.snap("after reconnect")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.mark("y")
    s.tui.keys("y")
    s.tui.wait_for("Finished.")
    s.tui.snap("answered")
    _exit(s)


def _two_approval_steps() -> list[Step]:
    return [
        _title(),
        reply(
            exec_command("touch one.txt && echo one", call_id="call_one", escalate=True),
            match=main_turn,
        ),
        reply(
            exec_command("touch two.txt && echo two", call_id="call_two", escalate=True),
            match=main_turn,
        ),
        message("Finished.", match=main_turn),
    ]


@_scenario(
    "Two approvals in one turn: the first answered y; the relay drops the connection while "
    "the second is pending (test only); the TUI reconnects; y; /exit. Tells whether the "
    "re-sent request keeps its id when the server's counter is past 0.",
    _two_approval_steps,
)
def reconnect_second_approval(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make two files")
    s.tui.wait_for("touch one.txt")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.mark("y 1")
    s.tui.keys("y")
    s.tui.wait_for("touch two.txt")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.tui.snap("second approval")
    s.mark("drop")
    before = s.relay.connections
    assert s.portal.call(s.relay.drop) == 1
    deadline = time.monotonic() + 10
    while s.relay.connections == before and time.monotonic() < deadline:
        time.sleep(0.01)
    s.mark("reconnected")
    time.sleep(1.5)
    s.tui.snap("after reconnect")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.mark("y 2")
    s.tui.keys("y")
    s.tui.wait_for("Finished.")
    s.tui.snap("answered")
    _exit(s)


@_scenario(
    "/exit while a turn's 40 s command runs: unsubscribe, close frame, the TUI ends; the "
    "app-server's turn goes on.",
    _long_command_steps,
    NO_APPROVALS,
)
def exit_while_working(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("sleep a while")
    s.tui.wait_for("esc to interrupt")
    time.sleep(1.5)
    s.tui.snap("running")
    s.prompt("/exit")
    s.tui.wait_exit()
    s.tui.snap("after /exit")
    time.sleep(1.0)  # what the app-server still says, if anything, after the close


def _title_steps() -> list[Step]:
    return [
        message("Slow title", deltas=0, wait=3.0, match=is_title),
        message("First answer.", match=main_turn),
        message("Second answer.", match=main_turn),
    ]


@_scenario(
    "Two prompts, no tools; the model takes 3 s to answer the TUI's title side thread, so it "
    "outlives the first turn; /exit.",
    _title_steps,
    NO_APPROVALS,
)
def title_thread_slow(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("first question")
    s.tui.wait_for("First answer.")
    s.mark("first answer shown")
    s.tui.snap("first answer")
    time.sleep(4.0)
    s.tui.snap("title done")
    s.prompt("second question")
    s.tui.wait_for("Second answer.")
    s.mark("second answer shown")
    time.sleep(1.0)
    s.tui.snap("second answer")
    _exit(s)


def _drop_then_prompt(settle: float) -> Callable[[Session], None]:
    def drive(s: Session) -> None:
        s.tui.wait_for(COMPOSER)
        time.sleep(settle)
        s.mark("drop")
        assert s.portal.call(s.relay.drop) == 1
        time.sleep(1.5)
        s.tui.snap("after drop")
        s.prompt("are you there")
        time.sleep(3.0)
        s.tui.snap("after prompt")
        s.prompt("/exit")
        try:
            s.tui.wait_exit(timeout=5)
        except TimeoutError:
            s.mark("C-c")
            s.tui.keys("C-c")
            time.sleep(0.5)
            s.tui.keys("C-c")
            s.tui.wait_exit(timeout=5)
        s.tui.snap("after exit")

    return drive


def _drop_steps() -> list[Step]:
    return [_title(), message("Still here.", match=main_turn)]


SCENARIOS["drop_during_startup"] = Scenario(
    "drop_during_startup",
    "The relay drops the connection the moment the TUI is ready, while its startup "
    "requests are still in flight (test only); then a prompt; then /exit.",
    _drop_steps,
    _drop_then_prompt(0.0),
    NO_APPROVALS,
)
SCENARIOS["drop_before_prompt"] = Scenario(
    "drop_before_prompt",
    "The relay drops the connection 2 s after startup, before any prompt (test only); then "
    "a prompt; then /exit.",
    _drop_steps,
    _drop_then_prompt(2.0),
    NO_APPROVALS,
)


@_scenario(
    "After one answer the app-server is SIGKILLed (a daemon dying); what the TUI does.",
    lambda: [_title(), message("Answered.", match=main_turn)],
    NO_APPROVALS,
)
def server_dies(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("hello")
    s.tui.wait_for("Answered.")
    time.sleep(0.5)
    s.mark("kill app-server")
    s.server.kill()
    time.sleep(1.0)
    s.tui.snap("1 s after the kill")
    time.sleep(2.0)
    s.tui.snap("3 s after the kill")
    if s.tui.exit_status() is None:
        s.prompt("/exit")
        try:
            s.tui.wait_exit(timeout=5)
        except TimeoutError:
            s.mark("C-c")
            s.tui.keys("C-c")
            time.sleep(0.5)
            s.tui.keys("C-c")
            s.tui.wait_exit(timeout=5)
    s.tui.snap("after exit")


@dataclass
class Result:
    name: str
    version: str
    recording: Path
    wire_log: Path
    screens: Path
    marks: list[tuple[float, str]]
    exit_status: int | None
    model_requests: int
    first_screen: float


def record(
    name: str,
    out_dir: Path,
    *,
    binary: Path | None = None,
) -> Result:
    """Run one scenario with the real TUI through the relay; write NAME.jsonl (the
    recording), NAME.wire.jsonl (the relay's wire log), NAME.screens.txt."""
    scenario = SCENARIOS[name]
    binary = binary or codex_binary()
    version = codex_version(binary)
    out_dir.mkdir(parents=True, exist_ok=True)
    recording = out_dir / f"{name}.jsonl"
    wire_log = out_dir / f"{name}.wire.jsonl"
    screens_path = out_dir / f"{name}.screens.txt"
    model = FakeModel(scenario.steps())
    with short_tempdir() as tmp, model.serve():
        home = tui_home(tmp, model.base_url, scenario.config)
        server = AppServer(binary, home, tmp / "inner.sock", tmp / "app-server.log")
        try:
            server.wait_ready()
            with running_relay(
                tmp / "outer.sock", server.socket, recording=recording, wire_log=wire_log
            ) as (relay, portal):
                tui = Tui(
                    [str(binary), "--remote", f"unix://{tmp / 'outer.sock'}"],
                    env=home.env,
                    cwd=home.work,
                    sock_dir=tmp,
                )
                session = Session(tui, relay, model, server, home, portal)
                try:
                    first = tui.wait_for(FIRST_PAINT)
                    tui.snap("first paint")
                    tui.wait_for(READY)
                    tui.snap("ready")
                    session.mark("ready")
                    scenario.drive(session)
                    status = tui.exit_status()
                finally:
                    with suppress(Exception):
                        tui.snap("end")
                    tui.close()
                    _write_screens(screens_path, name, version, tui.screens, session.marks)
        finally:
            server.close()
    return Result(
        name,
        version,
        recording,
        wire_log,
        screens_path,
        session.marks,
        status,
        len(model.requests),
        first,
    )


def _write_screens(
    path: Path,
    name: str,
    version: str,
    screens: list[tuple[float, str, str]],
    marks: list[tuple[float, str]],
) -> None:
    parts = [f"# {name}, codex {version}\n# marks (recording clock): "]
    parts.append(", ".join(f"{t:.3f} {what}" for t, what in marks) + "\n")
    for t, label, text in screens:
        parts.append(f"\n===== {label} (TUI clock {t:.3f} s) =====\n{text}\n")
    path.write_text("".join(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record the TUI scenarios through the relay.")
    parser.add_argument("--codex", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    binary = args.codex or codex_binary()
    version = codex_version(binary)
    out = args.out or ROOT / "fixtures" / f"codex-tui-{version}"
    failed = 0
    for name in args.names or list(SCENARIOS):
        started = time.monotonic()
        try:
            result = record(name, out, binary=binary)
        except Exception as exc:  # report and go on with the next scenario
            failed += 1
            sys.stderr.write(f"{name}: FAILED {exc!r}\n")
            continue
        sys.stdout.write(
            orjson.dumps(
                {
                    "name": name,
                    "version": version,
                    "seconds": round(time.monotonic() - started, 1),
                    "exit": result.exit_status,
                    "first_screen": round(result.first_screen, 3),
                    "model_requests": result.model_requests,
                    "marks": [[round(t, 3), what] for t, what in result.marks],
                }
            ).decode()
            + "\n"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
