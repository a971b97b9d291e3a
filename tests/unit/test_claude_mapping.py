"""The Claude Code mapping, fed plain data: every rule of its module docstring, each handle's
closing events, the session file's settling, and any soup of events survived."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codex_presence.core.claude.mapping import PROMPT_CONFIRMED_WITHIN, SETTLE, ClaudeMapping
from codex_presence.core.claude.protocol import HOOK_EVENTS
from tests.support.depth import examples
from tests.support.junk import junk, or_junk

if TYPE_CHECKING:
    from codex_presence.core.claude.protocol import ClaudeSource

_stamps = itertools.count(1_796_000_000_000)


def hook(event: str, prompt: str = "p1", **fields: Any) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "transcript_path": "/home/x/.claude/projects/w/s1.jsonl",
        "cwd": "/w",
        "prompt_id": prompt,
        "hook_event_name": event,
        **fields,
    }


def marker(prompt: str = "p1", text: str = "[Request interrupted by user for tool use]") -> Any:
    return {
        "type": "user",
        "promptId": prompt,
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        "rowSource": "harness",
    }


def status(value: str, waiting_for: str | None = None) -> dict[str, Any]:
    snapshot: dict[str, Any] = {"pid": 1, "sessionId": "s1", "status": value}
    snapshot["statusUpdatedAt"] = next(_stamps)
    if waiting_for is not None:
        snapshot["waitingFor"] = waiting_for
    return snapshot


def prompted(display: str = "make a thing", stamp: int | None = None) -> dict[str, Any]:
    """A line of claude's prompt history, as the shell hands it on (this session's)."""
    stamp = next(_stamps) if stamp is None else stamp
    return {"display": display, "timestamp": stamp, "sessionId": "s1"}


class Session:
    """Feeds messages at a clock the test moves, and collects (state, cause) transitions."""

    def __init__(self) -> None:
        self.mapping = ClaudeMapping()
        self.t = 0.0
        self.transitions: list[tuple[str, str]] = []

    def _feed(self, source: ClaudeSource, message: Any) -> Session:
        self.t += 0.01
        for transition in self.mapping.feed(source, message, self.t):
            if transition.changes_state:
                self.transitions.append((transition.state.value, transition.cause))
        return self

    def hook(self, event: str, **fields: Any) -> Session:
        return self._feed("hook", hook(event, **fields))

    def transcript(self, entry: Any) -> Session:
        return self._feed("transcript", entry)

    def session(self, value: str, waiting_for: str | None = None) -> Session:
        return self._feed("session", status(value, waiting_for))

    def history(self, line: Any) -> Session:
        return self._feed("history", line)

    def wait(self, seconds: float) -> Session:
        """Time passes; the shell's timer fires at the mapping's deadline if it comes."""
        self.t += seconds
        deadline = self.mapping.deadline
        if deadline is not None and deadline <= self.t:
            transition = self.mapping.tick(self.t)
            if transition is not None and transition.changes_state:
                self.transitions.append((transition.state.value, transition.cause))
        return self

    @property
    def state(self) -> str:
        return self.mapping.state


# -- the turn ------------------------------------------------------------------------------------


def test_a_prompt_opens_the_turn_and_stop_closes_it() -> None:
    s = Session().hook("UserPromptSubmit").hook("Stop", background_tasks=[])
    assert s.transitions == [("working", "UserPromptSubmit"), ("idle", "Stop")]


@pytest.mark.parametrize("end", ["Stop", "StopFailure"])
def test_the_turn_ends_whatever_the_ending_prompt_id(end: str) -> None:
    """A queued prompt can run as a turn whose id only its Stop announces."""
    s = Session().hook("UserPromptSubmit", prompt="p1").hook(end, prompt="p-unannounced")
    assert s.state == "idle"


def test_a_prompt_typed_during_the_turn_reuses_it() -> None:
    s = Session().hook("UserPromptSubmit").hook("PreToolUse", tool_use_id="tu1")
    s.hook("UserPromptSubmit", prompt="p1")  # claude reuses the open prompt_id
    s.hook("PostToolUse", tool_use_id="tu1")
    assert s.state == "working"
    s.hook("Stop")
    assert s.state == "idle"
    assert s.transitions == [("working", "UserPromptSubmit"), ("idle", "Stop")]


def test_a_new_prompt_supersedes_the_open_turn_and_its_leftovers() -> None:
    s = Session().hook("UserPromptSubmit", prompt="p1").hook("PreToolUse", tool_use_id="tu1")
    s.hook("PermissionRequest")
    assert s.state == "blocked"
    s.hook("UserPromptSubmit", prompt="p2")
    assert s.state == "working"
    s.hook("Stop", prompt="p2")
    assert s.state == "idle"  # the old turn's tool did not outlive it


# -- tools ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["PostToolUse", "PostToolUseFailure"])
def test_a_tool_is_bracketed_by_its_id(end: str) -> None:
    s = Session().hook("PreToolUse", tool_use_id="a").hook("PreToolUse", tool_use_id="b")
    s.hook(end, tool_use_id="a")
    assert s.state == "working"
    s.hook(end, tool_use_id="b")
    assert s.state == "idle"


def test_post_tool_batch_closes_every_tool_of_its_scope() -> None:
    s = Session().hook("PreToolUse", tool_use_id="a").hook("PreToolUse", tool_use_id="b")
    s.hook("PostToolBatch")
    assert s.transitions[-1] == ("idle", "PostToolBatch")


def test_post_tool_batch_leaves_the_tools_of_other_scopes() -> None:
    s = Session().hook("PreToolUse", tool_use_id="main1")
    s.hook("PreToolUse", tool_use_id="sub1", agent_id="ag").hook("PostToolBatch", agent_id="ag")
    s.hook("PostToolUse", tool_use_id="main1")
    assert s.state == "idle"
    s = Session().hook("PreToolUse", tool_use_id="sub1", agent_id="ag").hook("PostToolBatch")
    assert s.state == "working"  # the main agent's batch is not the subagent's


# -- blocked -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("closer", "fields"),
    [
        ("PreToolUse", {"tool_use_id": "next"}),
        ("PostToolUse", {"tool_use_id": "tu1"}),
        ("PostToolUseFailure", {"tool_use_id": "tu1"}),
        ("PostToolBatch", {}),
        ("UserPromptSubmit", {}),
        ("Stop", {}),
        ("StopFailure", {}),
        ("Notification", {"notification_type": "idle_prompt"}),
        ("SessionEnd", {"reason": "other"}),
    ],
)
def test_a_permission_request_blocks_at_once_until_a_closer(
    closer: str, fields: dict[str, Any]
) -> None:
    s = Session().hook("UserPromptSubmit").hook("PreToolUse", tool_use_id="tu1")
    s.hook("PermissionRequest", tool_name="Bash")
    assert s.transitions[-1] == ("blocked", "PermissionRequest")
    s.hook(closer, **fields)
    assert s.state != "blocked"


@pytest.mark.parametrize("kind", ["permission_prompt", "agent_needs_input", "elicitation_dialog"])
def test_a_notification_that_needs_a_person_blocks_while_work_is_open(kind: str) -> None:
    s = Session().hook("UserPromptSubmit").hook("Notification", notification_type=kind)
    assert s.transitions[-1] == ("blocked", f"Notification {kind}")
    s.hook("Stop")
    assert s.state == "idle"


def test_a_late_notification_never_blocks_an_idle_member() -> None:
    s = Session().hook("UserPromptSubmit").hook("Stop")
    s.hook("Notification", notification_type="permission_prompt")
    assert s.state == "idle"
    assert s.mapping.stats.late == 1


def test_idle_prompt_closes_a_turn_left_open() -> None:
    """The hook-only fallback for an interrupt nothing else saw (60 s by default)."""
    s = Session().hook("UserPromptSubmit").hook("PreToolUse", tool_use_id="tu1")
    s.hook("Notification", notification_type="idle_prompt")
    assert s.transitions[-1] == ("idle", "Notification idle_prompt")


def test_other_notifications_change_nothing() -> None:
    s = Session().hook("UserPromptSubmit").hook("Notification", notification_type="auth_success")
    assert s.state == "working"


# -- subagents and background work ---------------------------------------------------------------


def running(*agents: str) -> list[dict[str, Any]]:
    return [{"id": a, "type": "subagent", "status": "running"} for a in agents]


def test_a_subagent_keeps_the_member_working_past_its_parents_stop() -> None:
    s = Session().hook("UserPromptSubmit").hook("SubagentStart", agent_id="ag")
    s.hook("PreToolUse", tool_use_id="sub1", agent_id="ag")
    s.hook("Stop", background_tasks=running("ag"))
    assert s.state == "working"
    s.hook("SubagentStop", agent_id="ag", background_tasks=running("ag"))  # lists itself
    assert s.transitions[-1] == ("idle", "SubagentStop")  # its tool closed with it


def test_a_stop_that_no_longer_lists_a_subagent_closes_it() -> None:
    s = Session().hook("UserPromptSubmit").hook("SubagentStart", agent_id="ag")
    s.hook("SubagentStart", agent_id="other")
    s.hook("Stop", background_tasks=running("other"))
    assert s.state == "working"
    s.hook("Stop", background_tasks=[])
    assert s.state == "idle"


def test_a_subagents_permission_request_is_its_own() -> None:
    s = Session().hook("SubagentStart", agent_id="ag")
    s.hook("PreToolUse", tool_use_id="sub1", agent_id="ag").hook("PermissionRequest", agent_id="ag")
    s.hook("PreToolUse", tool_use_id="main1")  # the main agent's next tool: not the dialog
    assert s.state == "blocked"
    s.hook("PostToolUse", tool_use_id="sub1", agent_id="ag")
    assert s.state == "working"


def test_a_background_command_is_not_the_members_work() -> None:
    shell = [{"id": "b1", "type": "shell", "status": "running"}]
    s = Session().hook("UserPromptSubmit").hook("Stop", background_tasks=shell)
    assert s.state == "idle"
    s.session("shell").wait(SETTLE)
    assert s.state == "idle"


# -- interrupts: the transcript --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["[Request interrupted by user for tool use]", "[Request interrupted by user]"]
)
def test_the_transcripts_interrupt_marker_ends_its_turn(text: str) -> None:
    s = Session().hook("UserPromptSubmit").hook("PreToolUse", tool_use_id="tu1")
    s.transcript(marker("p1", text))
    assert s.transitions[-1] == ("idle", "transcript interrupt")


def test_a_marker_of_a_superseded_prompt_is_ignored() -> None:
    s = Session().hook("UserPromptSubmit", prompt="p1").hook("UserPromptSubmit", prompt="p2")
    s.transcript(marker("p1"))
    assert s.state == "working"
    assert s.mapping.stats.late == 1


def test_a_typed_prompt_that_looks_like_a_marker_is_not_one() -> None:
    typed = {
        "type": "user",
        "promptId": "p1",
        "message": {"role": "user", "content": "[Request interrupted by user]"},
    }
    s = Session().hook("UserPromptSubmit").transcript(typed)
    assert s.state == "working"


def test_other_transcript_entries_change_nothing() -> None:
    s = Session().hook("UserPromptSubmit")
    s.transcript({"type": "system", "subtype": "turn_duration", "durationMs": 3})
    s.transcript({"type": "queue-operation", "operation": "enqueue"})
    assert s.state == "working"


# -- interrupts and more: the session file ---------------------------------------------------------


def test_an_idle_view_held_with_no_hook_closes_everything() -> None:
    """Esc before the first token: no hook, no transcript entry; only the file says."""
    s = Session().hook("UserPromptSubmit").session("busy").wait(2.0)
    s.hook("SubagentStart", agent_id="ag").hook("PreToolUse", tool_use_id="tu1")
    s.session("idle")
    assert s.state == "working"
    deadline = s.mapping.deadline
    assert deadline is not None and deadline == pytest.approx(s.t + SETTLE)
    s.wait(SETTLE / 2)
    assert s.state == "working"
    s.wait(SETTLE)
    assert s.transitions[-1] == ("idle", "session idle")
    assert s.mapping.deadline is None and not s.mapping.wants_follow


def test_a_hook_after_the_view_restarts_its_hold() -> None:
    """claude writes the file after some hooks: a <task-notification> turn's prompt comes
    before the idle of the turn before it, and busy 10 ms later."""
    s = Session().hook("UserPromptSubmit").session("busy").hook("Stop")
    s.hook("UserPromptSubmit", prompt="p2").session("idle").wait(SETTLE / 2)
    s.session("busy").wait(SETTLE * 3)
    assert s.state == "working"
    s.session("idle").wait(SETTLE / 2).hook("PreToolUse", tool_use_id="tu1").wait(SETTLE * 0.9)
    assert s.state == "working"  # the hold restarted at PreToolUse


def test_the_same_view_again_does_not_restart_its_hold() -> None:
    s = Session().hook("UserPromptSubmit")
    snapshot = status("idle")
    s._feed("session", snapshot)
    deadline = s.mapping.deadline
    s.wait(SETTLE / 2)._feed("session", dict(snapshot))
    assert s.mapping.deadline == deadline


def test_a_view_due_is_adopted_before_the_next_message() -> None:
    """So the shell's timer, however late, changes nothing a replay would not."""
    s = Session().hook("UserPromptSubmit").session("idle")
    s.t += SETTLE * 2  # the timer is late: the next message comes first
    s.transcript({"type": "assistant"})
    assert s.transitions[-1] == ("idle", "session idle")


