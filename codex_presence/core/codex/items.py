"""The codex mapping's item handlers: tools, revival, commands left running, children.

Split from :mod:`codex_presence.core.codex.mapping`, whose docstring states the rules these
follow (a tool item's handle, the revival rule, the background command, the pending child);
the router calls them with the mapping first and the params as keywords.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from codex_presence.core.activity import ActivitySignal, HandleKind
from codex_presence.core.codex.protocol import (
    COLLAB_ITEM_TYPE,
    COMMAND_ITEM_TYPE,
    FINAL_CHILD_STATUSES,
    PASSIVE_ITEM_TYPES,
    PENDING_CHILD,
    SPAWN_TOOL,
    TOOL_ITEM_TYPES,
)
from codex_presence.core.codex.turns import TurnMemory
from codex_presence.core.router import object_param, str_param

__all__ = ["ItemMapping", "on_item_completed", "on_item_started"]


class _Counts(Protocol):
    late_events: int
    revived: int


class ItemMapping(Protocol):
    """What of :class:`~codex_presence.core.codex.mapping.CodexMapping` these handlers use
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


def on_item_started(
    m: ItemMapping, /, threadId: object, turnId: object, item: object, **_: object
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


def on_item_completed(
    m: ItemMapping, /, threadId: object, turnId: object, item: object, **_: object
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


def _follow_children(m: ItemMapping, item: Mapping[str, Any]) -> None:
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
