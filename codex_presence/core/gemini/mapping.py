"""The Gemini CLI mapping: hook events and chat-file lines in, activity transitions out.

Sans-I/O, like :mod:`codex_presence.core.claude.mapping`, with its interface: it is fed one
message at a time with its source (:data:`~codex_presence.core.gemini.protocol.GeminiSource`)
and the time it was seen, and returns the transitions it caused; it has a :meth:`tick` and
a :attr:`deadline` (it keeps no timer: the deadline is always None), :attr:`stats`, and a
:meth:`close` for the end of the process. ``docs/gemini-cli.md`` holds the measurements
behind the rules.

Two sources:

* **Hooks** are gemini's own word, synchronous (gemini waits for each), the primary source.
  They are blind to an Esc (during a turn or at an approval) and to "No" at an approval:
  no AfterTool, no AfterAgent follows either.
* **The chat file** (``transcript_path``) records both at once as an ``info`` line
  ``Request cancelled.``; nothing else in it opens or closes anything.

The rules. Every handle lives in one scope (``"main"``: gemini 0.61.0 runs one agent loop
per session); each row names what opens a handle and every event that closes it, so no
state can stick:

==============  ====================================  =========================================
handle          opened by                             closed by
==============  ====================================  =========================================
turn            BeforeAgent (again while open:        AfterAgent; the chat file's ``Request
                the same turn)                        cancelled.``; SessionEnd; :meth:`close`
tool, per       BeforeTool (keyed by name + input:    its AfterTool; the turn's closers
name + input    gemini gives a call no id)
blocked         Notification ``ToolPermission``       AfterTool (any: the approval was
                while a turn or tool is open (a late  answered and the tool ran), BeforeTool
                one blocks no idle member)            (the next tool), BeforeAgent (a new
                                                      prompt), the turn's closers
==============  ====================================  =========================================

"Allow once" fires nothing until the tool's AfterTool (measured: 0.8 s for ``echo``, the
command's own time for a long one), so a member stays blocked until then: no source says
sooner that the approval was answered. An Esc before the model answers writes the
cancellation line and then fires AfterAgent (0.13 s later, measured), which finds the turn
closed; at an approval it fires none. SessionStart opens nothing (gemini fires it once its
input box is up, 1-2 s after it shows; ``/quit`` fires SessionEnd up to three times).

Anything else — other events, other notification types, other chat lines, wrong shapes — is
counted in :class:`GeminiStats` and ignored, never fatal: every field is checked for its
type before it is used, so no message can stop the mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from codex_presence.core.activity import (
    ActivitySignal,
    ActivityState,
    HandleKind,
    Transition,
    Waits,
)
from codex_presence.core.feeder import Feeder, JsonSourcesFeeder, Unknown
from codex_presence.core.gemini.protocol import (
    PERMISSION_NOTIFICATION,
    SOURCES,
    GeminiStats,
    is_cancelled,
    tool_key,
)

__all__ = ["GeminiMapping", "GeminiStats"]


MAIN = "main"
_TURN: tuple[Hashable, ...] = (MAIN, "turn")
_BLOCK: tuple[Hashable, ...] = (MAIN, "block")


@dataclass
class GeminiMapping(JsonSourcesFeeder):
    """Feeds an :class:`ActivitySignal` from a Gemini CLI session (see the module doc)."""

    signal: ActivitySignal = field(default_factory=ActivitySignal)
    stats: GeminiStats = field(default_factory=GeminiStats)
    unknowns: set[Unknown] = field(default_factory=set)
    """Always empty: what gemini sends that the mapping does not know is counted in
    :attr:`stats`."""
    _messages: int = 0

    # -- reading -------------------------------------------------------------------------

    @property
    def background(self) -> int:
        """Background work: none that gemini 0.61.0 tells of."""
        return self.signal.background

    @property
    def deadline(self) -> float | None:
        """No timer: every rule is an event's."""
        return None

    @property
    def wants_follow(self) -> bool:
        """Whether the chat file can change anything now: only while the member is not
        idle (its cancellation line ends a turn; nothing in it starts one)."""
        return self.signal.state is not ActivityState.IDLE

    # -- writing -------------------------------------------------------------------------

    def feed(self, source: str, message: object, t: float) -> list[Transition]:
        """One message of ``source``, seen ``t`` seconds in; the transitions it caused. A
        source not gemini's is counted and ignored."""
        self.stats.lines += 1
        if source not in SOURCES:
            return []
        self._messages += 1
        if not isinstance(message, dict):
            self.stats.wrong_shape += 1
            return []
        cause = self._hook(message) if source == "event" else self._chat(message)
        if cause is None:
            return []
        transition = self.signal.commit(cause)
        return [] if transition is None else [transition]

    @property
    def messages(self) -> int:
        """Hook events and chat lines fed."""
        return self._messages

    @property
    def changes_possible(self) -> bool:
        return True

    def tick(self, t: float) -> Transition | None:
        """Nothing is due at any time (no timer)."""
        return None

    def close(self, cause: str = "eof") -> Transition | None:
        """The process ended: everything closes."""
        self.signal.close_all()
        self.signal.close_all_background()
        return self.signal.commit(cause)

    # -- the hooks ---------------------------------------------------------------------------

    def _hook(self, msg: dict[str, Any]) -> str | None:
        event = msg.get("hook_event_name")
        handler = _HOOKS.get(event) if isinstance(event, str) else None
        if handler is None:
            self.stats.ignored += 1
            return None
        self.stats.hooks += 1
        self.signal.note(cwd=msg.get("cwd"))  # where the agent works: every event says
        if not handler(self, msg):
            return None
        if event == "Notification":
            return f"Notification {msg.get('notification_type')}"
        return str(event)

    def _on_before_agent(self, msg: dict[str, Any]) -> bool:
        self._ensure(HandleKind.TURN, _TURN)
        self._close_if_open(HandleKind.BLOCK, _BLOCK)
        return True

    def _on_before_tool(self, msg: dict[str, Any]) -> bool:
        key = tool_key(msg)
        if key is None:
            self.stats.wrong_shape += 1
            return False
        self._close_if_open(HandleKind.BLOCK, _BLOCK)
        self._ensure(HandleKind.TOOL, (MAIN, "tool", *key))
        return True

    def _on_after_tool(self, msg: dict[str, Any]) -> bool:
        self._close_if_open(HandleKind.BLOCK, _BLOCK)
        key = tool_key(msg)
        if key is None:
            self.stats.wrong_shape += 1
        elif not self.signal.is_open(HandleKind.TOOL, (MAIN, "tool", *key)):
            self.stats.late += 1  # its turn was cancelled, or its BeforeTool was not seen
        else:
            self.signal.close(HandleKind.TOOL, (MAIN, "tool", *key))
        return True

    def _on_notification(self, msg: dict[str, Any]) -> bool:
        if msg.get("notification_type") != PERMISSION_NOTIFICATION:
            self.stats.ignored += 1
            return False
        if self.signal.count(HandleKind.TURN) + self.signal.count(HandleKind.TOOL) == 0:
            self.stats.late += 1  # no work open: a notification that outlived it
            return False
        if not self.signal.is_open(HandleKind.BLOCK, _BLOCK):
            self.signal.open(HandleKind.BLOCK, _BLOCK, _waits_of(msg.get("details")))
        return True

    def _on_after_agent(self, msg: dict[str, Any]) -> bool:
        self._end_turn()
        return True

    def _on_session_start(self, msg: dict[str, Any]) -> bool:
        return True  # fired once gemini has started: opens nothing

    def _on_session_end(self, msg: dict[str, Any]) -> bool:
        self.signal.close_all()
        self.signal.close_all_background()
        return True

    # -- the chat file -----------------------------------------------------------------------

    def _chat(self, entry: dict[str, Any]) -> str | None:
        if not is_cancelled(entry):
            return None
        if self.signal.state is ActivityState.IDLE:
            self.stats.late += 1  # a turn already over
            return None
        self.stats.cancels += 1
        self._end_turn()
        return "chat Request cancelled."

    # -- helpers ------------------------------------------------------------------------------

    def _end_turn(self) -> None:
        """The turn is over: its tools, its block and itself."""
        self.signal.close_scope(MAIN)

    def _ensure(self, kind: HandleKind, key: tuple[Hashable, ...]) -> None:
        if not self.signal.is_open(kind, key):
            self.signal.open(kind, key)

    def _close_if_open(self, kind: HandleKind, key: tuple[Hashable, ...]) -> None:
        if self.signal.is_open(kind, key):
            self.signal.close(kind, key)


