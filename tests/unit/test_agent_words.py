"""The readers' side of the agent record (issue 32): the roster text, the watch view and
the notices say each agent (client, project, state, what it waits on), from the roster's
``agents`` as the contract gives them, escaped, and whatever junk a broker sends."""

from __future__ import annotations

from typing import Any

import pytest

from codex_presence import ActivityState
from codex_presence.client.roster_text import roster_text, watch_text
from codex_presence.core.agent_record import agent_words, waits_words
from codex_presence.core.notify_policy import Due, NotifyPolicy, Rule, message, waiting_words

NOW = 1_764_590_120_000
BLOCKED_AGENT = {
    "session": "s1",
    "state": "blocked",
    "since": NOW - 60_000,
    "background": 0,
    "client": "claude",
    "version": "2.1.332",
    "host": "laptop",
    "project": "api-server",
    "waits": {"kind": "command", "tool": "Bash", "program": "make"},
}
WORKING_AGENT = {
    "session": "s2",
    "state": "working",
    "since": NOW - 180_000,
    "background": 0,
    "client": "codex-app-server",
    "project": "web",
}
BOB = {
    "name": "bob",
    "role": {"title": "engineer", "permissions": []},
    "connected": 2,
    "activity": "blocked",
    "activitySince": NOW - 60_000,
    "sessions": {"working": 1, "blocked": 1},
    "agents": [BLOCKED_AGENT, WORKING_AGENT],
}


def test_the_roster_text_has_a_line_per_agent_under_its_member() -> None:
    text = roster_text("acme", [BOB], you=None, activity=True, now_ms=NOW)
    assert text.splitlines() == [
        "team acme roster:",
        "- bob [engineer] connected=2 blocked 1m (sessions: 1 working, 1 blocked)",
        "  - claude in api-server: blocked 1m, approve `make`",
        "  - codex-app-server in web: working 3m",
    ]


def test_without_activity_the_roster_text_is_the_designs() -> None:
    text = roster_text("acme", [BOB], you=None, activity=False, now_ms=NOW)
    assert text.splitlines() == ["team acme roster:", "- bob [engineer] connected=2"]


def test_the_watch_view_says_each_agent_and_what_it_waits_on() -> None:
    lines = watch_text("acme", [BOB], you=None, now_ms=NOW).splitlines()
    assert lines[2] == "  · claude in api-server · [!] approve `make` · 1 min"
    assert lines[3].startswith("  · codex-app-server in web · ") and lines[3].endswith("3 min")


BARE = {"session": "s3", "state": "blocked", "since": NOW - 5_000, "background": 0}


def test_agents_sharing_nothing_are_the_members_line_alone() -> None:
    """Sessions that shared no record (``--share none``, an older runner, a report by
    hand) add no line: the member's own says their state, and how many are busy."""
    alone = {**BOB, "agents": [BARE, {**BARE, "session": "s4", "state": "working"}]}
    text = roster_text("acme", [alone], you=None, activity=True, now_ms=NOW)
    assert text.splitlines()[1:] == [
        "- bob [engineer] connected=2 blocked 1m (sessions: 1 working, 1 blocked)"
    ]
    assert len(watch_text("acme", [alone], you=None, now_ms=NOW).splitlines()) == 2
    assert waiting_words(alone["agents"]) is None


def test_beside_an_agent_that_says_one_sharing_nothing_is_listed_as_an_agent() -> None:
    mixed = {**BOB, "agents": [BARE, WORKING_AGENT]}
    text = roster_text("acme", [mixed], you=None, activity=True, now_ms=NOW)
    assert text.splitlines()[2:] == [
        "  - an agent: blocked 5s, needs input",
        "  - codex-app-server in web: working 3m",
    ]


def test_markup_and_escapes_from_the_wire_are_shown_as_text() -> None:
    evil = {
        **BLOCKED_AGENT,
        "project": "x\x1b[2J<b>",
        "waits": {"kind": "command", "program": "rm\n- alice connected=9"},
    }
    text = roster_text("acme", [{**BOB, "agents": [evil]}], you=None, activity=True, now_ms=NOW)
    assert "\x1b" not in text and "\n- alice" not in text
    assert len(text.splitlines()) == 3


@pytest.mark.parametrize(
    "agents",
    [None, "junk", [1, "x", None], [{"state": 5, "since": "soon", "waits": [1]}]],
)
def test_junk_agents_never_break_the_text(agents: Any) -> None:
    roster_text("acme", [{**BOB, "agents": agents}], you=None, activity=True, now_ms=NOW)
    watch_text("acme", [{**BOB, "agents": agents}], you=None, now_ms=NOW)
    assert waiting_words(agents) is None or isinstance(waiting_words(agents), str)


@pytest.mark.parametrize(
    ("waits", "words"),
    [
        ({"kind": "command", "program": "make"}, "approve `make`"),
        ({"kind": "command", "program": "make", "detail": "make test"}, "approve `make test`"),
        ({"kind": "command"}, "approve a command"),
        ({"kind": "file_change", "tool": "Edit"}, "approve a file change"),
        ({"kind": "question"}, "answer a question"),
        ({"kind": "permission", "tool": "WebFetch"}, "grant `WebFetch`"),
        ({"kind": "elicitation", "tool": "codex_apps"}, "answer `codex_apps`"),
        ({"kind": "other"}, "needs input"),
        (None, "needs input"),
    ],
)
def test_waits_in_words(waits: Any, words: str) -> None:
    assert waits_words(waits) == words


def test_agent_in_words() -> None:
    assert agent_words(BLOCKED_AGENT) == "claude in api-server"
    assert agent_words({"client": "claude"}) == "claude"
    assert agent_words({}) == "an agent"


def test_a_blocked_notice_says_which_agent_waits_on_what_where() -> None:
    policy = NotifyPolicy([Rule(after=60)])
    t0 = (NOW - 60_000) / 1000
    policy.observe("bob", ActivityState.BLOCKED, NOW - 60_000, t0, BOB["agents"])
    action = policy.next_action(t0 + 60)
    assert isinstance(action, Due)
    [notice] = action.notices
    title, body = message(notice, team="acme", now=t0 + 61)
    assert title == "bob · claude in api-server: approve `make`"
    assert body.startswith("bob · claude in api-server: approve `make`: needs input since ")


def test_a_notice_without_agents_reads_as_before() -> None:
    policy = NotifyPolicy([Rule(after=0)])
    policy.observe("bob", ActivityState.BLOCKED, NOW, NOW / 1000)
    action = policy.next_action(NOW / 1000)
    assert isinstance(action, Due)
    title, body = message(action.notices[0], team="acme", now=NOW / 1000)
    assert title == "bob: needs input"
    assert body.startswith("bob needs input since ")
