"""The facts the Gemini CLI mapping is built on, checked against the real gemini 0.61.0.

Each test runs a scenario of ``tests/support/gemini_scenarios.py`` afresh (the real binary
in tmux or ``-p``, the fake Gemini API, every hook captured with the chat file), checks what
``docs/gemini-cli.md`` says of it, and replays the live capture through
:class:`~codex_presence.core.gemini.mapping.GeminiMapping`: the states a person expects, in
order. They fail, never skip, under CI=true when the binary is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench._claude_driver import Capture
from codex_presence.core.gemini.mapping import GeminiMapping
from codex_presence.core.gemini.protocol import CAPTURED
from tests.support.gemini_driver import require_gemini
from tests.support.gemini_scenarios import CANCELLED, FIXTURES, SCENARIOS, record

pytestmark = pytest.mark.gemini

Message = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def _gemini() -> Path:
    return require_gemini()


def _events(cap: Capture) -> list[str]:
    return [str(m.get("hook_event_name")) for m in cap.hooks()]


def _states(cap: Capture) -> list[str]:
    """The mapping's states, each change once, over the capture."""
    mapping = GeminiMapping()
    states = ["idle"]
    for t, source, msg in cap.entries:
        for transition in mapping.feed(CAPTURED[source], msg, t):
            if transition.changes_state:
                states.append(transition.state.value)
    return states


def _key(cap: Capture, what: str) -> float:
    return next(t for t, action in cap.actions if action == what)


def _after(cap: Capture, t0: float) -> list[tuple[str, Message]]:
    return [(source, msg) for t, source, msg in cap.entries if t > t0]


def test_every_scenario_has_a_fixture() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.jsonl")) == sorted(SCENARIOS)


def test_print_mode_brackets_the_session_and_the_turn(tmp_path: Path) -> None:
    cap = record("print_tool", None, root=tmp_path / "r")
    events = _events(cap)
    assert events[:2] == ["SessionStart", "BeforeAgent"] and events[-2:] == [
        "AfterAgent",
        "SessionEnd",
    ]
    assert events.index("BeforeTool") < events.index("AfterTool") and "Notification" not in events
    assert _states(cap) == ["idle", "working", "idle"]


def test_allow_once_fires_nothing_until_the_tool_has_run(tmp_path: Path) -> None:
    cap = record("approval_allow", None, root=tmp_path / "r")
    events = _events(cap)
    ask = events.index("Notification")
    assert events[ask - 1] == "BeforeTool" and events[ask + 1] == "AfterTool"
    asked = next(t for t, s, m in cap.entries if m.get("hook_event_name") == "Notification")
    allowed = next(t for t, action in cap.actions if action == "key Enter" and t > asked)
    first_after = next(m for s, m in _after(cap, allowed) if s == "hook")
    assert first_after["hook_event_name"] == "AfterTool"
    assert _states(cap) == ["idle", "working", "blocked", "working", "idle"]


@pytest.mark.parametrize("name", ["approval_esc", "approval_no"])
def test_esc_or_no_at_an_approval_fires_no_hook_and_writes_the_cancel_line(
    tmp_path: Path, name: str
) -> None:
    cap = record(name, None, root=tmp_path / "r")
    key = "key Escape" if name == "approval_esc" else "key 3"
    after = _after(cap, _key(cap, key))
    hooks = [str(m.get("hook_event_name")) for s, m in after if s == "hook"]
    assert set(hooks) == {"SessionEnd"}, hooks  # /quit's, and nothing before it
    assert any(
        s == "transcript" and m.get("type") == "info" and m.get("content") == CANCELLED
        for s, m in after
    )
    assert _states(cap) == ["idle", "working", "blocked", "idle"]


def test_esc_before_the_answer_writes_the_cancel_line_then_fires_after_agent(
    tmp_path: Path,
) -> None:
    cap = record("esc_while_waiting", None, root=tmp_path / "r")
    after = _after(cap, _key(cap, "key Escape"))
    order = [
        "cancel"
        if s == "transcript" and m.get("content") == CANCELLED
        else m.get("hook_event_name")
        for s, m in after
        if s == "hook" or m.get("content") == CANCELLED
    ]
    assert order[:2] == ["cancel", "AfterAgent"], order
    assert _states(cap) == ["idle", "working", "idle"]


def test_quit_ends_the_session_with_status_0(tmp_path: Path) -> None:
    cap = record("quit_at_once", None, root=tmp_path / "r")
    assert ("SessionStart" in _events(cap)) and _events(cap)[-1] == "SessionEnd"
    assert cap.actions[-1][1] == "exited 0"
    assert _states(cap) == ["idle"]