@pytest.mark.parametrize("answer", ["busy", "idle", "shell"])
def test_the_end_of_a_dialog_claude_reported_unblocks_at_once(answer: str) -> None:
    s = Session().hook("UserPromptSubmit").hook("PreToolUse", tool_use_id="tu1")
    s.hook("PermissionRequest").session("waiting", "permission prompt")
    s.session(answer)
    # Answered: working while the command runs. Refused or interrupted: idle.
    assert s.state == ("working" if answer == "busy" else "idle")
    assert s.transitions[-1][1] == f"session {answer}"


def test_a_busy_view_held_with_nothing_open_is_work() -> None:
    """A queued prompt can run as a turn with no UserPromptSubmit of its own."""
    s = Session().hook("UserPromptSubmit").hook("Stop").session("busy").wait(SETTLE * 1.5)
    assert s.transitions[-1] == ("working", "session busy")
    s.session("idle")
    assert s.state == "idle"  # at once: the session's own handle
    s.session("busy").wait(SETTLE * 1.5).hook("Stop")
    assert s.state == "idle"


def test_a_busy_view_from_before_the_stop_starts_nothing_after_it() -> None:
    """claude -p writes ``busy`` once, at its prompt, and never again: after its Stop that
    view is the ended turn's. Before, it was adopted anew a SETTLE after the Stop whenever
    claude's exit (SessionEnd) came later than that, as on a loaded machine: an extra
    working and idle on the roster after every print-mode turn."""
    s = Session().hook("UserPromptSubmit").session("busy").wait(SETTLE * 1.5).hook("Stop")
    s.wait(SETTLE * 1.5).hook("SessionEnd", reason="other")
    assert s.transitions == [("working", "UserPromptSubmit"), ("idle", "Stop")]


