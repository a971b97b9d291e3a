"""Background work (issue 23): commands and tasks a session left running, counted apart
from the state. The signal's rule (never working or blocked, a count-only change is a
transition that changes no state), each feeder's rules with the events that open and close
them, the real recordings that show them (codex's Esc during a command, claude's
``run_in_background`` and background subagent), and the shells' skeleton that dates them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.session import Session, log_transition
from codex_presence.core.activity import (
    MAX_BACKGROUND,
    ActivitySignal,
    ActivityState,
    HandleKind,
    Transition,
)
from codex_presence.core.claude.mapping import SETTLE, ClaudeMapping
from codex_presence.core.claude.protocol import (
    background_command_id,
    running_tasks,
    task_notification_id,
)
from codex_presence.core.codex.mapping import CodexMapping
from codex_presence.core.recording import read_entries
from codex_presence.core.timeline import TimelineBuilder
from tests.support.junk import junk

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# -- the signal ------------------------------------------------------------------------------


def test_background_never_makes_the_state_and_a_count_change_alone_is_a_transition() -> None:
    signal = ActivitySignal()
    signal.open_background(("th", "background", "c1"))
    transition = signal.commit("turn/completed")
    assert transition is not None
    assert signal.state is ActivityState.IDLE
    assert not transition.changes_state and transition.changes_background
    assert (transition.previous_background, transition.background) == (0, 1)
    assert signal.commit("again") is None
    signal.open(HandleKind.TURN, ("th", "t2"))
    both = signal.commit("turn/started")
    assert both is not None and both.changes_state and not both.changes_background
    assert both.background == 1


def test_closing_a_scope_or_everything_leaves_background_open() -> None:
    signal = ActivitySignal()
    signal.open(HandleKind.TOOL, ("th", "t1", "c1"))
    signal.open_background(("th", "background", "c0"))
    signal.close_scope("th")
    signal.close_all()
    assert signal.background == 1
    assert signal.close_background_scope("th") == 1
    assert signal.background == 0
    assert not signal.close_background(("th", "background", "c0"))  # not open: no anomaly
    assert signal.anomalies.close_unknown == 0


def test_background_is_bounded_the_oldest_forgotten() -> None:
    signal = ActivitySignal()
    for n in range(MAX_BACKGROUND + 10):
        signal.open_background(("task", n))
    assert signal.background == MAX_BACKGROUND
    assert not signal.is_background(("task", 0))
    assert signal.is_background(("task", MAX_BACKGROUND + 9))


_ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "close", "bg_open", "bg_close", "scope", "all", "bg_all"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 3),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_the_state_ignores_background_and_the_count_is_what_is_open(ops: list[Any]) -> None:
    with_bg, without_bg = ActivitySignal(), ActivitySignal()
    open_bg: set[tuple[str, int]] = set()
    last_count = 0
    for op, scope, n in ops:
        for signal in (with_bg, without_bg):
            if op == "open" and not signal.is_open(HandleKind.TOOL, (scope, n)):
                signal.open(HandleKind.TOOL, (scope, n))
            elif op == "close" and signal.is_open(HandleKind.TOOL, (scope, n)):
                signal.close(HandleKind.TOOL, (scope, n))
            elif op == "scope":
                signal.close_scope(scope)
            elif op == "all":
                signal.close_all()
        if op == "bg_open" and (scope, n) not in open_bg:
            with_bg.open_background((scope, n))
            open_bg.add((scope, n))
        elif op == "bg_close":
            assert with_bg.close_background((scope, n)) == ((scope, n) in open_bg)
            open_bg.discard((scope, n))
        elif op == "bg_all":
            with_bg.close_all_background()
            open_bg.clear()
        transition = with_bg.commit(op)
        plain = without_bg.commit(op)
        assert with_bg.state is without_bg.state
        assert with_bg.background == len(open_bg)
        # a transition comes exactly when the state or the count changed
        assert (transition is not None) == (plain is not None or len(open_bg) != last_count)
        if transition is not None:
            assert transition.background == len(open_bg)
            assert transition.previous_background == last_count
        last_count = len(open_bg)


# -- codex -----------------------------------------------------------------------------------


def _note(method: str, **params: Any) -> bytes:
    return orjson.dumps({"method": method, "params": params}) + b"\n"


def _item(event: str, kind: str, item: str, turn: str = "t1", thread: str = "th") -> bytes:
    return _note(f"item/{event}", threadId=thread, turnId=turn, item={"type": kind, "id": item})


def _turn(event: str, turn: str = "t1", status: str = "completed", thread: str = "th") -> bytes:
    return _note(f"turn/{event}", threadId=thread, turn={"id": turn, "status": status})


def _idle(thread: str = "th", kind: str = "idle") -> bytes:
    return _note("thread/status/changed", threadId=thread, status={"type": kind})


class Codex:
    def __init__(self) -> None:
        self.mapping = CodexMapping()
        self.background: list[tuple[int, str]] = []
        self.states: list[tuple[str, str]] = []

    def feed(self, *lines: bytes) -> Codex:
        for line in lines:
            self._note(self.mapping.feed_line("server", line))
        return self

    def close(self) -> Codex:
        self._note(self.mapping.close())
        return self

    def _note(self, transition: Transition | None) -> None:
        if transition is None:
            return
        if transition.changes_state:
            self.states.append((transition.state.value, transition.cause))
        if transition.changes_background:
            self.background.append((transition.background, transition.cause))


def test_codex_esc_during_a_command_leaves_it_running_until_its_item_completed() -> None:
    s = Codex().feed(_turn("started"), _item("started", "commandExecution", "c1"))
    s.feed(_idle(), _turn("completed", status="interrupted"))
    assert s.states == [("working", "turn/started"), ("idle", "thread/status/changed")]
    assert s.background == [(1, "thread/status/changed")]
    assert s.mapping.background == 1 and s.mapping.state == "idle"
    s.feed(_item("completed", "commandExecution", "c1"))
    assert s.background[-1] == (0, "item/completed")
    assert s.mapping.state == "idle"  # never working again


@pytest.mark.parametrize(
    ("ending", "closer"),
    [
        (_turn("completed", status="interrupted"), "turn/completed"),
        (_turn("started", turn="t2"), "turn/started"),
        (_idle(), "thread/status/changed"),
    ],
)
def test_codex_every_end_of_a_turn_leaves_its_command_running(ending: bytes, closer: str) -> None:
    s = Codex().feed(_turn("started"), _item("started", "commandExecution", "c1"), ending)
    assert s.background == [(1, closer)]


@pytest.mark.parametrize(
    "closer",
    [
        _note("thread/closed", threadId="th"),
        _idle(kind="notLoaded"),
        _idle(kind="systemError"),
        _note("thread/started", thread={"id": "th", "threadSource": "thread_title"}),
    ],
)
def test_codex_a_thread_unloaded_or_ignored_takes_its_background_with_it(closer: bytes) -> None:
    s = Codex().feed(_turn("started"), _item("started", "commandExecution", "c1"), _idle())
    assert s.mapping.background == 1
    s.feed(_idle("other"), closer)  # another thread's news changes nothing of this one
    assert s.mapping.background == 0


def test_codex_the_end_of_the_session_closes_the_background() -> None:
    s = Codex().feed(_turn("started"), _item("started", "commandExecution", "c1"), _idle())
    s.close()
    assert s.background == [(1, "thread/status/changed"), (0, "eof")]


def test_codex_a_command_that_ended_with_its_turn_or_another_tool_leaves_nothing() -> None:
    s = Codex().feed(_turn("started"), _item("started", "commandExecution", "c1"))
    s.feed(_item("completed", "commandExecution", "c1"), _item("started", "mcpToolCall", "m1"))
    s.feed(_turn("completed"), _item("completed", "mcpToolCall", "m1"))
    assert s.background == []
    assert s.mapping.stats.late_events == 1  # the mcp tool's late completion, as before


def test_codex_a_revived_turn_keeps_its_background_command() -> None:
    s = Codex().feed(_turn("started"), _item("started", "commandExecution", "c1"))
    s.feed(_turn("completed"), _item("started", "reasoning", "r1"))  # the turn revives
    assert s.mapping.state == "working" and s.mapping.background == 1
    s.feed(_item("completed", "commandExecution", "c1"), _turn("completed"))
    assert (s.mapping.state, s.mapping.background) == ("idle", 0)


def _background_by_line(path: Path) -> list[tuple[int | None, int]]:
    builder = TimelineBuilder()
    with path.open("rb") as stream:
        for entry in read_entries(stream):
            builder.feed(entry)
    builder.finish()
    return [(row.line, row.count) for row in builder.background]


@pytest.mark.parametrize("version", ["0.169.0", "0.171.0"])
def test_codex_real_interrupted_command_is_background_until_its_late_item_completed(
    version: str,
) -> None:
    # outlives_turn: interrupted while `sleep 2; echo late` runs; idle status at 20, the
    # command's item/completed ~2 s later at 23 (protocol §6.7).
    path = FIXTURES / f"codex-{version}" / "outlives_turn.jsonl"
    assert _background_by_line(path) == [(20, 1), (23, 0)]


@pytest.mark.parametrize("version", ["0.169.0", "0.171.0"])
def test_codex_tui_esc_leaves_a_background_terminal_until_the_session_ends(version: str) -> None:
    # esc_during_command (the real TUI through `codex-presence codex`): a 40 s command, Esc
    # at 2.6 s ("1 background terminal running" on its screen), /exit before it ends.
    path = FIXTURES / f"codex-tui-{version}" / "esc_during_command.jsonl"
    rows = _background_by_line(path)
    assert [count for _, count in rows] == [1, 0]
    text = path.read_bytes().splitlines()
    on, off = (orjson.loads(text[line - 1]) for line, _ in rows)  # type: ignore[operator]
    assert on["msg"]["method"] == "thread/status/changed"
    assert off.get("event") == "hangup"


@pytest.mark.parametrize(("version", "on", "off"), [("0.169.0", 81, 84), ("0.171.0", 95, 98)])
def test_codex_tui_esc_leaves_a_command_in_the_background_until_it_ends(
    version: str, on: int, off: int
) -> None:
    # esc_command_ends_in_background (the real TUI through `codex-presence codex`): a 6 s
    # command, Esc ~1 s in; the screens show "1 background terminal running", then not.
    path = FIXTURES / f"codex-tui-{version}" / "esc_command_ends_in_background.jsonl"
    assert _background_by_line(path) == [(on, 1), (off, 0)]
    lines = path.read_bytes().splitlines()
    assert orjson.loads(lines[off - 1])["msg"]["method"] == "item/completed"
    screens = path.with_name("esc_command_ends_in_background.screens.txt").read_text()
    background, ended = screens.split("===== background")[1], screens.split("===== ended")[1]
    assert "1 background terminal running" in background.split("=====")[1]
    assert "background terminal" not in ended.split("=====")[1]


# -- Claude Code -----------------------------------------------------------------------------


def _hook(event: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": "s1", "prompt_id": "p1", "hook_event_name": event, **fields}


def _bash_bg(task: str = "b1", tool: str = "toolu_1") -> list[dict[str, Any]]:
    tool_input = {"command": "sleep 9", "run_in_background": True}
    return [
        _hook("PreToolUse", tool_name="Bash", tool_use_id=tool, tool_input=tool_input),
        _hook(
            "PostToolUse",
            tool_name="Bash",
            tool_use_id=tool,
            tool_input=tool_input,
            tool_response={"stdout": "", "backgroundTaskId": task},
        ),
    ]


def _task(task: str, kind: str = "shell", status: str = "running") -> dict[str, Any]:
    return {"id": task, "type": kind, "status": status}


def _notification(task: str) -> dict[str, Any]:
    prompt = f"<task-notification>\n<task-id>{task}</task-id>\n<status>completed</status>"
    return _hook("UserPromptSubmit", prompt=prompt, prompt_id="p2")


class Claude:
    def __init__(self) -> None:
        self.mapping = ClaudeMapping()
        self.t = 0.0
        self.background: list[tuple[int, str]] = []

    def feed(self, *messages: dict[str, Any], source: str = "hook") -> Claude:
        for message in messages:
            self.t += 0.01
            for transition in self.mapping.feed(source, message, self.t):  # type: ignore[arg-type]
                if transition.changes_background:
                    self.background.append((transition.background, transition.cause))
        return self

    def wait(self, seconds: float) -> Claude:
        self.t += seconds
        transition = self.mapping.tick(self.t)
        if transition is not None and transition.changes_background:
            self.background.append((transition.background, transition.cause))
        return self


def test_claude_a_background_bash_counts_from_its_post_until_its_notification() -> None:
    s = Claude().feed(_hook("UserPromptSubmit"), *_bash_bg())
    assert s.background == [(1, "PostToolUse")]
    since = s.mapping.background_since
    assert since is not None
    s.feed(_hook("Stop", background_tasks=[_task("b1")]))
    assert s.mapping.state == "idle" and s.mapping.background == 1
    assert s.mapping.background_since == since  # still the same background work
    s.feed(_notification("b1"))
    assert s.background[-1] == (0, "UserPromptSubmit")
    assert s.mapping.background_since is None


def test_claude_stop_lists_what_runs_whatever_came_before() -> None:
    s = Claude().feed(_hook("UserPromptSubmit"), *_bash_bg("b1"))
    tasks = [_task("b2"), _task("a1", "subagent"), _task("b1", status="completed")]
    s.feed(_hook("Stop", background_tasks=tasks))
    assert s.mapping.background == 2
    assert s.mapping.state == "idle"  # a listed subagent that never started: no work of ours
    s.feed(_hook("Stop", background_tasks=[]))
    assert s.mapping.background == 0


def test_claude_a_stop_without_a_list_says_nothing_of_the_background() -> None:
    s = Claude().feed(_hook("UserPromptSubmit"), *_bash_bg())
    s.feed(_hook("Stop"), _hook("StopFailure"), _hook("Stop", background_tasks="junk"))
    assert s.mapping.background == 1


def test_claude_a_background_subagent_counts_and_works_until_its_subagent_stop() -> None:
    s = Claude().feed(_hook("UserPromptSubmit"), _hook("SubagentStart", agent_id="a1"))
    s.feed(_hook("Stop", background_tasks=[_task("a1", "subagent")]))
    assert (s.mapping.state, s.mapping.background) == ("working", 1)
    s.feed(_hook("SubagentStop", agent_id="a1"))
    assert (s.mapping.state, s.mapping.background) == ("idle", 0)


@pytest.mark.parametrize(
    ("status", "left"),
    [("idle", 0), ("shell", 1)],
)
def test_claude_the_file_settling_on_idle_ends_the_background_but_shell_does_not(
    status: str, left: int
) -> None:
    s = Claude().feed(_hook("UserPromptSubmit"), *_bash_bg())
    s.feed(_hook("Stop", background_tasks=[_task("b1")]))
    s.feed({"status": status, "statusUpdatedAt": 1}, source="session")
    s.wait(SETTLE + 0.1)
    assert s.mapping.background == left


@pytest.mark.parametrize("end", ["SessionEnd", "close"])
def test_claude_the_end_of_the_session_ends_the_background(end: str) -> None:
    s = Claude().feed(_hook("UserPromptSubmit"), *_bash_bg())
    if end == "close":
        transition = s.mapping.close()
        assert transition is not None and transition.background == 0
    else:
        s.feed(_hook(end))
    assert s.mapping.background == 0 and s.mapping.background_since is None


@settings(max_examples=300, deadline=None)
@given(junk)
def test_claude_background_readers_never_raise(value: Any) -> None:
    running = running_tasks(value)
    assert running is None or all(isinstance(k, str) for k in running)
    assert task_notification_id(value) is None or isinstance(value, str)
    assert background_command_id({"tool_name": "Bash", "tool_input": value}) is None
    assert background_command_id(
        {"tool_name": "Bash", "tool_input": {"run_in_background": True}, "tool_response": value}
    ) is None or isinstance(value, dict)


def test_claude_real_background_command_counts_while_it_runs() -> None:
    # background_command: PostToolUse of the run_in_background Bash at 6 (0.99 s), the
    # command ends at ~4.0 s: its <task-notification> prompt at 16.
    path = FIXTURES / "claude-code-2.1.332" / "background_command.jsonl"
    assert _background_by_line(path) == [(6, 1), (16, 0)]


def test_claude_real_background_subagent_counts_from_stop_to_its_subagent_stop() -> None:
    path = FIXTURES / "claude-code-2.1.332" / "subagent_background.jsonl"
    assert _background_by_line(path) == [(13, 1), (19, 0)]


# -- the shells' skeleton --------------------------------------------------------------------


def _bg(count: int, previous: int, cause: str = "x") -> Transition:
    idle = ActivityState.IDLE
    return Transition(idle, idle, cause, background=count, previous_background=previous)


def test_the_session_dates_background_work_from_when_there_was_some() -> None:
    clock = iter([100.0, 200.0, 300.0])
    seen: list[tuple[int, float | None]] = []
    session = Session(observers=[], companions=[], close=lambda _: [], clock=lambda: next(clock))
    session.observers.append(lambda t: seen.append((session.background, session.background_since)))
    session.deliver([_bg(1, 0), _bg(2, 1), _bg(0, 2), _bg(1, 0)])
    assert seen == [(1, 100.0), (2, 100.0), (0, None), (1, 200.0)]


def test_the_log_says_background_changes_apart(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="codex_presence.relay")
    log_transition(_bg(1, 0, "turn/completed"))
    log_transition(Transition(ActivityState.IDLE, ActivityState.WORKING, "turn/started", 1, 1))
    assert [r.getMessage() for r in caplog.records] == [
        "1 left running in the background: turn/completed",
        "working (turn/started)",
    ]


def test_a_failed_analysis_ends_the_background_it_showed() -> None:
    guard = AnalysisGuard(lambda cause: None)
    guard.run(lambda: [_bg(2, 0)])

    def broken() -> list[Transition]:
        raise RuntimeError("a bug")

    (transition,) = guard.run(broken)
    assert (transition.background, transition.previous_background) == (0, 2)
    assert not transition.changes_state
