"""The agent record (issue 32), runner side: what the mappings say a block waits on and
where the agent works, what leaves the machine at each share level, and when the
reporter's policy sends it. Recorded sessions of real codex and claude are the fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from codex_presence._wire import AGENT_MAX_BYTES, agent_problem
from codex_presence.core.activity import (
    ActivitySignal,
    ActivityState,
    AgentFacts,
    HandleKind,
    Transition,
    Waits,
)
from codex_presence.core.agent_record import (
    MAX_DETAIL,
    MAX_FIELD,
    Share,
    one_line,
    program_of,
    record,
)
from codex_presence.core.claude.mapping import ClaudeMapping
from codex_presence.core.codex.mapping import CodexMapping
from codex_presence.core.recording import read_entries
from codex_presence.core.report_policy import Outcome, Post, ReportPolicy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

IDLE, WORKING, BLOCKED = ActivityState.IDLE, ActivityState.WORKING, ActivityState.BLOCKED


def codex_transitions(path: Path) -> list[Transition]:
    mapping = CodexMapping()
    out = []
    with path.open("rb") as lines:
        for entry in read_entries(lines):
            if entry.direction in ("client", "server") and entry.message is not None:
                transition = mapping.feed_message(entry.direction, entry.message)
                if transition is not None:
                    out.append(transition)
    return out


def claude_transitions(path: Path) -> list[Transition]:
    mapping = ClaudeMapping()
    out: list[Transition] = []
    with path.open("rb") as lines:
        for entry in read_entries(lines):
            if entry.direction in ("hook", "transcript", "session") and entry.message is not None:
                out.extend(mapping.feed(entry.direction, entry.message, entry.t or 0.0))
    return out


def blocked_waits(transitions: list[Transition]) -> list[Waits | None]:
    return [t.waits for t in transitions if t.state is BLOCKED]


# -- the activity signal ----------------------------------------------------------------


def test_a_blocked_transition_carries_the_newest_blockers_waits() -> None:
    signal = ActivitySignal()
    signal.open(HandleKind.BLOCK, ("a",), Waits("command", "shell", "make test"))
    first = signal.commit("one")
    signal.open(HandleKind.BLOCK, ("b",), Waits("question"))
    second = signal.commit("two")
    signal.close(HandleKind.BLOCK, ("b",))
    third = signal.commit("three")
    signal.close(HandleKind.BLOCK, ("a",))
    last = signal.commit("four")
    assert first is not None and first.waits == Waits("command", "shell", "make test")
    assert second is not None and second.waits == Waits("question") and not second.changes_state
    assert third is not None and third.waits == first.waits and third.changes_agent
    assert last is not None and last.state is IDLE and last.waits is None


def test_a_blocker_that_says_nothing_waits_on_other() -> None:
    signal = ActivitySignal()
    signal.open(HandleKind.BLOCK, ("flags",))
    transition = signal.commit("flags")
    assert transition is not None and transition.waits == Waits("other")


def test_facts_are_a_transition_of_their_own_and_junk_says_nothing() -> None:
    signal = ActivitySignal()
    signal.note(version="0.171.0", cwd="/src/api")
    transition = signal.commit("thread/started")
    assert transition is not None and not transition.changes_state
    assert transition.facts == AgentFacts("0.171.0", "/src/api")
    signal.note(version=7, cwd=None)
    assert signal.commit("again") is None


def test_waits_of_junk_are_left_out_and_long_text_is_cut() -> None:
    assert Waits.of("command", 3, {"no": 1}) == Waits("command")
    assert Waits.of("command", None, ["make", 1]) == Waits("command")
    assert Waits.of("command", None, ["make", "test"]).command == ("make", "test")
    cut = Waits.of("command", None, "x" * 10_000).command
    assert isinstance(cut, str) and len(cut) < 1000


# -- codex: the recordings ---------------------------------------------------------------


@pytest.mark.parametrize("version", ["codex-0.169.0", "codex-0.171.0", "codex-tui-0.171.0"])
def test_a_codex_command_approval_waits_on_its_program(version: str) -> None:
    transitions = codex_transitions(FIXTURES / version / "approval_accepted.jsonl")
    waits = blocked_waits(transitions)
    assert waits, "the recording never blocks"
    command = waits[-1]
    assert command is not None and command.kind == "command" and command.tool == "shell"
    assert command.command == "touch made.txt && echo done"  # the script, not bash -lc
    assert program_of(command.command) == "touch"
    assert transitions[-1].waits is None


@pytest.mark.parametrize("version", ["codex-0.169.0", "codex-0.171.0", "codex-tui-0.171.0"])
def test_codex_says_where_its_thread_works_and_its_version(version: str) -> None:
    facts = codex_transitions(FIXTURES / version / "approval_accepted.jsonl")[-1].facts
    assert facts.cwd is not None and facts.cwd.endswith("/work")
    assert facts.version == version.rsplit("-", 1)[1]


def _codex(*messages: dict[str, Any]) -> list[Transition]:
    mapping = CodexMapping()
    out = []
    for message in messages:
        transition = mapping.feed_message("server", message)
        if transition is not None:
            out.append(transition)
    return out


TURN = {"method": "turn/started", "params": {"threadId": "th", "turn": {"id": "t1"}}}


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        (
            "item/fileChange/requestApproval",
            {"itemId": "c", "reason": "write the patch"},
            Waits("file_change", "apply_patch", "write the patch"),
        ),
        (
            "item/tool/requestUserInput",
            {"itemId": "c", "questions": [{"id": "q", "question": "Proceed?"}]},
            Waits("question", "request_user_input", "Proceed?"),
        ),
        (
            "mcpServer/elicitation/request",
            {"serverName": "codex_apps", "mode": "form", "message": "Sign in"},
            Waits("elicitation", "codex_apps", "Sign in"),
        ),
        (
            "item/permissions/requestApproval",
            {"itemId": "c", "reason": "Select a workspace root", "permissions": {}},
            Waits("permission", None, "Select a workspace root"),
        ),
        (
            "item/commandExecution/requestApproval",
            {"itemId": "c", "command": "make test", "commandActions": "junk"},
            Waits("command", "shell", "make test"),
        ),
    ],
)
def test_each_codex_request_says_what_it_waits_on(
    method: str, params: dict[str, Any], expected: Waits
) -> None:
    request = {"method": method, "id": 5, "params": {"threadId": "th", "turnId": "t1", **params}}
    assert _codex(TURN, request)[-1].waits == expected


def test_a_legacy_command_approval_waits_on_its_argument_vector() -> None:
    legacy = {
        "method": "execCommandApproval",
        "id": 5,
        "params": {"conversationId": "th", "callId": "c", "command": ["make", "-j4"], "cwd": "/"},
    }
    waits = _codex(TURN, legacy)[-1].waits
    assert waits == Waits("command", "shell", ("make", "-j4"))


def test_a_title_threads_start_says_nothing_of_where() -> None:
    title = {
        "method": "thread/started",
        "params": {"thread": {"id": "x", "threadSource": "thread_title", "cwd": "/elsewhere"}},
    }
    assert _codex(title) == []


# -- claude: the recordings --------------------------------------------------------------


def test_a_claude_permission_waits_on_its_bash_command() -> None:
    transitions = claude_transitions(FIXTURES / "claude-code-2.1.332" / "permission_yes.jsonl")
    waits = blocked_waits(transitions)
    assert waits and waits[-1] == Waits("command", "Bash", "touch made.txt")
    facts = transitions[-1].facts
    assert facts.version == "2.1.332" and facts.cwd is not None and facts.cwd.endswith("/work")


def test_a_subagents_permission_notification_waits_on_the_newest_tool() -> None:
    path = FIXTURES / "field-claude-code" / "subagent_permission_without_request.jsonl"
    waits = blocked_waits(claude_transitions(path))
    assert waits and all(w is not None and w.kind != "other" for w in waits), waits


def _hook(event: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": event, "session_id": "s", "cwd": "/src/api", **fields}


def test_a_permission_notification_waits_on_its_pre_tool_use() -> None:
    mapping = ClaudeMapping()
    mapping.feed("hook", _hook("UserPromptSubmit", prompt="go", prompt_id="p"), 0.0)
    pre = _hook("PreToolUse", tool_use_id="u1", tool_name="Edit", tool_input={"file_path": "a.py"})
    mapping.feed("hook", pre, 0.1)
    notified = mapping.feed(
        "hook", _hook("Notification", notification_type="permission_prompt"), 0.2
    )
    assert notified[-1].waits == Waits("file_change", "Edit", "a.py")
    assert notified[-1].facts.cwd == "/src/api"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("agent_needs_input", Waits("question")), ("elicitation_dialog", Waits("elicitation"))],
)
def test_other_blocking_notifications_say_their_kind(kind: str, expected: Waits) -> None:
    mapping = ClaudeMapping()
    mapping.feed("hook", _hook("UserPromptSubmit", prompt="go", prompt_id="p"), 0.0)
    notified = mapping.feed("hook", _hook("Notification", notification_type=kind), 0.1)
    assert notified[-1].waits == expected


def test_a_permission_request_for_another_tool_is_a_permission() -> None:
    mapping = ClaudeMapping()
    mapping.feed("hook", _hook("UserPromptSubmit", prompt="go", prompt_id="p"), 0.0)
    asked = mapping.feed("hook", _hook("PermissionRequest", tool_name="WebFetch"), 0.1)
    assert asked[-1].waits == Waits("permission", "WebFetch")


# -- what leaves the machine -------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "program"),
    [
        ("make test", "make"),
        ("bash -lc 'cd api && make test'", "make"),
        ("CI=1 sudo /usr/bin/make -j4", "make"),
        (("/bin/zsh", "-lc", "npm run build"), "npm"),
        ("env -i python3 x.py", "python3"),
        ("ls|grep x", "ls"),
        ('echo "unclosed', "echo"),
        ("cd somewhere", None),
        ("", None),
        ("FOO=1", None),
    ],
)
def test_the_program_of_a_command(command: str | tuple[str, ...], program: str | None) -> None:
    assert program_of(command) == program


def test_one_line_strips_controls_and_cuts() -> None:
    assert one_line("make\n\ttest\x1b[31m \u202eevil\x00", 64) == "make test[31m evil"
    cut = one_line("x" * 500, MAX_DETAIL)
    assert len(cut) == MAX_DETAIL and cut.endswith("…")


WAITS = Waits("command", "shell", "bash -lc 'make test TOKEN=hunter2'")


def test_share_none_sends_no_record() -> None:
    assert record(share=Share.NONE, client="claude", host="laptop", waits=WAITS) is None


def test_share_default_names_the_program_and_never_its_arguments() -> None:
    agent = record(
        share=Share.DEFAULT,
        client="codex-tui",
        version="0.171.0",
        host="laptop",
        project="api-server",
        waits=WAITS,
    )
    assert agent == {
        "client": "codex-tui",
        "version": "0.171.0",
        "host": "laptop",
        "project": "api-server",
        "waits": {"kind": "command", "tool": "shell", "program": "make"},
    }
    assert "hunter2" not in repr(agent)


def test_share_detail_adds_the_command_on_one_short_line() -> None:
    long = Waits("command", "shell", "make test\n" + "x" * 400)
    agent = record(share=Share.DETAIL, client="claude", waits=long)
    assert agent is not None
    detail = agent["waits"]["detail"]
    assert detail.startswith("make test x") and len(detail) == MAX_DETAIL and "\n" not in detail


def test_a_record_is_bounded_and_clean_whatever_it_is_given() -> None:
    agent = record(
        share=Share.DETAIL,
        client="Not A Token!",
        version="v" * 500,
        host="evil\x1b]0;title\x07host",
        project="<script>alert(1)</script>" * 10,
        waits=Waits("weird-kind", "t" * 500, ("x" * 500,)),
    )
    assert agent is not None
    assert agent["client"] == "other"
    assert agent["waits"]["kind"] == "other"
    for key in ("version", "host", "project"):
        assert len(agent[key]) <= MAX_FIELD
        assert all(ord(c) >= 32 for c in agent[key])
    assert len(agent["waits"]["tool"]) <= MAX_FIELD
    assert len(agent["waits"]["detail"]) <= MAX_DETAIL
    assert "program" not in agent["waits"]  # only a command's


# -- when the record is sent --------------------------------------------------------------

AGENT = {"client": "claude", "project": "api"}
BLOCKED_AGENT = {"client": "claude", "project": "api", "waits": {"kind": "command"}}


def _ok(policy: ReportPolicy, now: float) -> Post:
    action = policy.next_action(now)
    assert isinstance(action, Post), action
    policy.on_result(Outcome.OK, now)
    return action


def test_the_record_goes_with_the_first_report_and_not_again_unchanged() -> None:
    policy = ReportPolicy()
    policy.observe_agent(AGENT)
    assert policy.next_action(0.0).__class__.__name__ == "Wait"  # idle stays silent
    policy.observe(WORKING, now=0.0)
    assert _ok(policy, 0.0).agent == AGENT
    assert _ok(policy, policy.heartbeat).agent is None  # a heartbeat: the broker holds it


def test_a_change_of_what_waits_while_blocked_is_a_report() -> None:
    policy = ReportPolicy()
    policy.observe_agent(BLOCKED_AGENT)
    policy.observe(BLOCKED, now=0.0)
    _ok(policy, 0.0)
    other = {**BLOCKED_AGENT, "waits": {"kind": "question"}}
    policy.observe_agent(other)
    assert _ok(policy, 0.1).agent == other
    policy.observe_agent(AGENT)
    policy.observe(IDLE, now=0.2)
    final = _ok(policy, 0.2)
    assert final.state is IDLE and final.agent == AGENT
    assert policy.settled


def test_after_a_reconnect_the_record_goes_again() -> None:
    policy = ReportPolicy()
    policy.observe_agent(AGENT)
    policy.observe(WORKING, now=0.0)
    _ok(policy, 0.0)
    policy.resend()
    assert _ok(policy, 0.1).agent == AGENT


def test_a_failed_report_sends_the_record_again() -> None:
    policy = ReportPolicy()
    policy.observe_agent(AGENT)
    policy.observe(WORKING, now=0.0)
    assert isinstance(policy.next_action(0.0), Post)
    policy.on_result(Outcome.FAILED, 0.0)
    assert _ok(policy, 100.0).agent == AGENT


def test_a_record_with_every_field_at_its_bound_still_encodes_within_the_brokers_bytes() -> None:
    """Every field at its length bound, in wide characters: the broker refuses a record
    over 512 bytes (and the runner would then send none for the whole session)."""
    wide = "é" * 200
    agent = record(
        share=Share.DETAIL,
        client="codex-app-server",
        version=wide,
        host=wide,
        project=wide,
        waits=Waits("command", wide, "make " + wide),
    )
    assert agent is not None
    assert len(orjson.dumps(agent)) <= AGENT_MAX_BYTES
    assert agent_problem(agent) is None
    assert agent["waits"]["program"] == "make" and agent["client"] == "codex-app-server"


def _tool_use_entry(command: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": command}}
    return {"type": "assistant", "message": {"role": "assistant", "content": [block]}}


def _waiting() -> dict[str, Any]:
    return {"status": "waiting", "waitingFor": "permission prompt", "statusUpdatedAt": 2}


@pytest.mark.parametrize("transcript_first", [True, False])
def test_where_the_file_leads_the_transcripts_tool_call_says_what_waits(
    transcript_first: bool,
) -> None:
    """Interactive claude (the file leads: no PreToolUse hook runs): the permission the
    session file says it waits on is for the transcript's newest tool call, whichever of
    the two is read first."""
    mapping = ClaudeMapping(file_led=True)
    mapping.feed("session", {"status": "busy", "statusUpdatedAt": 1}, 0.0)
    first, then = ("transcript", _tool_use_entry("make test")), ("session", _waiting())
    if not transcript_first:
        first, then = then, first
    out = mapping.feed(*first, 0.1) + mapping.feed(*then, 0.2)
    assert out[-1].state is BLOCKED
    assert out[-1].waits == Waits("command", "Bash", "make test")