def test_a_queued_turns_busy_read_before_the_stop_still_starts_it() -> None:
    """The queued prompt's turn (no UserPromptSubmit) writes a busy view of its own; with
    async hooks the poll can read it before the ended turn's Stop arrives. It is not the
    view the ended turn ran under, so it starts the turn once it has held."""
    s = Session().hook("UserPromptSubmit").session("busy").wait(SETTLE * 1.5)
    s.session("busy").wait(0.05).hook("Stop")  # the queued turn's view, then the old Stop
    s.wait(SETTLE * 1.5)
    assert s.transitions == [
        ("working", "UserPromptSubmit"),
        ("idle", "Stop"),
        ("working", "session busy"),
    ]


def test_a_busy_view_held_clears_a_block_no_dialog_backs() -> None:
    s = Session().hook("UserPromptSubmit").hook("PermissionRequest").session("busy")
    s.wait(SETTLE * 1.5)
    assert s.state == "working"


@pytest.mark.parametrize("waiting_for", ["permission prompt", "input needed", "sandbox request"])
def test_a_waiting_view_held_blocks(waiting_for: str) -> None:
    s = Session().hook("UserPromptSubmit").session("waiting", waiting_for).wait(SETTLE * 1.5)
    assert s.transitions[-1] == ("blocked", "session waiting")
    s.hook("PreToolUse", tool_use_id="tu1")
    assert s.state == "working"  # hooks are fresher news


