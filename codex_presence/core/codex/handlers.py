"""The codex mapping's transition table: what each app-server method does to the handles.

One handler per method that can change the state (:data:`~.protocol.STATE_METHODS`):
turns, items (tools, revival, commands left running, children), thread statuses and their
waiting flags, requests that park a turn on a person and their resolution. The rules they
follow, each with the events that close what it opens, are stated in
:mod:`codex_presence.core.codex.mapping`'s docstring; :func:`routes` is the table the
mapping's router dispatches on, with the mapping first and the params as keywords (the
mapping is positional-only: a param of codex's named ``m`` is just another param).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol

from codex_presence.core.activity import ActivitySignal, HandleKind, Waits
from codex_presence.core.codex.protocol import (
    ACTIVE_STATUS,
    AUTOMATIC_REQUESTS,
    BLOCKING_REQUESTS,
    COLLAB_ITEM_TYPE,
    COMMAND_ITEM_TYPE,
    FINAL_CHILD_STATUSES,
    OTHER_FLAGS,
    PASSIVE_ITEM_TYPES,
    PENDING_CHILD,
    SPAWN_TOOL,
    STATE_METHODS,
    THREAD_ENDING_STATUSES,
    TITLE_THREAD_SOURCE,
    TOOL_ITEM_TYPES,
    WAITING_FLAGS,
)
from codex_presence.core.codex.turns import TurnMemory
from codex_presence.core.router import WrongShape, object_param, request_id_param, str_param

__all__ = ["MappingState", "routes", "waits_of"]


class _Counts(Protocol):
    late_events: int
    revived: int
    unknown_status: int


class _Request(Protocol):
    @property
    def thread(self) -> str | None: ...
    @property
    def turn(self) -> str | None: ...


class MappingState(Protocol):
    """What of :class:`~codex_presence.core.codex.mapping.CodexMapping` the handlers use
    (a protocol: the mapping imports this module, not the other way round)."""

    @property
    def signal(self) -> ActivitySignal: ...
    @property
    def stats(self) -> _Counts: ...
    @property
    def _turns(self) -> TurnMemory: ...
    @property
    def _commands(self) -> set[tuple[str, str, str]]: ...
    @property
    def _stopping(self) -> set[str]: ...
    def _unknown(self, kind: str, name: str) -> None: ...
    def _open_turns(self, thread: str) -> set[str]: ...
    def _leave_running(self, thread: str, turns: set[str]) -> None: ...
    def _end_thread_work(self, thread: str, *, revivable: bool) -> None: ...
    def _forget_requests(self, doomed: Callable[[_Request], bool]) -> None: ...
    def _add_request(
        self, thread: str | None, turn: str | None, waits: Waits | None = None
    ) -> None: ...
    @property
    def _cause(self) -> str: ...
    def _resolve_request(self, request_id: Hashable) -> None: ...


MAX_CHILDREN = 64
"""Children of one collab item looked at, at most."""


def _item_key(threadId: object, turnId: object, item: object) -> tuple[str, str, str, str]:
    body = object_param(item, "item")
    return (
        str_param(threadId, "threadId"),
        str_param(turnId, "turnId"),
        str_param(body.get("id"), "item.id"),
        str_param(body.get("type"), "item.type"),
    )


def _on_item_started(
    m: MappingState, /, threadId: object, turnId: object, item: object, **_: object
) -> None:
    thread, turn, item_id, item_type = _item_key(threadId, turnId, item)
    m._stopping.discard(thread)  # new work: the turn goes on after all
    tool = item_type in TOOL_ITEM_TYPES
    if not tool and item_type not in PASSIVE_ITEM_TYPES:
        m._unknown("item type", item_type)  # treated as passive: it may revive, no more
    if m._turns.is_ended(thread, turn):
        if not m._turns.revive(thread, turn):
            m.stats.late_events += 1
            return
        m.signal.open(HandleKind.TURN, (thread, turn))
        m.stats.revived += 1
    if tool:
        m.signal.open(HandleKind.TOOL, (thread, turn, item_id))
        if item_type == COMMAND_ITEM_TYPE:
            m._commands.add((thread, turn, item_id))


def _on_item_completed(
    m: MappingState, /, threadId: object, turnId: object, item: object, **_: object
) -> None:
    thread, turn, item_id, item_type = _item_key(threadId, turnId, item)
    m._commands.discard((thread, turn, item_id))
    if item_type == COLLAB_ITEM_TYPE:
        _follow_children(m, object_param(item, "item"))
    if item_type in TOOL_ITEM_TYPES and m.signal.is_open(HandleKind.TOOL, (thread, turn, item_id)):
        m.signal.close(HandleKind.TOOL, (thread, turn, item_id))
    elif m.signal.close_background((thread, "background", item_id)):
        pass  # a command left running after its turn has ended now
    elif m._turns.is_ended(thread, turn):
        m.stats.late_events += 1


def _follow_children(m: MappingState, item: Mapping[str, Any]) -> None:
    """A child a spawn left ``pendingInit`` works on; one a collab item calls final is done."""
    states = item.get("agentsStates")
    if not isinstance(states, dict):
        return
    for child, state in list(states.items())[:MAX_CHILDREN]:
        status = state.get("status") if isinstance(state, dict) else None
        key = (child, None, "pending")
        if status == PENDING_CHILD and item.get("tool") == SPAWN_TOOL:
            if not m._open_turns(child) and not m.signal.is_open(HandleKind.TURN, key):
                m.signal.open(HandleKind.TURN, key)
        elif status in FINAL_CHILD_STATUSES and m.signal.is_open(HandleKind.TURN, key):
            m.signal.close(HandleKind.TURN, key)


def _on_turn_started(m: MappingState, /, threadId: object, turn: object, **_: object) -> None:
    thread = str_param(threadId, "threadId")
    turn_id = str_param(object_param(turn, "turn").get("id"), "turn.id")
    if m._turns.is_ended(thread, turn_id):
        m.stats.late_events += 1
        return
    older = m._open_turns(thread) - {turn_id}
    if older:  # a thread runs one turn at a time: its completion was lost
        m._leave_running(thread, older)
        m._turns.end(thread, older)
        for other in older:
            m.signal.close_scope(thread, other)
        m.signal.close_scope(thread, None, "flags", kinds=(HandleKind.BLOCK,))
        m._forget_requests(lambda p: p.thread == thread and p.turn in older)
    m._turns.forbid_revival(thread)
    m.signal.open(HandleKind.TURN, (thread, turn_id))


def _on_turn_completed(m: MappingState, /, threadId: object, turn: object, **_: object) -> None:
    thread = str_param(threadId, "threadId")
    body = object_param(turn, "turn")
    turn_id = str_param(body.get("id"), "turn.id")
    # Whatever was open ends, and may be revived: the named turn only if it completed
    # normally, any other because it ended by inference (one turn at a time).
    m._end_thread_work(thread, revivable=True)
    m._turns.end(thread, [turn_id])
    if body.get("status") == "completed":
        m._turns.allow_revival(thread, [turn_id])
    else:
        m._turns.forbid_revival(thread, turn_id)


def _on_thread_started(m: MappingState, /, thread: object, **_: object) -> None:
    body = object_param(thread, "thread")
    if body.get("threadSource") != TITLE_THREAD_SOURCE:
        m.signal.note(version=body.get("cliVersion"), cwd=body.get("cwd"))
        return
    thread_id = str_param(body.get("id"), "thread.id")
    m._end_thread_work(thread_id, revivable=False)  # it comes first, but if anything came before
    m._turns.ignore_thread(thread_id)


def _on_thread_status_changed(
    m: MappingState, /, threadId: object, status: object, **_: object
) -> None:
    thread = str_param(threadId, "threadId")
    body = object_param(status, "status")
    kind = str_param(body.get("type"), "status.type")
    flags_key = (thread, None, "flags")
    if kind in THREAD_ENDING_STATUSES:
        m._end_thread_work(thread, revivable=kind == "idle")
    elif kind == ACTIVE_STATUS:
        flags = body.get("activeFlags") or []
        if not isinstance(flags, list):
            raise WrongShape("status.activeFlags is not a list")
        waiting = False
        for flag in flags:
            if not isinstance(flag, str):
                continue  # not a flag codex writes: it says nothing
            if flag in WAITING_FLAGS:
                waiting = True
            elif flag not in OTHER_FLAGS:
                m._unknown("active flag", flag)
        if waiting:
            if not m.signal.is_open(HandleKind.BLOCK, flags_key):
                m.signal.open(HandleKind.BLOCK, flags_key)
        elif m.signal.is_open(HandleKind.BLOCK, flags_key):
            m.signal.close(HandleKind.BLOCK, flags_key)
    else:
        m.stats.unknown_status += 1  # an unknown status type: leave the thread as it is
        m._unknown("thread status", kind)


def _on_thread_closed(m: MappingState, /, threadId: object, **_: object) -> None:
    m._end_thread_work(str_param(threadId, "threadId"), revivable=False)


def _on_server_request_resolved(m: MappingState, /, requestId: object, **_: object) -> None:
    m._resolve_request(request_id_param(requestId))


def _on_blocking_request(
    m: MappingState, /, threadId: object, turnId: object = None, **params: object
) -> None:
    thread = str_param(threadId, "threadId")
    turn = None if turnId is None else str_param(turnId, "turnId")
    m._add_request(thread, turn, waits_of(m._cause, params))


def _on_legacy_blocking_request(
    m: MappingState, /, conversationId: object, **params: object
) -> None:
    m._add_request(str_param(conversationId, "conversationId"), None, waits_of(m._cause, params))


def waits_of(method: str, params: Mapping[str, object]) -> Waits:
    """What a blocking request waits on (protocol §7): a command approval's command (the
    shell's script when codex says it apart, in ``commandActions``), a question's first
    question, an elicitation's server and message, a permission's reason."""
    if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
        return Waits.of("command", "shell", _command_of(params))
    if method in ("item/fileChange/requestApproval", "applyPatchApproval"):
        return Waits.of("file_change", "apply_patch", params.get("reason"))
    if method == "item/tool/requestUserInput":
        questions = params.get("questions")
        first = questions[0] if isinstance(questions, list) and questions else None
        question = first.get("question") if isinstance(first, dict) else None
        return Waits.of("question", "request_user_input", question)
    if method == "mcpServer/elicitation/request":
        return Waits.of("elicitation", params.get("serverName"), params.get("message"))
    if method == "item/permissions/requestApproval":
        return Waits.of("permission", None, params.get("reason"))
    return Waits.of("other")


def _command_of(params: Mapping[str, object]) -> object:
    """The command line to approve: the one action's own command when codex parsed the
    shell's script into one (``bash -lc '…'`` says less), else ``command`` as sent."""
    actions = params.get("commandActions")
    if isinstance(actions, list) and len(actions) == 1 and isinstance(actions[0], dict):
        inner = actions[0].get("command")
        if isinstance(inner, str) and inner:
            return inner
    return params.get("command")


def _on_automatic_request(m: MappingState, /, threadId: object = None, **_: object) -> None:
    m._add_request(threadId if isinstance(threadId, str) else None, None)


def routes() -> dict[str, Callable[..., None]]:
    """Each state-changing method's handler."""
    routes: dict[str, Callable[..., None]] = {
        "turn/started": _on_turn_started,
        "turn/completed": _on_turn_completed,
        "item/started": _on_item_started,
        "item/completed": _on_item_completed,
        "thread/started": _on_thread_started,
        "thread/status/changed": _on_thread_status_changed,
        "thread/closed": _on_thread_closed,
        "serverRequest/resolved": _on_server_request_resolved,
    }
    for name in BLOCKING_REQUESTS:
        routes[name] = _on_blocking_request
    for name in ("execCommandApproval", "applyPatchApproval"):
        routes[name] = _on_legacy_blocking_request
    for name in AUTOMATIC_REQUESTS:
        routes[name] = _on_automatic_request
    assert set(routes) == STATE_METHODS
    return routes
