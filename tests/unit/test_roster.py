"""Presence objects and the roster text: pure functions, exact bytes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from codex_presence._wire import control_character, presence
from codex_presence.broker.team import Role
from codex_presence.client.roster_text import elapsed_text, roster_line, roster_text, watch_text
from codex_presence.core.activity import ActivityState


def test_presence_idle_has_neither_activity_nor_busy() -> None:
    p = presence(name="a", connected=0, created_at=0, last_seen=0, role=None)
    assert list(p) == ["name", "connected", "createdAt", "lastSeen", "role"]
    assert p["role"] is None


@pytest.mark.parametrize(
    ("state", "busy"), [(ActivityState.WORKING, True), (ActivityState.BLOCKED, False)]
)
def test_presence_busy_mirrors_working(state: ActivityState, busy: bool) -> None:
    role = Role("engineer", ("x",))
    p = presence(name="a", connected=3, created_at=1, last_seen=2, role=role, activity=state)
    assert orjson.dumps(p) == orjson.dumps(
        {
            "name": "a",
            "connected": 3,
            "createdAt": 1,
            "lastSeen": 2,
            "role": {"title": "engineer", "permissions": ["x"]},
            "activity": state.value,
            "busy": busy,
        }
    )


def _p(name: str, connected: int, role: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "connected": connected,
        "createdAt": 0,
        "lastSeen": 0,
        "role": role,
        **extra,
    }


DESIGN = [
    _p("alice", 2, {"title": "director", "permissions": ["members.manage", "objectives.create"]}),
    _p("builder", 1, {"title": "engineer", "permissions": []}, activity="working", busy=True),
    _p("scout", 0, {"title": "scout", "permissions": ["objectives.create"]}),
]


def test_the_design_example_exactly() -> None:
    assert roster_text("acme", DESIGN, you="alice") == (
        "team acme roster:\n"
        "- alice (you) [director] [admin] connected=2\n"
        "- builder [engineer] connected=1\n"
        "- scout [scout] [operator] offline"
    )


def test_no_you_marker_without_you_and_no_role_brackets_without_role() -> None:
    assert roster_line(_p("zed", 0, None), you=None) == "- zed offline"
    assert roster_line(_p("zed", 1, None), you="zed") == "- zed (you) connected=1"
    assert roster_line(_p("zed", 1, {"title": "", "permissions": ["members.manage"]})) == (
        "- zed [admin] connected=1"
    )


def test_control_characters_from_a_broker_are_shown_escaped() -> None:
    """Whatever a broker sends (ours refuses such a team file; another might not), a name,
    title or team name never forges a line or acts on the terminal: it shows escaped."""
    evil = [
        _p("a\x1b[2J", 1, {"title": "x]\n- mallory [admin] connected=9", "permissions": []}),
        _p("b", 0, {"title": "\x1b]52;c;ZXZpbA==\x07\u202e", "permissions": []}),
    ]
    for text in (
        roster_text("t\x1bc", evil, you=None),
        watch_text("t\x1bc", [{**evil[0], "activity": "working"}, evil[1]], you=None),
    ):
        lines = text.split("\n")
        assert len(lines) == 3
        assert all(control_character(line) is None for line in lines)
    assert roster_text("t\x1bc", evil, you=None).split("\n") == [
        "team t\\x1bc roster:",
        "- a\\x1b[2J [x]\\x0a- mallory [admin] connected=9] connected=1",
        "- b [\\x1b]52;c;ZXZpbA==\\x07\\u202e] offline",
    ]


def test_watch_text_shows_activity() -> None:
    blocked = [*DESIGN[:2], {**DESIGN[2], "activity": "blocked", "busy": False}]
    frames = {watch_text("acme", blocked, you="alice", frame=i) for i in range(3)}
    assert len(frames) == 3  # the spinner turns
    text = watch_text("acme", blocked, you="alice", frame=0)
    lines = text.splitlines()
    assert lines[1] == "- alice (you) [director] [admin] connected=2"
    assert lines[2].startswith("- builder [engineer] connected=1  ")
    assert lines[2].endswith(" working")
    assert lines[3] == "- scout [scout] [operator] offline  [!] needs input"


def test_presence_carries_activity_since_only_with_activity() -> None:
    working = presence(
        name="a",
        connected=1,
        created_at=1,
        last_seen=2,
        role=None,
        activity=ActivityState.WORKING,
        activity_since=5,
    )
    assert list(working)[-3:] == ["activity", "busy", "activitySince"]
    assert working["activitySince"] == 5
    idle = presence(name="a", connected=1, created_at=1, last_seen=2, role=None, activity_since=5)
    assert "activitySince" not in idle


@pytest.mark.parametrize(
    ("seconds", "human", "compact"),
    [
        (-3, "0 s", "0s"),  # a clock a little behind the broker's
        (45.9, "45 s", "45s"),
        (60, "1 min", "1m"),
        (14 * 60 + 59, "14 min", "14m"),
        (3600, "1 h", "1h"),
        (2 * 3600 + 5 * 60, "2 h 5 min", "2h5m"),
        (3 * 86400 + 4 * 3600 + 59, "3 d 4 h", "3d4h"),
    ],
)
def test_elapsed_text(seconds: float, human: str, compact: str) -> None:
    assert elapsed_text(seconds) == human
    assert elapsed_text(seconds, compact=True) == compact


NOW = 1_800_000_000_000
BUSY = [
    DESIGN[0],
    {**DESIGN[1], "activitySince": NOW - 3 * 60_000 - 5_000},
    {**DESIGN[2], "activity": "blocked", "busy": False, "activitySince": NOW - 125_000},
]


def test_activity_on_request_adds_state_and_how_long() -> None:
    assert roster_text("acme", BUSY, you="alice", now_ms=NOW) == roster_text(
        "acme", DESIGN, you="alice"
    )  # by default, the design's text: no activity
    assert roster_text("acme", BUSY, you="alice", activity=True, now_ms=NOW).splitlines() == [
        "team acme roster:",
        "- alice (you) [director] [admin] connected=2",
        "- builder [engineer] connected=1 working 3m",
        "- scout [scout] [operator] offline blocked 2m",
    ]
    # A broker that does not say since when: the state alone.
    assert roster_line(DESIGN[1], activity=True, now_ms=NOW) == (
        "- builder [engineer] connected=1 working"
    )


def test_watch_text_says_since_when() -> None:
    lines = watch_text("acme", BUSY, you="alice", now_ms=NOW).splitlines()
    assert lines[2].endswith(" working · 3 min")
    assert lines[3] == "- scout [scout] [operator] offline  [!] needs input · 2 min"
    later = watch_text("acme", BUSY, you="alice", now_ms=NOW + 60_000).splitlines()
    assert later[3].endswith("needs input · 3 min")  # the time moves on, the since does not


def test_busy_sessions_are_counted_only_when_there_are_two_or_more() -> None:
    """Issue 23: ``sessions`` rides with ``activity`` only while two or more of the
    member's sessions are busy; the renderers say how many, and read it defensively."""
    from codex_presence.client.roster_text import sessions_text

    base: dict[str, Any] = {"name": "b", "connected": 0, "createdAt": 1, "lastSeen": 2}
    one = presence(**_args(base), activity=ActivityState.WORKING, sessions=(1, 0))
    assert "sessions" not in one
    both = presence(**_args(base), activity=ActivityState.BLOCKED, sessions=(2, 1))
    assert both["sessions"] == {"working": 2, "blocked": 1}
    assert list(both)[-1] == "sessions"
    two_blocked = presence(**_args(base), activity=ActivityState.BLOCKED, sessions=(0, 2))
    assert two_blocked["sessions"] == {"blocked": 2}
    idle = presence(**_args(base), sessions=(2, 1))
    assert "sessions" not in idle
    assert sessions_text(both) == "2 working, 1 blocked"
    assert sessions_text(one) == ""
    for junk in ("2", {"working": "2"}, {"working": True, "blocked": True}, {"working": -3}):
        assert sessions_text({**both, "sessions": junk}) == ""
    line = roster_line({**both, "activitySince": 0}, activity=True, now_ms=60_000)
    assert line == "- b offline blocked 1m (sessions: 2 working, 1 blocked)"
    assert roster_line(both) == "- b offline"  # without the opt-in: the design's line
    watched = watch_text("acme", [{**both, "activitySince": 0}], you=None, now_ms=60_000)
    assert watched.splitlines()[1] == "- b offline  [!] needs input · 1 min · 2 working, 1 blocked"