def test_a_dialog_the_person_opened_has_no_opinion() -> None:
    s = Session().session("waiting", "dialog open")
    assert s.mapping.deadline is None
    s.wait(SETTLE * 2)
    assert s.state == "idle"


def test_the_files_first_content_has_no_status_and_no_opinion() -> None:
    s = Session()._feed("session", {"pid": 1, "sessionId": "s1"})
    assert s.mapping.deadline is None and s.mapping.stats.ignored == 1


def test_wants_follow_only_while_something_can_change() -> None:
    s = Session()
    assert not s.mapping.wants_follow
    s.hook("UserPromptSubmit")
    assert s.mapping.wants_follow
    s.hook("Stop")
    s.session("idle")
    assert s.mapping.wants_follow  # a view awaits adoption
    s.wait(SETTLE * 2)
    assert not s.mapping.wants_follow


# -- the end -------------------------------------------------------------------------------------


def test_session_end_and_the_process_end_close_everything() -> None:
    s = Session().hook("UserPromptSubmit").hook("SubagentStart", agent_id="ag")
    s.hook("PermissionRequest").hook("SessionEnd", reason="prompt_input_exit")
    assert s.state == "idle"
    s = Session().hook("SubagentStart", agent_id="ag").hook("PermissionRequest")
    s.session("busy").wait(SETTLE * 2)
    transition = s.mapping.close()
    assert transition is not None and transition.cause == "eof" and s.state == "idle"


@pytest.mark.parametrize(
    "message",
    [
        None,
        [],
        "text",
        {"hook_event_name": "PreToolUse"},  # no tool_use_id
        {"hook_event_name": "SubagentStart"},  # no agent_id
        {"hook_event_name": "NoSuchEvent"},
        {"hook_event_name": 7},
        {},
    ],
)
def test_malformed_hooks_are_ignored_and_counted(message: Any) -> None:
    s = Session()._feed("hook", message)
    assert s.state == "idle" and s.transitions == []
    stats = s.mapping.stats
    assert stats.wrong_shape + stats.ignored == 1


