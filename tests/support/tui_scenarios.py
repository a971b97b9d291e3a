"""The issue-16 scenarios: the real codex TUI run by ``codex-presence codex`` in tmux, offline
against the fake model, reporting to a real broker on loopback.

Each scenario drives the keys, and at each checkpoint checks what a teammate sees: the
member's activity on the broker's roster (``GET /roster``), converging within a generous
bound (:func:`tests.support.waiting.eventually`), and, where the point is *what* ends the
work (Esc, /exit, the app-server's death), the cause the command logged for it. How fast
is a figure, not a test (``bench/tui.py``; ``docs/benchmarks.md``). The same code records
the fixtures of ``fixtures/codex-tui-<version>/``: ``NAME.jsonl`` (the command's own
``--record``), ``NAME.screens.txt`` (screens, and the scenario's marks on the recording's
clock, for writing the expected timeline by hand).

``python -m tests.support.tui_scenarios [--codex BIN] [--out DIR] [NAME ...]`` records them.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from bench._fake_model import FakeModel, Step, exec_command, message, reply, user_texts
from codex_presence._wire import TOKEN_ENV
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.codex_driver import Config, codex_binary
from tests.support.tui_driver import (
    COMPOSER,
    PRESENCE_MARKER,
    READY,
    TITLE_PROMPT,
    Tui,
    TuiHome,
    codex_version,
    drop_client_connections,
    pane_process,
    presence_command,
    short_tempdir,
    tui_home,
)
from tests.support.waiting import WAIT, eventually

__all__ = ["SCENARIOS", "Result", "Session", "record"]

ROOT = Path(__file__).resolve().parents[2]
MEMBER = "alice"
SHOWN_WITHIN = WAIT
"""Any state on the roster within this bound (the generous one: a loaded machine); what
made it so is each scenario's to check (its cause), not how long it took."""
SERVERS_WORD = ("thread/status/changed", "turn/completed")
"""What ends an interrupted turn: the app-server's own word (not the TUI's exit)."""
APPROVAL_SCREEN = "Would you like to run the following command?"


def is_title(body: dict[str, object]) -> bool:
    return any(TITLE_PROMPT in text for text in user_texts(body))  # type: ignore[arg-type]


def main_turn(body: dict[str, object]) -> bool:
    return not is_title(body)


APPROVALS = Config(approval_policy="on-request", sandbox_mode="read-only")
NO_APPROVALS = Config(approval_policy="never", sandbox_mode="danger-full-access")


@dataclass
class Session:
    """What a scenario drives: the command with the TUI in tmux, the model, the broker."""

    tui: Tui
    model: FakeModel
    home: TuiHome
    broker: RunningBroker
    log: Path
    stty: Path
    """``stty -a`` of the pane's terminal once the command has ended."""
    marks: list[tuple[float, str]] = field(default_factory=list)
    _clock: float | None = None

    # -- time -------------------------------------------------------------------------------

    def clock(self) -> float:
        """The command's session clock, CLOCK_MONOTONIC at the recording's t = 0 (its log
        says so at debug level)."""
        if self._clock is None:
            pattern = re.compile(r"recording's t = 0\) is CLOCK_MONOTONIC (\d+\.\d+)")
            eventually(lambda: pattern.search(self.said()), what="the session clock")
            found = pattern.search(self.said())
            assert found is not None
            self._clock = float(found.group(1))
        return self._clock

    def mark(self, what: str) -> float:
        """A timestamp on the recording's clock, for the expected timeline; returns the
        moment on this process's monotonic clock."""
        now = time.monotonic()
        self.marks.append((now - self.clock(), what))
        return now

    def said(self) -> str:
        """The command's log so far."""
        try:
            return self.log.read_text()
        except FileNotFoundError:
            return ""

    def terminal_is_sane(self) -> bool:
        """After the command: the terminal is back in its usual (cooked, echoing) mode."""
        eventually(self.stty.exists, what="stty -a after the command")
        modes = self.stty.read_text().split()
        return all(mode in modes for mode in ("icanon", "echo", "isig"))

    def transitions(self) -> list[tuple[str, str]]:
        """The (state, cause) transitions the command reported so far, in order (its log
        at -v)."""
        return re.findall(r"INFO codex_presence\.relay: (\w+) \(([^)\n]*)\)", self.said())

    def idle_by(self, causes: tuple[str, ...], *, since: float) -> None:
        """Wait for the roster to show idle, and check what made the member idle: the
        cause of the last transition the command logged."""
        self.shows("idle", since=since)
        state, cause = self.transitions()[-1]
        assert state == "idle" and cause in causes, self.transitions()

    # -- the roster ------------------------------------------------------------------------

    def row(self) -> dict[str, object]:
        """The member's row of the broker's roster, as a teammate (bob) reads it."""
        rows = httpx.get(
            self.broker.url + "/roster", headers=self.broker.auth("bob"), trust_env=False
        ).json()
        (row,) = [r for r in rows if r["name"] == MEMBER]
        return dict(row)

    def activity(self) -> str:
        """What the roster shows for the member (idle when there is no activity)."""
        return str(self.row().get("activity", "idle"))

    def connected(self) -> int:
        return int(str(self.row()["connected"]))

    def shows(
        self, state: str, *, since: float | None = None, within: float = SHOWN_WITHIN
    ) -> float:
        """Wait for the roster to show ``state``; seconds since ``since`` (or since now)."""
        start = time.monotonic() if since is None else since
        eventually(lambda: self.activity() == state, within=within, what=f"roster shows {state}")
        return time.monotonic() - start

    # -- keys --------------------------------------------------------------------------------

    def prompt(self, text: str) -> float:
        """Type ``text`` and press Enter; the mark is the moment of the Enter key."""
        at: list[float] = []
        self.tui.prompt(text, before_enter=lambda: at.append(self.mark(f"Enter {text}")))
        return at[0]

    def key(self, key: str) -> float:
        at = self.mark(key)
        self.tui.keys(key)
        return at

    def exit(self) -> None:
        """/exit: the member is idle on the roster, by the hang-up if it was not already
        (not by the TUI's exit a moment later)."""
        self.tui.wait_for(READY)
        busy = self.activity() != "idle"
        at = self.prompt("/exit")
        if busy:
            self.idle_by(("hangup",), since=at)
        else:
            self.shows("idle", since=at)
        assert self.tui.wait_exit() == 0
        self.tui.snap("after /exit")
        assert self.terminal_is_sane()

    # -- faults -----------------------------------------------------------------------------

    def command_pid(self) -> int:
        return pane_process(self.tui, PRESENCE_MARKER)

    def drop(self) -> None:
        """Break the TUI's connection (test only); wait until the TUI is connected again."""
        before = self.said().count(": open")
        self.mark("drop")
        assert drop_client_connections(self.command_pid()) == 1
        eventually(lambda: self.said().count(": open") > before, within=60, what="a reconnect")
        self.mark("reconnected")


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