_WAIT_KINDS = {"exec": "command", "edit": "file_change", "mcp": "permission"}
"""A ToolPermission's ``details.type`` → what the approval is of (``agent.waits.kind``)."""


def _waits_of(details: object) -> Waits:
    """What an approval waits on, from its Notification's ``details`` (``{type: exec,
    title, command, rootCommand}`` for a shell command): the kind, the dialog's title as
    the tool, the command or the file."""
    if not isinstance(details, dict):
        return Waits.of("permission")
    kind = _WAIT_KINDS.get(str(details.get("type")), "permission")
    asked = details.get("command") if kind == "command" else details.get("fileName")
    return Waits.of(kind, details.get("title"), asked)


_HOOKS: dict[str, Callable[[GeminiMapping, dict[str, Any]], bool]] = {
    "SessionStart": GeminiMapping._on_session_start,
    "BeforeAgent": GeminiMapping._on_before_agent,
    "BeforeTool": GeminiMapping._on_before_tool,
    "AfterTool": GeminiMapping._on_after_tool,
    "Notification": GeminiMapping._on_notification,
    "AfterAgent": GeminiMapping._on_after_agent,
    "SessionEnd": GeminiMapping._on_session_end,
}


def _is_a_feeder(mapping: GeminiMapping) -> Feeder:
    """Never called: mypy checks here that the mapping is a feeder (the shared interface)."""
    return mapping