# -- the file leading (issue 27) -------------------------------------------------------------------


def file_led() -> Session:
    s = Session()
    s.mapping.file_led = True
    return s


def test_where_the_file_leads_each_view_is_the_state_at_once() -> None:
    s = file_led().session("idle").session("busy").session("waiting", "permission prompt")
    s.session("busy").session("waiting", "input needed").session("idle")
    assert s.transitions == [
        ("working", "session busy"),
        ("blocked", "session waiting"),
        ("working", "session busy"),
        ("blocked", "session waiting"),
        ("idle", "session idle"),
    ]
    assert s.mapping.deadline is None and s.mapping.stats.adopted == 6


def test_a_session_start_says_the_file_leads_and_adopts_a_view_waiting() -> None:
    """A replay learns it from the recording: SessionStart is registered only then."""
    s = Session().session("busy")
    assert s.state == "idle" and s.mapping.deadline == pytest.approx(s.t + SETTLE)
    s.hook("SessionStart", source="startup").wait(0.0)
    assert s.mapping.file_led and s.state == "working"
    s.session("idle")
    assert s.transitions == [("working", "session busy"), ("idle", "session idle")]


def test_where_the_file_leads_a_hook_does_not_unsettle_it() -> None:
    s = file_led().session("busy").hook("SessionStart", source="clear")
    assert s.state == "working" and s.mapping.deadline is None


def test_where_the_file_leads_the_transcript_counts_the_background_tasks() -> None:
    s = file_led().session("busy")
    s.transcript({"type": "user", "toolUseResult": {"backgroundTaskId": "bg1"}})
    s.transcript({"type": "user", "toolUseResult": {"isAsync": True, "agentId": "ag1"}})
    s.transcript({"type": "user", "toolUseResult": {"agentId": "sync"}})  # not async
    assert s.mapping.background == 2
    s.session("shell")
    assert s.state == "idle" and s.mapping.background == 2  # still running
    notice = "<task-notification>\n<task-id>bg1</task-id>\n<status>completed</status>"
    s.transcript({"type": "queue-operation", "operation": "enqueue", "content": notice})
    assert s.mapping.background == 1
    s.transcript({"type": "user", "message": {"role": "user", "content": notice}})  # again
    assert s.mapping.background == 1
    s.session("busy").session("idle")  # idle, not shell: nothing runs
    assert s.mapping.background == 0
    # Where the hooks lead, the Bash's PostToolUse says it, not the transcript.
    s = Session().hook("UserPromptSubmit")
    s.transcript({"type": "user", "toolUseResult": {"backgroundTaskId": "bg1"}})
    assert s.mapping.background == 0


@pytest.mark.parametrize("no_opinion", [("waiting", "dialog open"), ("compacting", None)])
def test_where_the_file_leads_a_view_with_no_opinion_keeps_the_work_going(
    no_opinion: tuple[str, str | None],
) -> None:
    """claude 2.1.332's status function puts any top dialog's ``waitingFor`` before
    ``busy``, and some of its dialogs that say ``dialog open`` come in the middle of a turn
    ("Session paused": retry on a fallback model, continue on usage credits). No opinion,
    as the module doc says, so no change: not idle in the middle of a turn (where the file
    leads, nothing else would say it is still on). A status we do not know, the same."""
    s = file_led().session("busy").session(*no_opinion)
    assert s.state == "working"
    s.session("busy").session("idle")
    assert s.transitions == [("working", "session busy"), ("idle", "session idle")]
    # From idle, the same view starts nothing either.
    s.session(*no_opinion)
    assert s.state == "idle"


# -- a prompt in claude's history, where the file leads (issue 34) ---------------------------------


def test_a_prompt_in_the_history_is_working_before_the_files_busy() -> None:
    s = file_led().session("idle").history(prompted())
    assert s.state == "working"
    s.session("busy")  # the file says the turn: it carries the work on, no new transition
    assert s.mapping.deadline is None
    s.wait(PROMPT_CONFIRMED_WITHIN * 2).session("idle")
    assert s.transitions == [("working", "history prompt"), ("idle", "session idle")]


def test_a_prompt_the_file_says_waiting_for_blocks_it() -> None:
    s = file_led().session("idle").history(prompted()).session("waiting", "permission prompt")
    assert s.transitions == [("working", "history prompt"), ("blocked", "session waiting")]
    s.session("busy").session("idle")
    assert s.state == "idle"


@pytest.mark.parametrize("command", ["/help", "/cost", "/clear", "/model"])
def test_a_slash_command_in_the_history_starts_nothing(command: str) -> None:
    """claude writes a slash command's line as a prompt's; most open a dialog (the file's
    ``dialog open``, no opinion) or do nothing: no turn."""
    s = file_led().session("idle").history(prompted(command)).session("waiting", "dialog open")
    assert s.state == "idle" and s.transitions == [] and s.mapping.deadline is None


