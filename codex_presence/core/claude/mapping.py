"""The Claude Code mapping: hook payloads, transcript entries and session status in, activity
transitions out.

Sans-I/O, like :mod:`codex_presence.core.codex.mapping`: it is fed one message at a time with its
source (:data:`~codex_presence.core.claude.protocol.ClaudeSource`) and the time it was seen
(seconds, any monotonic origin), and returns the transitions it caused. It keeps one timer,
:attr:`ClaudeMapping.deadline`, which its shell honours by calling :meth:`~ClaudeMapping.tick`;
it reads no clock. ``docs/claude-code-hooks.md`` holds the measurements behind the rules.

Three sources, three trust levels (and a fourth where the file leads: claude's prompt
history, below):

* **Hooks** are claude's own word, the moment it acts. They are the primary source, but
  blind to interrupts: Esc (at a dialog, during a tool, while streaming), Ctrl+C and "No"
  at a permission dialog fire no hook at all.
* **The transcript** records an interrupt as a user entry ``[Request interrupted by
  user…]``, 0.17-0.24 s after the key, except Esc before the model's first token, which
  leaves nothing. It is read while the member is not idle.
* **The session status file** (undocumented, best effort) is claude's own view: ``busy``,
  ``waiting`` (+ ``waitingFor``), ``idle``, ``shell``. It sees every interrupt within
  ~0.15 s, but claude writes it asynchronously, so it can lag the hooks either way (a
  ``<task-notification>`` turn's UserPromptSubmit arrives before the idle of the turn
  before it). So the file's *view* is adopted only once it has held for :data:`SETTLE`
  seconds with no hook in between; only the end of a dialog it reported acts at once.

**Who leads.** With a hook per event (print mode, a claude of an unknown version,
``--claude-hooks all``) the hooks do, as above. Where claude's file is known to say the
state alone (interactive, a version of :data:`~.protocol.FILE_LED_VERSIONS`), only
SessionStart and SessionEnd are hooks (claude's spinner names every hook it runs) and the
**file leads** (:attr:`ClaudeMapping.file_led`: set by the shell, or, in a replay, by
SessionStart, registered only then): a view is adopted as soon as it is read, no SETTLE;
the transcript only tells the background tasks (below); no rule keyed on another hook fires.

The handles (keys start with their scope: the main agent, each subagent, the file), and
what closes each — every rule names its closers, so no state can stick:

* **Main turn**: UserPromptSubmit opens it (a prompt typed while it runs reuses its
  ``prompt_id``: nothing new; a new id supersedes it: its tools and block close). Closed by
  Stop or StopFailure whatever their ``prompt_id`` (a queued prompt can run as a turn that
  no UserPromptSubmit announced), by the transcript's interrupt marker of its prompt (or
  of any prompt, if its id is unknown), by Notification ``idle_prompt``, by the file's
  view settling on idle, by a file view of idle right after one of waiting, by
  SessionEnd, and by the end of the process (:meth:`close`).
* **A history prompt** (where the file leads; claude runs no hook at the turn's start
  then, and its history line came up to 0.1 s before the file's ``busy`` at a load of ~6,
  first on a session's first prompt in every probe): a line of claude's
  prompt history with this session's id (the shell reads only those), not a slash
  command, opens a turn unless one runs or the file said a state since the prompt's
  ``timestamp``. Closed by the next view adopted (``busy`` and ``waiting`` open the
  session turn that carries the work on, ``idle`` closes everything; a view stamped
  before the prompt is older news, not adopted), by
  :data:`PROMPT_CONFIRMED_WITHIN` s with no view (a prompt that started no turn), by
  SessionEnd and by the end of the process.
* **Tools**, per scope, keyed by ``tool_use_id``: PreToolUse opens; PostToolUse or
  PostToolUseFailure of that id closes; so do PostToolBatch of the scope, the end of the
  scope (the main turn's closers; SubagentStop for a subagent), the file settling on
  idle or going from waiting to idle, SessionEnd and the end of the process. (A tool
  interrupted fires neither Post.)
* **Subagents** (the member's work, as codex subagents are; background ones run past
  their parent's Stop, and claude itself says ``busy`` meanwhile): SubagentStart opens
  one per ``agent_id``. Closed by its SubagentStop, by a Stop whose ``background_tasks``
  no longer list it running, by the file settling on idle or going from waiting to idle,
  SessionEnd, and the end.
* **Blocked**, per scope: PermissionRequest (at once, as the dialog appears; it carries
  no ``tool_use_id``) or Notification ``permission_prompt``, ``agent_needs_input`` or
  ``elicitation_dialog`` (only while work is open: a late one must not block an idle
  member) sets it. A subagent's dialog may fire no PermissionRequest, only the
  Notification, without its ``agent_id`` (anthropics/claude-code #79177): a blocking
  Notification while only subagents work (no main turn) blocks for them all, closed by the
  next tool hook of any scope, as well as by everything below. Closed by the scope's next
  PreToolUse, PostToolUse, PostToolUseFailure or PostToolBatch, by UserPromptSubmit, by the
  end of the scope, by a file view leaving ``waiting`` (the dialog was answered: at once,
  so a long command after "Yes" shows working), by the file settling on busy or idle,
  SessionEnd and the end.
* **What a block waits on** (:class:`~codex_presence.core.activity.Waits`):
  PermissionRequest's own tool and input (:func:`tool_waits`: Bash its command, an edit
  its file, AskUserQuestion its question); a ``permission_prompt`` Notification's, its
  scope's last PreToolUse (the newest of any scope's, for a subagent's); the file's
  ``waiting``, the newest PreToolUse's or, where the file leads and no such hook runs,
  the transcript's newest tool call, read before or after the file says it waits (or a
  question, for ``input needed``). Where and
  which: the hooks' ``cwd``, the session file's and the transcript's ``cwd`` and
  ``version``.
* **The file's view**, adopted after :data:`SETTLE` s of agreement (at once where it
  leads): ``busy`` opens a session
  turn (the queued prompt no hook announced) unless it is the view the last ended turn ran
  under (claude -p writes ``busy`` once: after its Stop, that view starts nothing),
  ``waiting`` for a person opens a session turn and block, ``idle``/``shell`` closes
  *everything* (the Esc before the first token, the interrupt whose marker is lost), a
  view with no opinion (``dialog open``, written over a running turn too; a status we do
  not know) nothing. Each closes at once when a view says otherwise, and at Stop,
  StopFailure, SubagentStop, an interrupt (the transcript's marker, ``idle_prompt``),
  SessionEnd or the end; the session
  block also with any hook block. Two changes act at once, unsettled, since only a dialog
  claude reported can end with them: waiting to anything closes the blocks (above), waiting to
  idle (a dialog refused or interrupted) closes everything.

**Background** (:attr:`ClaudeMapping.background`, since :attr:`ClaudeMapping.background_since`;
never working or blocked, see :mod:`codex_presence.core.activity`): a background Bash
command (``run_in_background``; claude's own status for it is ``shell``, idle at its
prompt) is not the member's work, but it is work left running; so is a background subagent
(which also keeps the member working, above). One handle per task id:

* **background task** ``("task", id)`` — opened by the PostToolUse of a Bash whose
  ``tool_input.run_in_background`` is true, under the ``backgroundTaskId`` of its
  ``tool_response``, and by each task that a Stop's ``background_tasks`` lists as
  ``running`` (a shell or a subagent); where the file leads, by the transcript's tool
  result naming it (``toolUseResult``: a background Bash's ``backgroundTaskId``, an async
  subagent's ``agentId``). Closed by a Stop whose ``background_tasks`` no longer lists it
  running, by the ``<task-notification>`` prompt that names its ``<task-id>`` (the turn
  claude starts when it ends: its hook, or where the file leads, the transcript's queued
  or sent prompt), by the SubagentStop of that ``agent_id``, by the file's view settling
  on ``idle`` (not ``shell``: claude says nothing runs), SessionEnd and the end.

Anything else — unknown events and statuses, wrong shapes — is counted in
:class:`ClaudeStats` and ignored, never fatal: every field is checked for its type before it
is used (a list where a string belongs, in a hook or in claude's undocumented session file,
is no opinion, not an exception), so no message can stop the mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from codex_presence.core.activity import (
    ActivitySignal,
    ActivityState,
    HandleKind,
    Transition,
    Waits,
)
from codex_presence.core.claude.protocol import (
    BLOCKING_NOTIFICATIONS,
    IDLE_NOTIFICATION,
    IDLE_STATUSES,
    PERSON_WAITS,
    SOURCES,
    background_command_id,
    background_launch_id,
    history_prompt,
    is_interrupt_marker,
    is_one_of,
    running_tasks,
    task_notification_id,
    transcript_task_end,
)
from codex_presence.core.feeder import Feeder, JsonSourcesFeeder, JsonSourcesStats, Unknown

__all__ = ["SETTLE", "ClaudeMapping", "ClaudeStats", "SessionView"]

logger = logging.getLogger("codex_presence.claude")


@dataclass(slots=True)
class ClaudeStats(JsonSourcesStats):
    """What the mapping saw and ignored; for debug logs, tests and ``replay``."""

    interrupts: int = 0
    adopted: int = 0


@dataclass(frozen=True, slots=True)
class SessionView:
    """One status of claude's session file (``status``, ``waitingFor``, ``statusUpdatedAt``),
    and when it was first seen."""

    status: str
    waiting_for: object
    stamp: object
    since: float

    @property
    def kind(self) -> str | None:
        """``idle``, ``busy`` or ``waiting`` (for a person); None: no opinion."""
        if self.status in IDLE_STATUSES:
            return "idle"
        if self.status == "busy":
            return "busy"
        if self.status == "waiting" and isinstance(self.waiting_for, str):
            return "waiting" if self.waiting_for in PERSON_WAITS else None
        return None

    def same(self, other: SessionView | None) -> bool:
        """The same status written once (the file's rewrite of it is another)."""
        return other is not None and (self.status, self.waiting_for, self.stamp) == (
            other.status,
            other.waiting_for,
            other.stamp,
        )


PROMPT_CONFIRMED_WITHIN = 3.0
"""Seconds a turn opened by a prompt of claude's history (where the file leads) waits for
the session file to say a state; with none by then, the prompt started no turn (a prompt
a hook of the person's refused, say) and it closes. claude wrote ``busy`` within 0.1 s of
the history line in every probe at a load of ~6, either first, and 0.87 s after the
prompt's timestamp at a load of ~20 (the fixture ``prompt_while_loading``)."""

SETTLE = 1.0
"""Seconds the session file's view must hold, with no hook in between, to be adopted.
claude rewrote it 4-80 ms after the hooks it follows in every recording; the cost is the
bound on an interrupt only the file sees (Esc before the first token): ~0.1 s for claude
to write it, plus this, plus the shell's polling interval."""

Scope = tuple[Hashable, ...]
MAIN: Scope = ("main",)
SESSION: Scope = ("session",)
_TURN = (*MAIN, "turn")
_SESSION_TURN = (*SESSION, "turn")
_SESSION_BLOCK = (*SESSION, "block")
_PROMPT_TURN = ("prompt", "turn")
"""A prompt of this session in claude's history, before the session file says the turn."""
_SUBAGENT_BLOCK = ("subagent", "block")
"""A blocking Notification's, when only subagents work: claude says which dialog with no
``agent_id`` and no PermissionRequest (anthropics/claude-code #79177)."""


def _scope(msg: Mapping[str, Any]) -> Scope:
    agent = msg.get("agent_id")
    return ("agent", agent) if isinstance(agent, str) and agent else MAIN


@dataclass
class ClaudeMapping(JsonSourcesFeeder):
    """Feeds an :class:`ActivitySignal` from a Claude Code session (see the module doc)."""

    signal: ActivitySignal = field(default_factory=ActivitySignal)
    stats: ClaudeStats = field(default_factory=ClaudeStats)
    settle: float = SETTLE
    file_led: bool = False
    """claude's session file leads (the module doc's "Who leads")."""
    _prompt: str | None = None
    """The open main turn's ``prompt_id``, if known."""
    _view: SessionView | None = None
    _adopted: bool = False
    _last_hook: float = float("-inf")
    _turn_busy: SessionView | None = None
    """The first busy view seen while the main turn was open: the view it ran under."""
    _ended_busy: SessionView | None = None
    """The busy view the last ended main turn ran under: claude -p never writes its file
    again, so after its Stop that view is stale, not a new turn's. A busy view written after
    it (a queued prompt's turn, even one read before the Stop's hook came) is news."""
    background_since: float | None = None
    """When (the mapping's clock) the background count last went from none to some."""
    _prompt_until: float = float("inf")
    """When the turn a history prompt opened closes if no file view came (the mapping's
    clock)."""
    _prompt_stamp: float = float("-inf")
    """That prompt's ``timestamp`` (claude's clock, ms): a view stamped before it is older
    news than the prompt."""
    _asked: dict[Scope, Waits] = field(default_factory=dict)
    """What each scope's last PreToolUse would wait on, were it to need a person: a
    permission Notification says only which dialog, its PreToolUse said the tool."""
    _last_asked: Waits | None = None
    """The newest of :attr:`_asked` (a subagent's Notification names no scope)."""
    unknowns: set[Unknown] = field(default_factory=set)
    """Always empty: what claude sends that the mapping does not know is counted in
    :attr:`stats` (claude's vocabulary is not checked against a schema)."""
    _messages: int = 0

    # -- reading -------------------------------------------------------------------------

    @property
    def background(self) -> int:
        """Background tasks running (see the module doc)."""
        return self.signal.background

    @property
    def deadline(self) -> float | None:
        """When :meth:`tick` has something to do: the file's current view to adopt, or a
        history prompt's turn that no view confirmed to close; None: nothing is due."""
        due = []
        if self.signal.is_open(HandleKind.TURN, _PROMPT_TURN):
            due.append(self._prompt_until)
        view = self._view
        if view is not None and not self._adopted and view.kind is not None:
            due.append(max(view.since, self._last_hook) + (0.0 if self.file_led else self.settle))
        return min(due, default=None)

    @property
    def wants_follow(self) -> bool:
        """Whether the transcript and the session file can change anything now: the member
        is not idle, or a view waits for adoption. When False, nothing needs reading."""
        return self.signal.state is not ActivityState.IDLE or self.deadline is not None

    # -- writing -------------------------------------------------------------------------

    @property
    def messages(self) -> int:
        """Hooks, transcript entries and session file contents fed."""
        return self._messages

    @property
    def changes_possible(self) -> bool:
        return True

    def feed(self, source: str, message: object, t: float) -> list[Transition]:
        """One message of ``source``, seen ``t`` seconds in; the transitions it caused (a
        view due for adoption first, so a late caller of :meth:`tick` changes nothing). A
        source not claude's is counted and ignored."""
        self.stats.lines += 1
        if source not in SOURCES:
            return []
        self._messages += 1
        out = [] if (due := self.tick(t)) is None else [due]
        if not isinstance(message, dict):
            self.stats.wrong_shape += 1
            return out
        if source == "hook":
            cause = self._hook(message, t)
        elif source == "transcript":
            cause = self._transcript(message)
        elif source == "history":
            cause = self._history(message, t)
        else:
            cause = self._session(message, t)
        if cause is not None and (transition := self.signal.commit(cause)) is not None:
            out.append(transition)
            self._date_background(transition, t)
        return out

    def _date_background(self, transition: Transition | None, t: float) -> None:
        if transition is not None and transition.changes_background:
            if not transition.background:
                self.background_since = None
            elif not transition.previous_background:
                self.background_since = t

    def tick(self, t: float) -> Transition | None:
        """Adopt the file's view if it has held long enough by ``t``; close the turn of a
        history prompt that no view confirmed in time."""
        deadline = self.deadline
        if deadline is None or t < deadline:
            return None
        if self.signal.is_open(HandleKind.TURN, _PROMPT_TURN) and t >= self._prompt_until:
            self.signal.close(HandleKind.TURN, _PROMPT_TURN)
            transition = self.signal.commit("history prompt unconfirmed")
            self._date_background(transition, t)
            return transition
        view = self._view
        assert view is not None
        if not self._adopt(view):
            return None
        transition = self.signal.commit(f"session {view.status}")
        self._date_background(transition, t)
        return transition

    def _adopt(self, view: SessionView) -> bool:
        """Make ``view`` (one with an opinion) the state; False for a stale one."""
        self._adopted = True
        if view.kind == "busy" and view.same(self._ended_busy):
            return False  # the ended turn's view, stale: adopting it would start a turn
        if self._predates_prompt(view):
            return False  # the file has not caught up with the prompt yet
        self.stats.adopted += 1
        self._close_if_open(HandleKind.TURN, _PROMPT_TURN)  # the file says the turn now
        if view.kind == "idle":
            self.signal.close_all()
            self._prompt = None
            if view.status == "idle":  # not ``shell``: nothing runs in the background
                self.signal.close_all_background()
        else:
            self._ensure(HandleKind.TURN, _SESSION_TURN)
            if view.kind == "waiting":
                waits = _FILE_WAITS.get(str(view.waiting_for)) or self._last_asked
                self._ensure(HandleKind.BLOCK, _SESSION_BLOCK, waits)
            else:
                self._close_blocks(None)
        return True

    def close(self, cause: str = "eof") -> Transition | None:
        """The process ended: everything closes."""
        self.signal.close_all()
        self.signal.close_all_background()
        self._prompt = None
        self.background_since = None
        return self.signal.commit(cause)

    # -- the hooks -------------------------------------------------------------------------

    def _hook(self, msg: dict[str, Any], t: float) -> str | None:
        event = msg.get("hook_event_name")
        handler = _HOOKS.get(event) if isinstance(event, str) else None
        if handler is None:
            self.stats.ignored += 1
            return None
        self.stats.hooks += 1
        self._last_hook = t
        self.signal.note(cwd=msg.get("cwd"))
        if not self.file_led:
            self._adopted = False  # hook news first: the file must agree again, for SETTLE
        if not handler(self, msg):
            self.stats.wrong_shape += 1
            return None
        if event in ("Stop", "StopFailure"):
            self._ended_busy, self._turn_busy = self._turn_busy, None
        if event == "Notification":
            kind = msg.get("notification_type")
            return f"Notification {kind}" if isinstance(kind, str) else event
        return event

    def _on_prompt(self, msg: dict[str, Any]) -> bool:
        task = task_notification_id(msg.get("prompt"))
        if task is not None:
            self.signal.close_background(("task", task))
        prompt = msg.get("prompt_id")
        prompt = prompt if isinstance(prompt, str) else None
        if not self.signal.is_open(HandleKind.TURN, _TURN):
            self.signal.open(HandleKind.TURN, _TURN)
        elif prompt is not None and self._prompt is not None and prompt != self._prompt:
            self._end_scope(MAIN, keep_turn=True)  # a new prompt supersedes the open turn
        self._prompt = prompt if prompt is not None else self._prompt
        self._close_blocks(MAIN)
        if self._view is not None and self._view.kind == "busy" and self._turn_busy is None:
            self._turn_busy = self._view  # already busy when the hook came
        return True

    def _on_pre_tool(self, msg: dict[str, Any]) -> bool:
        tool = msg.get("tool_use_id")
        if not isinstance(tool, str):
            return False
        scope = _scope(msg)
        self._close_blocks(scope)
        self._ensure(HandleKind.TOOL, (*scope, "tool", tool))
        self._asked[scope] = self._last_asked = tool_waits(msg)
        return True

    def _on_post_tool(self, msg: dict[str, Any]) -> bool:
        tool = msg.get("tool_use_id")
        if not isinstance(tool, str):
            return False
        scope = _scope(msg)
        self._close_blocks(scope)
        key = (*scope, "tool", tool)
        if self.signal.is_open(HandleKind.TOOL, key):
            self.signal.close(HandleKind.TOOL, key)
        task = background_command_id(msg)
        if task is not None and not self.signal.is_background(("task", task)):
            self.signal.open_background(("task", task))
        return True

    def _on_tool_batch(self, msg: dict[str, Any]) -> bool:
        scope = _scope(msg)
        self._close_blocks(scope)
        self.signal.close_scope(*scope, "tool", kinds=(HandleKind.TOOL,))
        return True

    def _on_permission(self, msg: dict[str, Any]) -> bool:
        self._ensure(HandleKind.BLOCK, (*_scope(msg), "block"), tool_waits(msg))
        return True

    def _on_notification(self, msg: dict[str, Any]) -> bool:
        kind = msg.get("notification_type")
        if is_one_of(kind, BLOCKING_NOTIFICATIONS):
            said = _NOTIFIED_WAITS.get(str(kind))
            if self.signal.count(HandleKind.TURN) + self.signal.count(HandleKind.TOOL) == 0:
                self.stats.late += 1  # no work open: a notification that outlived it
            elif _scope(msg) == MAIN and not self.signal.is_open(HandleKind.TURN, _TURN):
                waits = said or self._last_asked
                self._ensure(HandleKind.BLOCK, _SUBAGENT_BLOCK, waits)  # only subagents work
            else:
                waits = said or self._asked.get(_scope(msg))
                self._ensure(HandleKind.BLOCK, (*_scope(msg), "block"), waits)
        elif kind == IDLE_NOTIFICATION:
            self._end_scope(MAIN)
            self._close_session()
        else:
            self.stats.ignored += 1
        return True

    def _on_stop(self, msg: dict[str, Any]) -> bool:
        self._end_scope(MAIN)
        self._close_session()
        running = running_tasks(msg.get("background_tasks"))
        if running is not None:
            for key in self.signal.keys(HandleKind.TURN):
                if key[0] == "agent" and running.get(str(key[1])) != "subagent":
                    self._end_scope(key[:2])
            for key in self.signal.background_keys():
                if key[1] not in running:
                    self.signal.close_background(key)
            for task in running:
                if not self.signal.is_background(("task", task)):
                    self.signal.open_background(("task", task))
        return True

    def _on_stop_failure(self, msg: dict[str, Any]) -> bool:
        self._end_scope(MAIN)
        self._close_session()
        return True

    def _on_subagent_start(self, msg: dict[str, Any]) -> bool:
        scope = _scope(msg)
        if scope == MAIN:
            return False
        self._ensure(HandleKind.TURN, (*scope, "run"))
        return True

    def _on_subagent_stop(self, msg: dict[str, Any]) -> bool:
        scope = _scope(msg)
        if scope == MAIN:
            return False
        self._end_scope(scope)
        self._close_session()
        self.signal.close_background(("task", scope[1]))
        return True

    def _on_session_start(self, msg: dict[str, Any]) -> bool:
        self.file_led = True  # registered only when the file leads
        return True

    def _on_session_end(self, msg: dict[str, Any]) -> bool:
        self.signal.close_all()
        self.signal.close_all_background()
        self._prompt = None
        return True

    # -- the transcript and the session file ------------------------------------------------

    def _transcript(self, entry: dict[str, Any]) -> str | None:
        self.signal.note(version=entry.get("version"), cwd=entry.get("cwd"))
        asked = _tool_use(entry)
        if asked is not None:  # where no PreToolUse hook runs (the file leads), the tool
            self._last_asked = asked
            self.signal.tell_waits(_SESSION_BLOCK, asked)
            return "transcript tool_use"
        if self.file_led:
            return self._transcript_task(entry)
        if not is_interrupt_marker(entry):
            return None
        prompt = entry.get("promptId")
        if not self.signal.is_open(HandleKind.TURN, _TURN) or (
            isinstance(prompt, str) and self._prompt is not None and prompt != self._prompt
        ):
            self.stats.late += 1  # a turn that is over, or one a newer prompt superseded
            return None
        self.stats.interrupts += 1
        self._end_scope(MAIN)
        self._close_session()
        return "transcript interrupt"

    def _history(self, line: dict[str, Any], t: float) -> str | None:
        """Where the file leads, a prompt of this session in claude's history opens a
        turn, a tenth of a second or more before the file says ``busy``: unless a turn
        runs (a prompt typed meanwhile is queued), or the file said a state since the
        prompt (its ``statusUpdatedAt`` on claude's clock, as the line's ``timestamp``:
        the turn, if any, is over). Closed by the next view adopted, which says the turn
        itself, by :data:`PROMPT_CONFIRMED_WITHIN` s with none, and by everything that
        closes all."""
        stamp = history_prompt(line)
        if stamp is None or not self.file_led:  # where hooks lead, UserPromptSubmit says it
            self.stats.ignored += 1
            return None
        if self.signal.count(HandleKind.TURN):
            return None
        view = self._view
        if view is not None and isinstance(view.stamp, (int, float)) and view.stamp >= stamp:
            self.stats.late += 1
            return None
        self.signal.open(HandleKind.TURN, _PROMPT_TURN)
        self._prompt_until = t + PROMPT_CONFIRMED_WITHIN
        self._prompt_stamp = stamp
        return "history prompt"

    def _predates_prompt(self, view: SessionView) -> bool:
        """Whether ``view`` was written before the prompt whose turn is open (the file's
        first read can hold the idle of claude's start, read with a prompt typed while
        the runner loaded): it says nothing of that turn, and is not adopted."""
        return (
            self.signal.is_open(HandleKind.TURN, _PROMPT_TURN)
            and isinstance(view.stamp, (int, float))
            and view.stamp < self._prompt_stamp
        )

    def _transcript_task(self, entry: dict[str, Any]) -> str | None:
        """File-led: a background task's start or end, as the transcript tells it."""
        task = background_launch_id(entry)
        if task is not None and not self.signal.is_background(("task", task)):
            self.signal.open_background(("task", task))
            return "transcript background start"
        if (task := transcript_task_end(entry)) is not None:
            self.signal.close_background(("task", task))  # a no-op if not open
            return "transcript task-notification"
        return None

    def _session(self, msg: dict[str, Any], t: float) -> str | None:
        self.signal.note(version=msg.get("version"), cwd=msg.get("cwd"))
        status = msg.get("status")
        if not isinstance(status, str):
            self.stats.ignored += 1  # the file's first content has no status yet
            return None
        view = SessionView(status, msg.get("waitingFor"), msg.get("statusUpdatedAt"), t)
        previous = self._view
        if view.same(previous):
            return None
        self._view, self._adopted = view, False
        if (
            view.kind == "busy"
            and self._turn_busy is None
            and self.signal.is_open(HandleKind.TURN, _TURN)
        ):
            self._turn_busy = view
        if previous is not None and previous.kind == "waiting" and view.kind != "waiting":
            # The dialog claude reported is gone: answered (busy), refused or interrupted.
            self._close_blocks(None)
            if view.kind == "idle":
                self.signal.close_all()
                self._prompt = None
        if view.kind == "idle":  # not a view with no opinion (a dialog over a running turn)
            self._close_if_open(HandleKind.TURN, _SESSION_TURN)
        if view.kind != "waiting":
            self._close_if_open(HandleKind.BLOCK, _SESSION_BLOCK)
        if self.file_led and view.kind is not None:
            self._adopt(view)
        return f"session {status}"

    # -- helpers ----------------------------------------------------------------------------

    def _ensure(
        self, kind: HandleKind, key: tuple[Hashable, ...], waits: Waits | None = None
    ) -> None:
        if not self.signal.is_open(kind, key):
            self.signal.open(kind, key, waits)

    def _close_if_open(self, kind: HandleKind, key: tuple[Hashable, ...]) -> None:
        if self.signal.is_open(kind, key):
            self.signal.close(kind, key)

    def _close_blocks(self, scope: Scope | None) -> None:
        """The hook blocks of ``scope`` (of every scope: None), and the file's block with
        them: the hooks are the fresher news."""
        for key in self.signal.keys(HandleKind.BLOCK):
            if scope is None or key[: len(scope)] == scope:
                self.signal.close(HandleKind.BLOCK, key)
        self._close_if_open(HandleKind.BLOCK, _SESSION_BLOCK)
        self._close_if_open(HandleKind.BLOCK, _SUBAGENT_BLOCK)  # any scope's news ends it

    def _close_session(self) -> None:
        self._close_if_open(HandleKind.TURN, _SESSION_TURN)
        self._close_if_open(HandleKind.BLOCK, _SESSION_BLOCK)

    def _end_scope(self, scope: Scope, *, keep_turn: bool = False) -> None:
        """The scope's work is over: its tools, its block and (unless kept) its turn."""
        self._close_blocks(scope)
        self.signal.close_scope(*scope, "tool", kinds=(HandleKind.TOOL,))
        if not keep_turn:
            self.signal.close_scope(*scope, kinds=(HandleKind.TURN,))
            if scope == MAIN:
                self._prompt = None


_COMMAND_TOOLS = frozenset({"Bash"})
_FILE_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path"}
_FILE_TOOLS["NotebookEdit"] = "notebook_path"
_QUESTION_TOOLS = frozenset({"AskUserQuestion"})
_NOTIFIED_WAITS = {
    "agent_needs_input": Waits.of("question"),
    "elicitation_dialog": Waits.of("elicitation"),
}
"""What a blocking Notification other than ``permission_prompt`` waits on (that one waits
on its PreToolUse's tool)."""
_FILE_WAITS = {"input needed": Waits.of("question")}
"""A waiting session file's ``waitingFor`` that says what, where no hook says the tool."""


def _tool_use(entry: Mapping[str, Any]) -> Waits | None:
    """What the last tool call of a transcript's assistant entry would wait on, if any."""
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if entry.get("type") != "assistant" or not isinstance(content, list):
        return None
    calls = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
    if not calls:
        return None
    return tool_waits({"tool_name": calls[-1].get("name"), "tool_input": calls[-1].get("input")})


def tool_waits(msg: Mapping[str, Any]) -> Waits:
    """What a tool call (PreToolUse's or PermissionRequest's ``tool_name`` and
    ``tool_input``) waits on when it needs a person: Bash its command, an edit its file,
    AskUserQuestion its question, any other tool a permission for it."""
    tool = msg.get("tool_name")
    given = msg.get("tool_input")
    tool_input: Mapping[str, Any] = given if isinstance(given, dict) else {}
    if tool in _COMMAND_TOOLS:
        return Waits.of("command", tool, tool_input.get("command"))
    if isinstance(tool, str) and tool in _FILE_TOOLS:
        return Waits.of("file_change", tool, tool_input.get(_FILE_TOOLS[tool]))
    if tool in _QUESTION_TOOLS:
        questions = tool_input.get("questions")
        first = questions[0] if isinstance(questions, list) and questions else None
        return Waits.of(
            "question", tool, first.get("question") if isinstance(first, dict) else None
        )
    return Waits.of("permission", tool)


_HOOKS = {
    "UserPromptSubmit": ClaudeMapping._on_prompt,
    "PreToolUse": ClaudeMapping._on_pre_tool,
    "PermissionRequest": ClaudeMapping._on_permission,
    "PostToolUse": ClaudeMapping._on_post_tool,
    "PostToolUseFailure": ClaudeMapping._on_post_tool,
    "PostToolBatch": ClaudeMapping._on_tool_batch,
    "Notification": ClaudeMapping._on_notification,
    "Stop": ClaudeMapping._on_stop,
    "StopFailure": ClaudeMapping._on_stop_failure,
    "SubagentStart": ClaudeMapping._on_subagent_start,
    "SubagentStop": ClaudeMapping._on_subagent_stop,
    "SessionStart": ClaudeMapping._on_session_start,
    "SessionEnd": ClaudeMapping._on_session_end,
}


def _is_a_feeder(mapping: ClaudeMapping) -> Feeder:
    """Never called: mypy checks here that the mapping is a feeder (the shared interface)."""
    return mapping