def _run_long_command(s: Session, settle: float = 1.0) -> None:
    """Prompt for the 40 s command; the roster shows working while it runs."""
    s.tui.wait_for(COMPOSER)
    s.prompt("sleep a while")
    s.tui.wait_for("esc to interrupt")
    s.shows("working")
    time.sleep(settle)
    s.tui.snap("running")


def _approve_and_finish(s: Session) -> None:
    s.tui.wait_for(APPROVAL_SCREEN)
    s.shows("blocked")
    s.tui.snap("approval")
    s.key("y")
    s.tui.wait_for("Finished.")
    s.shows("idle")
    s.tui.snap("answered")


@_scenario(
    "A command that needs approval; y; it runs; the model answers; /exit.",
    _approval_steps,
)
def approval_accepted(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make a file")
    _approve_and_finish(s)
    s.exit()


@_scenario(
    "A command that needs approval; the user denies it (Esc: 'No, and tell Codex what to do "
    "differently', the only no in these versions); idle at once, on the app-server's word; "
    "/exit.",
    _approval_steps,
)
def approval_denied(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make a file")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.shows("blocked")
    s.tui.snap("approval")
    at = s.key("Escape")
    s.idle_by(SERVERS_WORD, since=at)
    s.tui.wait_for(APPROVAL_SCREEN, gone=True)
    s.tui.snap("denied")
    s.exit()


@_scenario(
    "A 40 s command runs (no approval); Esc: the turn is interrupted, the command goes on as a "
    "background terminal; idle at once, on the app-server's word; /exit while it runs.",
    _long_command_steps,
    NO_APPROVALS,
)
def esc_during_command(s: Session) -> None:
    _run_long_command(s)
    at = s.key("Escape")
    s.idle_by(SERVERS_WORD, since=at)
    s.tui.wait_for("interrupted")
    time.sleep(0.5)
    s.tui.snap("interrupted")
    assert s.activity() == "idle"  # the background terminal runs on, and counts for nothing
    s.exit()


def _short_command_steps() -> list[Step]:
    return [
        _title(),
        reply(
            exec_command(
                "echo started; sleep 6; echo ended", call_id="call_sleep", yield_time_ms=30000
            ),
            match=main_turn,
        ),
        message("Stopped.", match=main_turn),
    ]


@_scenario(
    "A 6 s command runs (no approval); Esc: the turn is interrupted, the command goes on as a "
    "background terminal (background work, not the member's state) until it ends; /exit.",
    _short_command_steps,
    NO_APPROVALS,
)
def esc_command_ends_in_background(s: Session) -> None:
    _run_long_command(s)
    at = s.key("Escape")
    s.idle_by(SERVERS_WORD, since=at)
    s.tui.wait_for("background terminal")
    s.tui.snap("background")
    assert s.activity() == "idle"  # the background terminal never makes it working
    # ...and the roster counts it apart from the state (issue 23).
    eventually(lambda: s.row().get("background") == 1, within=60, what="counted on the roster")
    # The command (6 s) ends: counted no more, and idle all along (a wait for its end, not
    # 7 s of sleep that a loaded machine could outlast).
    eventually(lambda: "background" not in s.row(), what="gone from the roster")
    s.tui.snap("ended")
    assert s.activity() == "idle"
    s.exit()


@_scenario(
    "An approval is pending when the TUI's connection breaks (test only); the TUI reconnects "
    "and shows the approval again; blocked throughout; y; /exit.",
    _approval_steps,
)
def reconnect_pending_approval(s: Session) -> None:
    s.tui.wait_for(COMPOSER)
    s.prompt("make a file")
    s.tui.wait_for(APPROVAL_SCREEN)
    s.shows("blocked")
    s.tui.snap("approval")
    reported = len(s.transitions())
    s.drop()
    s.tui.wait_for(APPROVAL_SCREEN)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # the roster never wavers
        assert s.activity() == "blocked"
        time.sleep(0.05)
    assert s.transitions()[reported:] == []  # nor does the member's state
    s.tui.snap("after reconnect")
    _approve_and_finish(s)
    s.exit()


@_scenario(
    "/exit while a turn's 40 s command runs: the TUI unsubscribes and closes; idle at the "
    "hang-up, whatever the app-server still runs; the command ends it.",
    _long_command_steps,
    NO_APPROVALS,
)
def exit_while_working(s: Session) -> None:
    _run_long_command(s)
    assert s.activity() == "working"
    s.exit()


@_scenario(
    "A turn's 40 s command runs when the app-server dies (SIGKILL): the command says so, "
    "ends the TUI and the session (status 1), puts the terminal back; idle.",
    _long_command_steps,
    NO_APPROVALS,
)
def server_dies(s: Session) -> None:
    _run_long_command(s, settle=0.0)
    server = pane_process(s.tui, b"app-server", deepest=True)
    at = s.mark("kill app-server")
    os.kill(server, signal.SIGKILL)
    s.idle_by(("eof",), since=at)
    assert s.tui.wait_exit() == 1  # the command ended it: it saw the app-server go
    s.tui.snap("after the app-server died")
    assert s.terminal_is_sane()  # the TUI was ended by a signal: the command put it back


@dataclass
class Result:
    name: str
    version: str
    recording: Path
    screens: Path
    log: str
    marks: list[tuple[float, str]]
    exit_status: int | None
    first_screen: float


def record(name: str, out_dir: Path, *, binary: Path | None = None) -> Result:
    """Run one scenario; write ``NAME.jsonl`` (the command's recording) and
    ``NAME.screens.txt`` to ``out_dir``. Fails (AssertionError) when a checkpoint does."""
    scenario = SCENARIOS[name]
    binary = binary or codex_binary()
    version = codex_version(binary)
    out_dir.mkdir(parents=True, exist_ok=True)
    recording = out_dir / f"{name}.jsonl"
    screens_path = out_dir / f"{name}.screens.txt"
    model = FakeModel(scenario.steps())
    with (
        short_tempdir() as tmp,
        model.serve(),
        running_broker(team=make_team(MEMBER, "bob")) as broker,
    ):
        home = tui_home(tmp, model.base_url, scenario.config)
        log = tmp / "codex-presence.log"
        argv = presence_command(
            binary,
            *("--broker", broker.url, "--name", MEMBER),
            *("--record", str(recording), "--log-file", str(log), "-vv"),
        )
        env = {**home.env, TOKEN_ENV: token_of(MEMBER)}
        stty = tmp / "stty.txt"
        then_stty = ["/bin/sh", "-c", '"$@"; s=$?; stty -a > "$0"; exit $s', str(stty)]
        tui = Tui([*then_stty, *argv], env=env, cwd=home.work, sock_dir=tmp)
        session = Session(tui, model, home, broker, log, stty)
        try:
            first = tui.wait_for("OpenAI Codex")
            tui.snap("first paint")
            tui.wait_for(READY)
            tui.snap("ready")
            session.mark("ready")
            eventually(lambda: session.connected() == 1, what="the member connected")
            scenario.drive(session)
            status = tui.exit_status()
        finally:
            with_end = session.said()
            try:
                tui.snap("end")
            finally:
                tui.close()
                if session._clock is not None:
                    _write_screens(screens_path, name, version, tui.screens, session.marks)
    return Result(name, version, recording, screens_path, with_end, session.marks, status, first)


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
    parser = argparse.ArgumentParser(description="Record the TUI scenarios through the command.")
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
                    "marks": [[round(t, 3), what] for t, what in result.marks],
                }
            ).decode()
            + "\n"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