def test_a_prompt_no_view_confirms_is_over_after_a_while() -> None:
    """A prompt that starts no turn (a hook of the person's refused it): the file says
    nothing new; a view with no opinion does not confirm it either."""
    s = file_led().session("idle").history(prompted())
    s.session("waiting", "dialog open").wait(PROMPT_CONFIRMED_WITHIN - 0.1)
    assert s.state == "working"
    s.wait(0.2)
    assert s.transitions == [("working", "history prompt"), ("idle", "history prompt unconfirmed")]
    assert s.mapping.deadline is None


def test_a_prompt_typed_during_a_turn_opens_nothing_more() -> None:
    s = file_led().session("busy").history(prompted())
    assert s.mapping.deadline is None
    s.session("idle")
    assert s.transitions == [("working", "session busy"), ("idle", "session idle")]


def test_a_prompt_read_after_the_file_said_its_turn_over_is_late() -> None:
    """The turn (busy, then idle) was written before the prompt's line was read: the
    line's timestamp is older than the idle's ``statusUpdatedAt``."""
    stamp = next(_stamps)
    s = file_led().session("busy").session("idle").history(prompted(stamp=stamp))
    assert s.state == "idle" and s.mapping.stats.late == 1


def test_a_view_written_before_the_prompt_does_not_end_its_turn() -> None:
    """A prompt typed while the runner loaded: its first read finds the prompt's line and
    the session file's idle of claude's start (stamped before the prompt), in either
    order. Seen with the real claude on a loaded machine: working, idle, working."""
    for history_first in (True, False):
        s = file_led()
        idle, line = status("idle"), prompted()
        for source, message in [("history", line), ("session", idle)][
            :: 1 if history_first else -1
        ]:
            s._feed(source, message)  # type: ignore[arg-type]
        assert s.state == "working", history_first
        s.session("busy").session("idle")
        assert s.transitions == [("working", "history prompt"), ("idle", "session idle")]


@pytest.mark.parametrize("end", ["SessionEnd", "close"])
def test_a_prompts_turn_ends_with_the_session(end: str) -> None:
    s = file_led().history(prompted())
    if end == "close":
        s.mapping.close()
    else:
        s.hook("SessionEnd", reason="prompt_input_exit")
    assert s.state == "idle" and s.mapping.deadline is None


def test_where_the_hooks_lead_the_history_is_not_read() -> None:
    s = Session().history(prompted())
    assert s.state == "idle" and s.mapping.stats.ignored == 1


@pytest.mark.parametrize(
    "line",
    [
        {"display": "x"},
        {"display": "x", "timestamp": "1"},
        {"display": "x", "timestamp": True},
        {"display": ["x"], "timestamp": 1},
        {"timestamp": 1},
        [],
        "x",
    ],
)
def test_a_history_line_of_the_wrong_shape_starts_nothing(line: Any) -> None:
    s = file_led().history(line)
    assert s.state == "idle" and s.transitions == []


# -- any soup --------------------------------------------------------------------------------------

EVENTS = [*HOOK_EVENTS, "SessionStart", "Unknown"]
"""SessionStart too: from it on, the file leads (the soup goes on under the other rules)."""
BLOCKERS = {"PermissionRequest", "Notification", "session waiting"}
OPENERS = {"UserPromptSubmit", "PreToolUse", "SubagentStart", "session busy", "session waiting"}


def _some(draw: st.DrawFn, fields: dict[str, Any], *always: str) -> dict[str, Any]:
    """Most of ``fields`` (those in ``always``, always)."""
    return {
        key: value
        for key, value in fields.items()
        if key in always or draw(st.sampled_from([True] * 4 + [False]))
    }


