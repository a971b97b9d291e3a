"""The Claude Code feeder for real: the real claude behind ``codex-presence claude``, a real
broker on loopback, and a teammate (``bob``) watching ``alice`` on the roster's SSE stream.

Each test drives claude (print mode, or the TUI in tmux) against the fake Messages API and
checks the roster at the moments that matter: working once a prompt is sent, blocked while a
permission dialog is open, working again once it is answered, idle after the turn — and,
after an interrupt that no hook reports (Esc, "No"), idle by the transcript's marker or
claude's session file (:data:`INTERRUPT_CAUSES`), not by a fallback. The interactive
sessions run as a person gets them (``--claude-hooks auto``): claude's session file leads,
and only SessionStart and SessionEnd are hooks (:func:`file_led`); print mode, and the
tests of hooks in interactive mode (``--claude-hooks all``, :data:`EVERY_HOOK`), have every
hook. How fast that is, is a
figure, not a test: docs/benchmarks.md, "Claude Code interrupts".
Each session's ``--record`` file then replays (``codex-presence replay``'s code) to the same
sequence of states. Needs claude and tmux (``tests/run.sh`` installs them): without them
this skips, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import orjson
import pytest

from bench._claude_driver import Capture, Interactive, Tmux, claude_env, prepare_home
from bench._fake_anthropic import FakeAnthropic, Reply, bash, say, text, tool_use
from codex_presence.core.claude.protocol import FILE_LED_EVENTS, HOOK_EVENTS
from codex_presence.core.hooks.poster import SPOOL_ENV
from codex_presence.core.recording import read_relevant_entries
from codex_presence.core.timeline import timeline
from tests.support.broker_harness import RunningBroker, make_team, running_broker, token_of
from tests.support.claude_presence import PresenceFiles, interactive_presence, run_print
from tests.support.claude_scenarios import LONG, PERMISSION_DIALOG, after_result, asks
from tests.support.roster_watch import RosterWatch, roster_activity, roster_row
from tests.support.waiting import WAIT, eventually

pytestmark = [pytest.mark.claude, pytest.mark.slow]

INTERRUPT_CAUSES = ("transcript interrupt", "session idle")
"""What ends the turn after an interrupt no hook reports: the transcript's marker, or
claude's session file (the mapping's causes)."""
INTERRUPT_WITHIN = WAIT
"""A generous bound from the key to an idle roster, for a loaded machine. What ended the
turn is the cause each test checks (:func:`ended_by`), not this bound: a fallback that
would otherwise end it (claude's ``idle_prompt`` notification, 60 s; the end of the
session) is told apart by its cause, not by its time."""

HOLD = 1.0
"""How long a state must stay put while nobody acts."""
HOLD_UNTIL_GO = (
    "touch made.txt\n"
    "i=0\n"
    'while [ ! -e {go} ] && [ "$i" -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done\n'
)
"""A command that runs until the test writes ``go`` (and no longer than a minute, should
the test fail before it does: claude's shell outlives the session's end)."""


@pytest.fixture
def broker() -> Iterator[RunningBroker]:
    with running_broker(team=make_team("alice", "bob")) as running:
        yield running


@pytest.fixture
def watch(broker: RunningBroker) -> Iterator[RosterWatch]:
    watching = RosterWatch(broker, watcher="bob", member="alice")
    yield watching
    assert watching.error is None


EVERY_HOOK = ("--claude-hooks", "all")
"""The runner's option for a hook per event, whatever claude's version."""


def hooks_recorded(files: PresenceFiles) -> list[str]:
    """The events of the hooks the session received, in order (none before the session,
    which loads once claude's start is done, has begun its recording)."""
    if not files.record.exists():
        return []
    entries = read_relevant_entries(files.record.read_bytes())
    return [e.message["hook_event_name"] for e in entries if e.direction == "hook"]


def file_led(files: PresenceFiles) -> bool:
    """The session's file led: the log says so, and the only hooks that came are the two
    registered then (SessionStart, at claude's start, and SessionEnd)."""
    hooks = hooks_recorded(files)
    return (
        "its session file leads" in logged(files)
        and hooks[:1] == ["SessionStart"]
        and set(hooks) <= {"SessionStart", "SessionEnd"}
    )


def replayed(files: PresenceFiles) -> list[str]:
    """The states of the session's recording, replayed."""
    return [row.state for row in timeline(read_relevant_entries(files.record.read_bytes()))]


def logged(files: PresenceFiles) -> str:
    return files.log.read_text(errors="replace")


def held(watch: RosterWatch, activity: str | None, seconds: float = HOLD) -> None:
    """Nobody acts for ``seconds``: the roster must show ``activity`` all along."""
    since = time.monotonic()
    time.sleep(seconds)
    assert watch.current == activity
    assert all(a == activity for t, a in watch.seen if t >= since), watch.sequence()


def idle_after_the_key(watch: RosterWatch, broker: RunningBroker, since: float) -> None:
    """The roster shows alice idle after an interrupt's key (within the generous
    :data:`INTERRUPT_WITHIN`; what ended the turn is :func:`ended_by`'s to say)."""
    left = INTERRUPT_WITHIN - (time.monotonic() - since)
    eventually(lambda: watch.current is None, within=max(left, 0.0), what="idle after the key")
    assert roster_activity(broker) is None


def ended_by(files: PresenceFiles) -> str:
    """The cause of the session's last transition (to idle), replayed from its recording."""
    return timeline(read_relevant_entries(files.record.read_bytes()))[-1].cause


def press(s: Interactive, key: str) -> float:
    s.key(key)
    return time.monotonic()


def last_key_at(s: Interactive) -> float:
    """When the driver sent its last key (``answer_dialog`` waits before it does)."""
    t, _ = s.capture.actions[-1]
    return s.capture.start + t


def leave(s: Interactive) -> int | None:
    s.key("C-u")
    s.prompt("/exit")
    return s.wait_exit(20)


# -- print mode ---------------------------------------------------------------------------------


def test_print_mode_a_turn_with_an_allowed_tool(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """The model's first answer is held until the roster shows working (not a second: a
    turn over before the reporter's first report is never shown, and a loaded machine's
    reporter may take longer)."""
    api = FakeAnthropic(
        [
            Reply(
                blocks=[text("Running it."), bash("echo hi", id="toolu_p1")],
                hold=watch.shown("working"),
            ),
            say("It printed hi.", match=after_result("toolu_p1")),
        ]
    )
    with api.serve():
        result, files = run_print(
            tmp_path / "run",
            broker,
            base_url=api.base_url,
            claude_args=("-p", "run echo hi", "--allowedTools", "Bash(echo hi)"),
        )
    assert result.returncode == 0, result.stderr
    assert "It printed hi." in result.stdout
    assert result.stderr == ""  # not a word of ours on claude's stderr without a terminal
    watch.wait(None)
    assert watch.sequence() == [None, "working", None]
    watch.wait_connected(0)
    assert replayed(files) == ["working", "idle"]
    log = logged(files)
    assert "working (UserPromptSubmit)" in log and "idle (Stop)" in log
    assert token_of("alice") not in log and "/hook" not in log  # no token, no hook URL


SESSION_END_BUDGET_ENV = "CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS"
"""The time claude gives its SessionEnd hooks at exit, in all (1.5 s by default; read from
its binary): what it has not answered by then is cancelled."""
CANCELS_WITHIN = 5
"""Runs of claude -p given 1 ms for its SessionEnd hooks until one cancels ours."""


@pytest.mark.parametrize("delivery", ["spool", "loopback"])
def test_print_mode_prints_no_hook_secret_even_when_claude_cancels_a_hook(
    claude: Path, tmp_path: Path, broker: RunningBroker, delivery: str
) -> None:
    """Under load, claude -p cancelled our SessionEnd hook at exit and said so on its
    stderr, naming the hook: an HTTP hook by its URL, the session's secret in it
    (``SessionEnd hook [http://127.0.0.1:PORT/SECRET/hook] failed: Hook cancelled``).
    Here claude gets 1 ms for it, so it cancels it nearly every time (CI once saw the
    spooled hook, a bash that writes a file, done within it: claude then says nothing, and
    the run is tried again, up to :data:`CANCELS_WITHIN` times): what it prints names our
    poster (spooled, or POSTing to the loopback server), no URL, no secret."""
    env = {SESSION_END_BUDGET_ENV: "1", **({SPOOL_ENV: "0"} if delivery == "loopback" else {})}
    outputs = []
    for attempt in range(CANCELS_WITHIN):
        api = FakeAnthropic([say("Done.", wait=0.2)])
        with api.serve():
            result, files = run_print(
                tmp_path / f"run{attempt}",
                broker,
                base_url=api.base_url,
                claude_args=("-p", "hi"),
                env=env,
            )
        assert result.returncode == 0, result.stderr
        printed = result.stdout + result.stderr
        outputs.append(printed)
        if "SessionEnd hook [" in printed:  # cancelled, and said: the cause is ours
            break
    else:
        raise AssertionError(f"claude never cancelled the SessionEnd hook: {outputs}")
    assert not re.search(r"127\.0\.0\.1:\d+/[^\s\]]", printed), printed  # no URL's path
    recorded = files.record.read_text()
    assert not re.search(r"127\.0\.0\.1:\d+/(?!REDACTED/)[^\s\]\"]", recorded)


def test_print_mode_exit_status_passes_through(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeAnthropic([Reply(status=400, match=None) for _ in range(10)])
    with api.serve():
        result, files = run_print(
            tmp_path / "run", broker, base_url=api.base_url, claude_args=("-p", "hello")
        )
    assert result.returncode == 1  # claude's own status for a failed turn
    watch.wait(None)
    assert replayed(files) == ["working", "idle"]
    # Closed by StopFailure, or by SessionEnd when claude, exiting, killed StopFailure's
    # poster before it wrote (1 run in 12 at load 6-9, the hook spooled): the state is the
    # same, claude's exit follows at once.
    log = logged(files)
    assert "idle (StopFailure)" in log or "idle (SessionEnd)" in log, log


# -- interactive (tmux) -----------------------------------------------------------------------


def test_a_permission_dialog_answered_yes(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """Working while the approved command runs, not blocked until its PostToolUse: the
    command runs until the test says so (a file), and the roster must show working before
    the test says it (decided by order, not by how long working showed)."""
    api = FakeAnthropic(
        [
            # held until the roster shows the turn: the dialog may follow claude's busy so
            # closely that the next read sees only the waiting
            Reply(blocks=[bash("sh hold.sh", id="toolu_yes")], hold=watch.shown("working")),
            say("Made it.", match=after_result("toolu_yes")),
        ]
    )
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (
            s,
            files,
        ),
    ):
        go = files.work / "go"
        (files.work / "hold.sh").write_text(HOLD_UNTIL_GO.format(go=go))
        s.ready()
        watch.wait_connected(1)
        assert watch.current is None
        s.prompt("make a file")
        watch.wait_seen("working")  # the dialog may already have made it blocked
        s.tmux.wait_screen(PERMISSION_DIALOG)
        watch.wait("blocked")
        held(watch, "blocked")
        s.answer_dialog("Enter")
        try:
            watch.wait("working")  # the command is still running: it waits for "go"
            eventually(lambda: (files.work / "made.txt").exists(), 60, "the command ran")
        finally:
            go.touch()
        watch.wait(None)
        held(watch, None)
        assert leave(s) == 0
    watch.wait_connected(0)
    assert watch.sequence() == [None, "working", "blocked", "working", None]
    assert replayed(files) == ["working", "blocked", "working", "idle"]
    assert file_led(files)


def test_a_permission_dialog_answered_no(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """Working, then blocked at the dialog, then idle when it is answered no. The model's
    answer (the tool call that asks for the dialog) is held until the roster shows working:
    where claude's file leads, a dialog asked for at once can follow its busy so closely
    that the next read sees only the waiting (CI, loaded: ``[None, "blocked", None]`` when
    the answer was merely half a second late)."""
    turn_seen = threading.Event()
    api = FakeAnthropic(
        [
            Reply(
                blocks=[text("Making the file."), bash("touch made.txt", id="toolu_no")],
                hold=turn_seen,
            ),
            say("Understood.", match=after_result("toolu_no")),
        ]
    )
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (
            s,
            files,
        ),
    ):
        s.ready()
        s.prompt("make a file")
        watch.wait("working")
        turn_seen.set()
        s.tmux.wait_screen(PERMISSION_DIALOG)
        watch.wait("blocked")
        s.answer_dialog("4")  # No
        idle_after_the_key(watch, broker, since=last_key_at(s))
        held(watch, None)
        assert not (files.work / "made.txt").exists()
        assert leave(s) == 0
    assert watch.sequence() == [None, "working", "blocked", None]
    assert replayed(files) == ["working", "blocked", "idle"]
    assert ended_by(files) in INTERRUPT_CAUSES
    assert file_led(files)


def test_esc_while_a_tool_runs(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    api = FakeAnthropic(
        [
            Reply(blocks=[text("Waiting."), bash(LONG, id="toolu_esc")]),
            say("unused", match=after_result("toolu_esc")),
        ]
    )
    args = ("--permission-mode", "default", "--allowedTools", "Bash")
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url, claude_args=args) as (
            s,
            files,
        ),
    ):
        s.ready()
        s.prompt("wait a while")
        s.tmux.wait_screen(r"sleep 30")
        watch.wait("working")
        held(watch, "working")  # the command runs; no hook comes
        idle_after_the_key(watch, broker, since=press(s, "Escape"))
        held(watch, None)
        assert leave(s) == 0
    assert watch.sequence() == [None, "working", None]
    assert replayed(files) == ["working", "idle"]
    assert ended_by(files) in INTERRUPT_CAUSES
    assert file_led(files)


def test_esc_before_the_first_token(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """Nothing but claude's session file sees this interrupt. The answer is held until the
    server closes: its first token never comes (8 s, before, could run out on a loaded
    machine before the Esc)."""
    api = FakeAnthropic([say("A slow answer.", hold=threading.Event())])
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (
            s,
            files,
        ),
    ):
        s.ready()
        s.prompt("answer slowly")
        watch.wait("working")
        api.wait_requests(1, 60)
        held(watch, "working")
        idle_after_the_key(watch, broker, since=press(s, "Escape"))
        held(watch, None)
        assert leave(s) == 0
    assert watch.sequence() == [None, "working", None]
    assert replayed(files) == ["working", "idle"]
    assert ended_by(files) == "session idle"  # the transcript shows nothing of this one
    assert "idle (session idle)" in logged(files)
    assert file_led(files)


def test_two_prompts_in_a_row(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    # Each answer is held until the roster shows its turn (a turn over before the
    # reporter's first report is never shown; a second was not always enough under load).
    first_seen, second_seen = threading.Event(), threading.Event()
    api = FakeAnthropic(
        [
            say("First answer.", match=asks("first question"), hold=first_seen),
            say("Second answer.", match=asks("second question"), hold=second_seen),
        ]
    )
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (
            s,
            files,
        ),
    ):
        s.ready()
        s.prompt("first question")
        watch.wait("working")
        first_seen.set()
        s.tmux.wait_screen(r"First answer")
        watch.wait(None)
        s.prompt("second question")
        watch.wait("working")
        second_seen.set()
        s.tmux.wait_screen(r"Second answer")
        watch.wait(None)
        held(watch, None)
        assert leave(s) == 0
    assert watch.sequence() == [None, "working", None, "working", None]
    assert replayed(files) == ["working", "idle", "working", "idle"]
    assert file_led(files)


def test_a_prompt_is_working_from_claudes_history_before_its_session_file(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """Where the file leads, no hook says a turn's start: claude's prompt history does
    (issue 34). The model's answer is held until the roster shows working. claude wrote a
    session's first prompt in its history before its session file's ``busy`` in every probe
    (by 14-98 ms), but the two writes are not ordered (a later prompt's came 6 ms after
    once): what the test checks is that the turn started by whichever the runner read
    first, the history's line when it came first. A slash command, written there as a
    prompt is, opens a dialog and no turn: the roster stays idle meanwhile."""
    turn_seen = threading.Event()
    api = FakeAnthropic([say("Hello.", hold=turn_seen)])
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (s, files),
    ):
        s.ready()
        watch.wait_connected(1)
        s.prompt("hello")
        watch.wait("working")
        turn_seen.set()
        s.tmux.wait_screen(r"Hello\.")
        watch.wait(None)
        s.prompt("/help")
        s.tmux.wait_screen(r"/help|Shortcuts|shortcuts")
        held(watch, None)
        s.key("Escape")
        held(watch, None)
        assert leave(s) == 0
    recorded = [orjson.loads(line) for line in files.record.read_bytes().splitlines()]
    read = [
        e["msg"].get("display") or e["msg"].get("status")
        for e in recorded
        if e.get("from") in ("history", "session") and e["msg"].get("status") != "idle"
    ]
    assert read.count("hello") == read.count("/help") == 1, read  # this session's lines
    # claude's busy may never be read at all (written and overwritten between two reads)
    busy = read.index("busy") if "busy" in read else len(read)
    first = "history prompt" if read.index("hello") < busy else "session busy"
    rows = timeline(read_relevant_entries(files.record.read_bytes()))
    assert [(row.state, row.cause) for row in rows] == [
        ("working", first),
        ("idle", "session idle"),
    ]
    assert watch.sequence() == [None, "working", None]
    assert file_led(files)


def test_exit_ends_the_session_and_the_subscription(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    # The answer is held until the roster shows working: claude writes its busy 0.2-0.3 s
    # after the Enter (later on a loaded machine), and a turn over before then may never be
    # written at all (where the file leads, not seen).
    turn_seen = threading.Event()
    api = FakeAnthropic([say("Hello.", hold=turn_seen)])
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (
            s,
            files,
        ),
    ):
        s.ready()
        watch.wait_connected(1)
        s.prompt("hello")
        watch.wait("working")
        turn_seen.set()
        s.tmux.wait_screen(r"Hello\.")
        watch.wait(None)
        assert leave(s) == 0  # /exit: claude's status, 0, is the command's
    watch.wait_connected(0)
    assert watch.current is None
    assert replayed(files) == ["working", "idle"]
    log = logged(files)
    assert "online: subscribed to the broker as alice" in log
    assert token_of("alice") not in log


# -- looks as plain claude does ---------------------------------------------------------------

SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def a_turn_with_a_tool() -> FakeAnthropic:
    """Read a file (no permission needed in the work directory), then answer."""
    return FakeAnthropic(
        [
            Reply(
                blocks=[text("Reading it."), tool_use("Read", {"file_path": "NOTES"}, id="t_r")],
                wait=0.3,
            ),
            say("The notes say hello.", match=after_result("t_r"), wait=0.3),
        ]
    )


def turn_and_exit(s: Interactive) -> tuple[list[str], str]:
    """Run the turn, reading the screen all along; then /exit. The spinner lines seen
    during the turn, and claude's parting hint (its session id made ``ID``)."""
    (s.work / "NOTES").write_text("hello\n")
    s.ready()
    s.prompt("read my notes")
    spinner: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        screen = s.tmux.screen()
        spinner += [line.strip() for line in screen.splitlines() if "…" in line and "(" in line]
        if "The notes say hello." in screen and "esc to interrupt" not in screen:
            break
    else:
        raise AssertionError(f"the turn did not end:\n{s.tmux.screen()}")
    assert leave(s) == 0
    lines = [line.strip() for line in s.tmux.screen().splitlines() if line.strip()]
    hint = lines[lines.index("Resume this session with:") + 1]
    return spinner, SESSION_ID.sub("ID", hint)


def test_claudes_parting_hint_is_plain_claudes(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """The same turn (a tool call) plain and behind codex-presence, in a 100-column
    terminal: the parting hint is the same, the person's flags kept (issue 27). (Before,
    claude listed our ``--settings FILE`` first: a path, so the flags were left out unless
    the whole line fitted the terminal.)"""
    args = ("--permission-mode", "default")
    api = a_turn_with_a_tool()
    with api.serve():
        home, work = prepare_home(tmp_path / "plain")
        tmux = Tmux(tmp_path / "plain" / "tmux.sock", width=100)
        tmux.start([str(claude), *args], cwd=work, env=claude_env(home, api.base_url))
        plain = Interactive(Capture(None), tmux, work, server=None)  # type: ignore[arg-type]
        try:
            plain_spinner, plain_hint = turn_and_exit(plain)
        finally:
            tmux.kill()
    api = a_turn_with_a_tool()
    with (
        api.serve(),
        interactive_presence(
            tmp_path / "run", broker, base_url=api.base_url, claude_args=args, width=100
        ) as (s, _files),
    ):
        watch.wait_connected(1)
        _, hint = turn_and_exit(s)
    watch.wait_connected(0)
    assert plain_hint == "claude --permission-mode default --resume ID"
    assert hint == plain_hint
    assert plain_spinner and not [line for line in plain_spinner if "hook" in line]


HOOK_NAMED = re.compile(r"running (\w+) hooks?")
"""How claude's spinner names a hook it runs (docs/claude-code-hooks.md)."""
_EVENTS = "|".join(sorted({*HOOK_EVENTS, *FILE_LED_EVENTS}))
EVENT_NAMES = re.compile(rf"\b({_EVENTS})\b")


class Screens:
    """Reads the terminal all along, from before claude draws to after it is gone, in a
    thread (a capture-pane every few ms)."""

    def __init__(self, tmux: Tmux) -> None:
        self.tmux = tmux
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Screens:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(WAIT)

    def _read(self) -> None:
        while not self._stop.is_set():
            with suppress(subprocess.SubprocessError, OSError):
                self.seen.append(self.tmux.screen())

    def hooks_named(self) -> set[str]:
        """Every hook the screens named (``running X hook``, or an event's name)."""
        return {
            m.group(1)
            for screen in self.seen
            for m in (*HOOK_NAMED.finditer(screen), *EVENT_NAMES.finditer(screen))
        }


def turns_with_tools(count: int) -> FakeAnthropic:
    """``count`` turns, each reading a file (no permission needed) and then answering."""
    replies: list[Reply] = []
    for n in range(count):
        replies += [
            Reply(
                blocks=[
                    text(f"Reading {n}."),
                    tool_use("Read", {"file_path": "NOTES"}, id=f"r{n}"),
                ],
                match=asks(f"question {n}"),
                wait=0.5,  # claude writes its busy 0.2-0.3 s after the Enter
            ),
            say(f"Notes {n} say hello.", match=after_result(f"r{n}"), wait=0.3),
        ]
    return FakeAnthropic(replies)


def several_turns(s: Interactive, files: PresenceFiles, count: int, screens: Screens) -> None:
    (files.work / "NOTES").write_text("hello\n")
    s.ready()
    for n in range(count):
        s.prompt(f"question {n}")
        s.tmux.wait_screen(rf"Notes {n} say hello\.")
        eventually(lambda: "esc to interrupt" not in s.tmux.screen(), what="the turn's end")
    assert leave(s) == 0
    time.sleep(0.5)  # the screen after claude's exit, too
    assert any("esc to interrupt" in screen for screen in screens.seen)  # read while it worked


def test_claudes_screen_names_none_of_our_hooks(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """Three turns with a tool call each, the screen read all along from before claude
    draws to after it exits: not one hook name on it (issue 27). claude names every hook
    of its settings in its spinner while it starts it, async or not; so where its session
    file leads, the only hooks are SessionStart (before claude takes input) and SessionEnd
    (at its exit), outside any turn. With a hook per event the same turns named some
    (the test below)."""
    api = turns_with_tools(3)
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (s, files),
        Screens(s.tmux) as screens,
    ):
        watch.wait_connected(1)
        several_turns(s, files, 3, screens)
    assert screens.hooks_named() == set()
    assert file_led(files)
    assert replayed(files) == ["working", "idle"] * 3  # followed all the same
    assert watch.sequence() == [None, *["working", None] * 3]


def test_clear_names_no_hook_either_and_the_next_turn_is_followed(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """``/clear`` between two turns: claude ends its session and starts a new one (a new
    session id, a new transcript) without exiting. SessionEnd, which claude waits for, is
    registered for its exits only and SessionStart for a new transcript's start, not a
    compaction's (their matchers): the screen names no hook at ``/clear`` either, and the
    turn after it is followed as the one before."""
    api = turns_with_tools(2)
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url) as (s, files),
        Screens(s.tmux) as screens,
    ):
        (files.work / "NOTES").write_text("hello\n")
        s.ready()
        s.prompt("question 0")
        s.tmux.wait_screen(r"Notes 0 say hello\.")
        watch.wait(None)
        s.prompt("/clear")
        eventually(lambda: hooks_recorded(files).count("SessionStart") == 2, 60, "the new one")
        watch.wait(None)
        s.prompt("question 1")
        s.tmux.wait_screen(r"Notes 1 say hello\.")
        watch.wait_seen("working")
        watch.wait(None)
        assert leave(s) == 0
    assert screens.hooks_named() == set()
    assert hooks_recorded(files) == ["SessionStart", "SessionStart", "SessionEnd"]
    assert replayed(files)[:2] == ["working", "idle"] and replayed(files)[-2:] == [
        "working",
        "idle",
    ]
    assert file_led(files)


def test_with_every_hook_claudes_spinner_names_at_most_two_of_ours(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """``--claude-hooks all``: a hook per event, async command hooks. In a turn with a
    tool call the screen names at most two of them, never the turn's five: claude lists
    every hook of the settings in its spinner from before it starts the process until it
    has started it (its own work, 3-300 ms; a hook running ``true`` is named as often), and
    has no setting to leave one out (docs/claude-code-hooks.md). In ~100 turns of async
    hooks (bench/claude_spinner.py) a turn named none, one or two, never more; with hooks
    claude waits for (HTTP), four or five in every one of 31 turns."""
    api = a_turn_with_a_tool()
    with (
        api.serve(),
        interactive_presence(
            tmp_path / "run", broker, base_url=api.base_url, options=EVERY_HOOK
        ) as (s, files),
    ):
        watch.wait_connected(1)
        spinner, _ = turn_and_exit(s)
    assert "UserPromptSubmit" in hooks_recorded(files)  # every hook, as asked
    assert replayed(files) == ["working", "idle"]
    assert spinner  # the screen was read while claude worked
    named = {m.group(1) for line in spinner if (m := HOOK_NAMED.search(line))}
    assert len(named) <= 2, named


def test_a_claude_whose_version_is_unknown_gets_every_hook(
    claude: Path, tmp_path: Path, broker: RunningBroker, watch: RosterWatch
) -> None:
    """The real claude behind a wrapper script of the person's: its version cannot be read
    beside the script, so the hooks lead, as before issue 27, and the roster follows."""
    wrapper = tmp_path / "bin" / "claude"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {claude} "$@"\n')
    wrapper.chmod(0o755)
    api = FakeAnthropic([say("Hello.", hold=watch.shown("working"))])
    with (
        api.serve(),
        interactive_presence(tmp_path / "run", broker, base_url=api.base_url, claude=wrapper) as (
            s,
            files,
        ),
    ):
        s.ready()
        s.prompt("hello")
        s.tmux.wait_screen(r"Hello\.")
        watch.wait(None)
        assert leave(s) == 0
    assert watch.sequence() == [None, "working", None]
    assert "claude's version is not known beside" in logged(files)
    assert {"UserPromptSubmit", "Stop"} <= set(hooks_recorded(files))
    assert "SessionStart" not in hooks_recorded(files)
    assert replayed(files) == ["working", "idle"]


@pytest.mark.parametrize(
    ("options", "started", "ended"),
    [
        ((), ("transcript background start",), ("transcript task-notification", "session idle")),
        (
            EVERY_HOOK,
            # Its PostToolUse is dropped as late when claude's next hook's process posts
            # first (core/hooks/hook_order.py), and the transcript may be read after the
            # turn's Stop, whose background_tasks lists the command (CI, loaded). So for
            # its end: the notification turn's UserPromptSubmit dropped as late after that
            # turn's Stop, whose background_tasks no longer lists it (CI, 2026-12-03). An
            # early end by the first turn's Stop is caught by the test's own check.
            ("PostToolUse", "transcript background start", "Stop"),
            ("UserPromptSubmit", "transcript task-notification", "session idle", "Stop"),
        ),
    ],
    ids=["file-led", "every-hook"],
)
def test_a_background_command_is_background_work_not_the_members_state(
    claude: Path,
    tmp_path: Path,
    broker: RunningBroker,
    watch: RosterWatch,
    options: tuple[str, ...],
    started: tuple[str, ...],
    ended: tuple[str, ...],
) -> None:
    """Bash ``run_in_background`` (sleep 4): the turn ends while it runs; the member is idle
    on the roster, and the session counts it as background work from its start (the
    transcript's tool result naming its task; with every hook, its PostToolUse or the
    turn's Stop listing it, whichever is read first) until its end (the
    ``<task-notification>`` claude sends the model, or the prompt hook of that turn, or
    with every hook that turn's Stop; claude's idle after it, if that came first) (issue
    23).
    Where the file leads, no hook but SessionStart and SessionEnd can be the cause."""
    turn_seen = threading.Event()
    api = FakeAnthropic(
        [
            Reply(
                blocks=[
                    tool_use(
                        "Bash",
                        {"command": "sleep 4", "description": "wait", "run_in_background": True},
                        id="toolu_bgl",
                    )
                ],
                match=asks("in the background"),
                hold=turn_seen,  # claude writes its busy 0.2-0.3 s after the Enter, or later
            ),
            say("Started it.", match=after_result("toolu_bgl")),
            say("It ended."),
        ]
    )
    args = ("--permission-mode", "default", "--allowedTools", "Bash")
    with (
        api.serve(),
        interactive_presence(
            tmp_path / "run", broker, base_url=api.base_url, claude_args=args, options=options
        ) as (s, files),
    ):
        s.ready()
        s.prompt("wait in the background")
        watch.wait("working")
        turn_seen.set()
        eventually(
            lambda: any(
                f"1 left running in the background: {cause}" in logged(files) for cause in started
            ),
            within=60,
            what="the background command counted",
        )
        eventually(lambda: watch.current is None, within=60, what="idle while it runs")
        # The roster shows it apart from the state: idle, with one background command.
        eventually(
            lambda: roster_row(broker).get("background") == 1, within=60, what="on the roster"
        )
        assert "activity" not in roster_row(broker)
        assert "0 left running in the background" not in logged(files)
        eventually(
            lambda: any(
                f"0 left running in the background: {cause}" in logged(files) for cause in ended
            ),
            within=60,
            what="its end",
        )
        eventually(lambda: watch.current is None, within=60, what="idle after that turn")
        eventually(
            lambda: "background" not in roster_row(broker), within=60, what="gone from the roster"
        )
        assert leave(s) == 0
    states = replayed(files)
    assert states[:2] == ["working", "idle"] and states[-1] == "idle"
    assert file_led(files) is (options == ())
