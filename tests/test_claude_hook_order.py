"""The order of async hook deliveries (:mod:`codex_presence.core.hooks.hook_order`): a
delivery behind a later one is dropped, within a window, across the wrap of pids."""

from __future__ import annotations

from pathlib import Path

from codex_presence.agent.claude.session import ClaudeSession
from codex_presence.core.activity import ActivityState, Transition
from codex_presence.core.hooks.hook_order import WINDOW, HookOrder


def test_deliveries_in_order_all_apply_and_unnumbered_ones_always() -> None:
    order = HookOrder(modulus=32768)
    assert all(order.admit(seq, t) for seq, t in [(100, 0.0), (105, 0.01), (None, 0.02)])
    assert order.admit(230, 0.5)
    assert all(order.admit(seq, t) for seq, t in [(300, 1.0), (None, 1.0), (301, 1.0)])
    assert order.late == 0


def test_a_delivery_behind_a_later_one_is_dropped() -> None:
    # PreToolUse's process (pid 100) delivers after its PermissionRequest's (pid 104).
    order = HookOrder(modulus=32768)
    assert order.admit(104, 0.000)
    assert not order.admit(100, 0.004)
    assert order.admit(110, 0.040)  # what follows applies as ever
    assert order.late == 1


def test_pids_that_wrap_are_still_in_order() -> None:
    order = HookOrder(modulus=32768)
    assert order.admit(32760, 0.0)
    assert order.admit(5, 0.01)  # wrapped: later
    assert not order.admit(32765, 0.02)  # before the wrap: earlier


def test_beyond_the_window_a_number_says_nothing_of_the_order() -> None:
    order = HookOrder(modulus=32768)
    assert order.admit(20000, 0.0)
    assert order.admit(100, WINDOW + 0.1)  # half a wrap later, an hour on: applies


def test_the_session_drops_a_delivery_overtaken_by_a_later_hook(tmp_path: Path) -> None:
    """As live: a turn's Stop (pid 12) delivered before its PreToolUse (pid 11). Applied in
    arrival order, the PreToolUse would open a tool no later hook closes: working after the
    turn. Dropped, the member is idle, as claude is."""
    seen: list[Transition] = []
    session = ClaudeSession(config=tmp_path, observers=[seen.append])
    common = {"session_id": "s1", "transcript_path": str(tmp_path / "t.jsonl"), "cwd": "/w"}
    session._on_hook({**common, "prompt_id": "p1", "hook_event_name": "UserPromptSubmit"}, 10)
    session._on_hook({**common, "prompt_id": "p1", "hook_event_name": "Stop"}, 12)
    late = {**common, "prompt_id": "p1", "hook_event_name": "PreToolUse", "tool_use_id": "t1"}
    session._on_hook({**late, "tool_name": "Read", "tool_input": {}}, 11)
    assert [t.state for t in seen] == [ActivityState.WORKING, ActivityState.IDLE]
    assert session.order.late == 1
    assert session.mapping.state == "idle"