@st.composite
def soup_message(draw: st.DrawFn) -> tuple[ClaudeSource, Any, float]:
    """A hook, transcript entry or session status, with junk possible in every field the
    mapping reads (a list for a task id or ``waitingFor``, a number, null, a huge string)."""
    source: ClaudeSource = draw(st.sampled_from(["hook", "hook", "hook", "transcript", "session"]))
    gap = draw(st.sampled_from([0.0, 0.01, 0.5, SETTLE, 3.0]))
    if draw(st.sampled_from([True] + [False] * 12)):
        return source, draw(junk), gap
    if source == "hook":
        task = st.fixed_dictionaries(
            {
                "id": or_junk(st.sampled_from(["a1", "a2", "b1"])),
                "type": or_junk(st.sampled_from(["subagent", "shell"])),
                "status": or_junk(st.sampled_from(["running", "completed"])),
            }
        )
        fields = {
            "hook_event_name": draw(or_junk(st.sampled_from(EVENTS))),
            "prompt_id": draw(or_junk(st.sampled_from(["p1", "p2"]))),
            "tool_use_id": draw(or_junk(st.sampled_from(["t1", "t2"]))),
            "agent_id": draw(st.one_of(st.none(), or_junk(st.sampled_from(["a1", "a2"])))),
            "notification_type": draw(
                or_junk(
                    st.sampled_from(["permission_prompt", "idle_prompt", "elicitation_dialog", "x"])
                )
            ),
            "background_tasks": draw(or_junk(st.lists(or_junk(task), max_size=2))),
            "session_id": draw(or_junk(st.just("s1"))),
            "transcript_path": draw(or_junk(st.just("/w/s1.jsonl"))),
        }
        return source, _some(draw, fields, "hook_event_name"), gap
    if source == "transcript":
        block = _some(
            draw,
            {
                "type": draw(or_junk(st.just("text"))),
                "text": draw(or_junk(st.just("[Request interrupted by user]"))),
            },
        )
        content = draw(or_junk(st.just([block])))
        message = _some(draw, {"role": "user", "content": content})
        entry = {
            "type": draw(or_junk(st.sampled_from(["user", "assistant"]))),
            "promptId": draw(or_junk(st.sampled_from(["p1", "p2"]))),
            "message": draw(or_junk(st.just(message))),
            "rowSource": draw(or_junk(st.just("harness"))),
        }
        return source, _some(draw, entry), gap
    snapshot = {
        "pid": 1,
        "sessionId": draw(or_junk(st.just("s1"))),
        "status": draw(or_junk(st.sampled_from(["busy", "idle", "shell", "waiting", "other"]))),
        "waitingFor": draw(or_junk(st.sampled_from(["permission prompt", "dialog open"]))),
        "statusUpdatedAt": draw(or_junk(st.integers(1_796_000_000_000, 1_796_000_009_999))),
    }
    return source, _some(draw, snapshot), gap


@settings(max_examples=examples(3))
@given(st.lists(soup_message(), min_size=5, max_size=40))
def test_any_sequence_is_survived_and_an_idle_view_or_the_end_ends_it(
    sequence: list[tuple[ClaudeSource, Any, float]],
) -> None:
    mapping = ClaudeMapping()
    t, state = 0.0, "idle"
    seen: set[str] = set()
    for source, message, gap in sequence:
        t += gap
        if isinstance(message, dict) and isinstance(message.get("hook_event_name"), str):
            seen.add(message["hook_event_name"])
        if source == "session" and isinstance(message, dict):
            if message.get("status") == "busy":
                seen.add("session busy")
            elif message.get("waitingFor") == "permission prompt":
                seen.add(f"session {message.get('status')}")
        for transition in mapping.feed(source, message, t):
            # Every change is reported, chained (a change of the background count alone,
            # or of what a block waits on or of the agent's facts, changes no state).
            assert transition.previous.value == state
            assert (
                transition.changes_state
                or transition.changes_background
                or transition.changes_agent
            )
            state = transition.state.value
        assert mapping.state == state
        assert state != "blocked" or seen & BLOCKERS
        assert state != "working" or seen & OPENERS
    # No state can stick while claude's own file says idle, held: the safety net ...
    t += 0.01
    for transition in mapping.feed("session", status("idle"), t):
        state = transition.state.value
    transition = mapping.tick(t + SETTLE)
    assert mapping.state == "idle", mapping.signal
    assert mapping.background == 0  # idle, not shell: nothing runs in the background either
    # ... and the process's end closes everything whatever came before.
    assert mapping.close() is None


VIEWS: dict[tuple[str, str | None], str | None] = {
    ("busy", None): "working",
    ("waiting", "permission prompt"): "blocked",
    ("waiting", "input needed"): "blocked",
    ("idle", None): "idle",
    ("shell", None): "idle",
    ("waiting", "dialog open"): None,  # no opinion
    ("compacting", None): None,  # a status we do not know
}
"""Where the file leads: each view and the state it says (None: no opinion)."""


@st.composite
def file_led_message(draw: st.DrawFn) -> tuple[ClaudeSource, Any]:
    """What a file-led session is fed: the file's views, the transcript's background
    starts and ends, claude's two hooks, prompts of claude's history."""
    kind = draw(st.sampled_from(["session"] * 4 + ["start", "end", "hook", "history"]))
    if kind == "history":
        return "history", prompted(draw(st.sampled_from(["a prompt", "/help"])))
    task = draw(st.sampled_from(["bg1", "bg2", "ag1"]))
    if kind == "session":
        return "session", status(*draw(st.sampled_from(list(VIEWS))))
    if kind == "start":
        result = {"backgroundTaskId": task} if task != "ag1" else {"isAsync": True, "agentId": task}
        return "transcript", {"type": "user", "toolUseResult": result}
    if kind == "end":
        notice = f"<task-notification>\n<task-id>{task}</task-id>"
        return "transcript", {"type": "queue-operation", "operation": "enqueue", "content": notice}
    event = draw(st.sampled_from(["SessionStart", "SessionEnd"]))
    return "hook", hook(event, source="clear", reason="prompt_input_exit")