def test_background_is_shown_apart_from_the_state() -> None:
    """Issue 23: ``background`` and ``backgroundSince`` ride with or without ``activity``,
    only when the count is above 0; the renderers say it idle or not, read defensively,
    and never make the member look busy."""
    from codex_presence.client.roster_text import background_text

    base: dict[str, Any] = {"name": "b", "connected": 1, "createdAt": 1, "lastSeen": 2}
    idle = presence(**_args(base), background=(1, 0))
    assert (idle.get("activity"), idle["background"], idle["backgroundSince"]) == (None, 1, 0)
    assert "busy" not in idle
    assert "background" not in presence(**_args(base), background=(0, None))
    working = presence(
        **_args(base), activity=ActivityState.WORKING, activity_since=0, background=(2, 0)
    )
    assert list(working)[-2:] == ["background", "backgroundSince"]
    assert roster_line(idle, activity=True, now_ms=240_000) == (
        "- b connected=1 (background: 1 command, 4m)"
    )
    assert roster_line(idle, now_ms=240_000) == "- b connected=1"  # no opt-in: the design's
    assert roster_line(working, activity=True, now_ms=240_000) == (
        "- b connected=1 working 4m (background: 2 commands, 4m)"
    )
    watched = watch_text("acme", [idle, working], you=None, now_ms=240_000).splitlines()
    assert watched[1] == "- b connected=1  idle · 1 background command · 4 min"
    assert watched[2].endswith("working · 4 min · 2 background commands · 4 min")
    for junk in ("1", True, -1, 0, None, 1.5):
        assert background_text({**idle, "background": junk}, 240_000, compact=True) == ""
    assert background_text({**idle, "backgroundSince": "x"}, 240_000, compact=False) == (
        "1 background command"
    )


def _args(base: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": base["name"],
        "connected": base["connected"],
        "created_at": base["createdAt"],
        "last_seen": base["lastSeen"],
        "role": None,
    }