@settings(max_examples=examples(3))
@given(st.lists(file_led_message(), min_size=1, max_size=30))
def test_where_the_file_leads_the_state_is_its_last_view_with_an_opinion(
    sequence: list[tuple[ClaudeSource, Any]],
) -> None:
    """Whatever the order: the state is what the file's last view with an opinion said
    (idle after SessionEnd, until a view; working once a dialog claude reported gives way
    to one with none), or working from a prompt in claude's history (not a slash command)
    seen while idle until such a view or SessionEnd; background tasks are those the
    transcript started and nothing has ended (claude's ``idle``, not ``shell``, ends them
    all); the timer runs only while a prompt waits for the file."""
    mapping = ClaudeMapping(file_led=True)
    expected, running, prompted_turn = "idle", set(), False
    for n, (source, message) in enumerate(sequence):
        mapping.feed(source, message, n * 0.01)
        if source == "history":
            if expected == "idle" and message["display"] != "/help":
                expected, prompted_turn = "working", True
        elif source == "session":
            said = VIEWS[(message["status"], message.get("waitingFor"))]
            prompted_turn = prompted_turn and said is None
            if said is None and expected == "blocked":
                said = "working"  # the dialog claude reported is gone (the module doc)
            expected = said or expected
            if message["status"] == "idle":
                running.clear()
        elif source == "transcript" and message["type"] == "user":
            result = message["toolUseResult"]
            running.add(result.get("backgroundTaskId") or result["agentId"])
        elif source == "transcript":
            running.discard(message["content"].split("<task-id>")[1].split("<")[0])
        elif message["hook_event_name"] == "SessionEnd":
            expected, prompted_turn = "idle", False
            running.clear()
        assert mapping.state == expected, (n, message)
        assert mapping.background == len(running), (n, message)
    assert (mapping.deadline is not None) == prompted_turn  # no view settles where it leads


# -- the settings ----------------------------------------------------------------------------------


def test_our_hooks_come_after_the_users_own() -> None:
    from codex_presence.core.claude.protocol import with_hooks

    theirs = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}, "env": {}}
    merged = with_hooks(theirs, "http://127.0.0.1:1/s/hook")
    assert merged["env"] == {} and sorted(merged["hooks"]) == sorted(HOOK_EVENTS)
    assert merged["hooks"]["Stop"][0] == theirs["hooks"]["Stop"][0]
    assert merged["hooks"]["Stop"][1]["hooks"][0]["url"] == "http://127.0.0.1:1/hook"
    assert theirs["hooks"]["Stop"] == [{"hooks": [{"type": "command", "command": "x"}]}]


def test_an_http_hooks_secret_is_in_a_header_never_in_the_url_claude_prints() -> None:
    """claude names a failing or cancelled HTTP hook by its URL, on the person's terminal in
    print mode (``SessionEnd hook [URL] failed: Hook cancelled``), and in its transcript."""
    from codex_presence.core.claude.protocol import hook_settings
    from codex_presence.core.hooks.poster import HOOK_SECRET_HEADER

    document = hook_settings("http://127.0.0.1:4321/Se-cr_et/hook", events=("Stop",))
    (hook,) = document["hooks"]["Stop"][0]["hooks"]
    assert hook["url"] == "http://127.0.0.1:4321/hook"
    assert hook["headers"] == {HOOK_SECRET_HEADER: "Se-cr_et"}
    with pytest.raises(ValueError) as refused:
        hook_settings("http://example.com/Se-cr_et/hook", events=("Stop",))
    assert "Se-cr_et" not in str(refused.value)


def test_claude_waits_for_sessionends_command_hook_and_in_print_mode_for_the_turns_end() -> None:
    """claude exits right after SessionEnd (and, in print mode, after the turn), killing
    what runs of its async hooks; the others stay async (waiting costs a bash's start)."""
    from codex_presence.core.claude.protocol import hook_settings

    def waited(**options: bool) -> dict[str, bool]:
        hooks = hook_settings("http://127.0.0.1:1/s/hook", command="poster", **options)["hooks"]
        return {event: not groups[0]["hooks"][0]["async"] for event, groups in hooks.items()}

    assert {e for e, w in waited().items() if w} == {"SessionEnd"}
    assert {e for e, w in waited(printing=True).items() if w} == {
        "Stop",
        "StopFailure",
        "SessionEnd",
    }
