"""The codex app-server vocabulary that the activity mapping reads (codex 0.169.0, 0.171.0).

Which item types are tools and which are passive, which server requests park a turn on a
human and which the client answers by itself, the thread statuses and flags and how each
is read, the methods that can change the state, and the bytes codex starts its lines with
(:data:`METHOD_PREFIX`, :data:`RESPONSE_PREFIX`). :func:`skips_unparsed` is the one byte-level
rule, shared by the mapping (:mod:`codex_presence.core.codex.mapping`) and the relay's pre-filter
(:mod:`codex_presence.core.codex.prefilter`), for which server lines cannot change the state. The
classification is also what ``codex-presence doctor`` checks a codex's schema against
(:mod:`codex_presence.core.codex.schema`). See ``shared/codex-app-server-protocol.md``
§2, §5–7, §11. Pure data and pure functions.
"""

from __future__ import annotations

from typing import Literal

from codex_presence.core.feeder import CONNECTION_EVENTS, ConnectionEvent

__all__ = [
    "ACTIVE_STATUS",
    "AUTOMATIC_REQUESTS",
    "BLOCKING_REQUESTS",
    "COLLAB_ITEM_TYPE",
    "COMMAND_ITEM_TYPE",
    "CONNECTION_EVENTS",
    "FINAL_CHILD_STATUSES",
    "ITEM_TYPE_PREFIX",
    "MESSAGE_START",
    "METHOD_PREFIX",
    "OTHER_FLAGS",
    "PACKAGE",
    "PASSIVE_ITEM_STARTS",
    "PASSIVE_ITEM_TYPES",
    "PENDING_CHILD",
    "REQUEST_ID_INFIX",
    "RESPONSE_PREFIX",
    "SPAWN_TOOL",
    "STATE_METHODS",
    "THREAD_ENDING_STATUSES",
    "TITLE_THREAD_SOURCE",
    "TOOL_ITEM_TYPES",
    "TURN_ENDING_ANSWERS",
    "WAITING_FLAGS",
    "ConnectionEvent",
    "Direction",
    "answer_ends_turn",
    "skips_unparsed",
]

Direction = Literal["client", "server"]
"""``server`` is what ``codex app-server`` writes; ``client`` is what its client writes to it."""


TOOL_ITEM_TYPES: frozenset[str] = frozenset(
    {
        "commandExecution",
        "fileChange",
        "mcpToolCall",
        "dynamicToolCall",
        "collabAgentToolCall",
        "subAgentActivity",
        "webSearch",
        "imageView",
        "imageGeneration",
        "functionCallOutput",
        "sleep",
    }
)
"""Item types that are tool execution (0.169.0 schema). Model output and bookkeeping items
(agentMessage, reasoning, userMessage, plan, contextCompaction, hookPrompt, review-mode
markers) are covered by the turn handle and open nothing of their own."""

BLOCKING_REQUESTS: frozenset[str] = frozenset(
    {
        "item/commandExecution/requestApproval",
        "item/fileChange/requestApproval",
        "item/tool/requestUserInput",
        "mcpServer/elicitation/request",
        "item/permissions/requestApproval",
        "execCommandApproval",
        "applyPatchApproval",
    }
)
"""Server→client requests that park the turn on a human."""

TURN_ENDING_ANSWERS: dict[str, str] = {
    "item/commandExecution/requestApproval": "cancel",
    "item/fileChange/requestApproval": "cancel",
    "execCommandApproval": "abort",
    "applyPatchApproval": "abort",
}
"""The ``decision`` of a client's answer to these requests that also interrupts the turn
(protocol §7: ``cancel`` is "decline and interrupt the turn"; v1's ``abort``): codex then
ends the turn within tens of milliseconds (12-50 ms in the recordings), so whatever the
turn shows in between is on its way to idle. The codex TUI's only "no" is ``cancel``."""


def answer_ends_turn(method: str, result: object) -> bool:
    """Whether the client's ``result`` for a ``method`` request interrupts its turn."""
    decision = TURN_ENDING_ANSWERS.get(method)
    return decision is not None and isinstance(result, dict) and result.get("decision") == decision


AUTOMATIC_REQUESTS: frozenset[str] = frozenset(
    {
        "item/tool/call",
        "account/chatgptAuthTokens/refresh",
        "attestation/generate",
        "currentTime/read",
    }
)
"""Server→client requests the client answers by itself: they never block."""

THREAD_ENDING_STATUSES: frozenset[str] = frozenset({"idle", "systemError", "notLoaded"})
"""Thread statuses that end every turn of the thread: the server's own view."""
ACTIVE_STATUS = "active"
"""The one other thread status: a turn runs or a request waits; its flags say which."""
WAITING_FLAGS: frozenset[str] = frozenset({"waitingOnApproval", "waitingOnUserInput"})
"""``activeFlags`` of an ``active`` thread that mean it waits on a human."""
OTHER_FLAGS: frozenset[str] = frozenset()
"""``activeFlags`` known to mean nothing for the state (none so far)."""
TITLE_THREAD_SOURCE = "thread_title"
"""``thread.threadSource`` of the side threads the TUI runs to title a session
(``docs/codex-tui.md`` §4, §9): they never count."""
STATE_METHODS: frozenset[str] = frozenset(
    {
        "turn/started",
        "turn/completed",
        "item/started",
        "item/completed",
        "thread/started",
        "thread/status/changed",
        "thread/closed",
        "serverRequest/resolved",
    }
    | BLOCKING_REQUESTS
    | AUTOMATIC_REQUESTS
)
"""Every method the mapping routes; everything else is skipped before parsing."""
_STATE_METHODS_BYTES: frozenset[bytes] = frozenset(m.encode() for m in STATE_METHODS)

COLLAB_ITEM_TYPE = "collabAgentToolCall"
"""The subagent tool item: its ``agentsStates`` say how each child thread stands."""
SPAWN_TOOL = "spawnAgent"
PENDING_CHILD = "pendingInit"
"""A child thread spawned and not started yet (``CollabAgentStatus``)."""
FINAL_CHILD_STATUSES: frozenset[str] = frozenset(
    {"interrupted", "completed", "errored", "shutdown", "notFound"}
)
"""``CollabAgentStatus`` values after which a child thread does no more work."""

COMMAND_ITEM_TYPE = "commandExecution"
"""The tool item that can outlive its turn (Esc leaves the command running): background."""

PASSIVE_ITEM_TYPES: frozenset[str] = frozenset(
    {
        "userMessage",
        "agentMessage",
        "reasoning",
        "plan",
        "contextCompaction",
        "hookPrompt",
        "enteredReviewMode",
        "exitedReviewMode",
    }
)
"""Item types that open nothing (the turn covers them). Their ``item/completed`` changes no
state; their ``item/started`` does only when it revives an ended turn."""

PACKAGE = "@openai/codex"
"""codex's npm package: its ``package.json`` beside the program says the version
(:mod:`codex_presence.agent.installed`), for a session that never says it."""

MESSAGE_START = b"{"
"""The first byte of every message line that can matter, in either direction."""
METHOD_PREFIX = b'{"method":"'
"""How codex starts every notification and request line it writes: the method first."""
RESPONSE_PREFIX = b'{"id":'
"""How codex starts every response line it writes: the id first."""
REQUEST_ID_INFIX = b'","id":'
"""What follows the method of a request codex writes: its id (a notification has params)."""
_PREFIX_LEN = len(METHOD_PREFIX)
ITEM_TYPE_PREFIX = b'","params":{"item":{"type":"'
"""What follows an item event's method: ``item`` comes first in its params, ``type`` first
in the item."""
_PASSIVE_ITEM_TYPES_BYTES = frozenset(kind.encode() for kind in PASSIVE_ITEM_TYPES)
PASSIVE_ITEM_STARTS: tuple[bytes, ...] = tuple(
    METHOD_PREFIX + b"item/started" + ITEM_TYPE_PREFIX + kind + b'"'
    for kind in sorted(_PASSIVE_ITEM_TYPES_BYTES)
)
"""How codex starts the ``item/started`` line of a passive item: the mapping parses one only
when the line names a turn that such an item would revive."""


def skips_unparsed(head: bytes) -> bool | None:
    """Whether :meth:`CodexMapping.feed_line` skips, unparsed, a server line that starts
    with ``head``; ``None`` while ``head`` is too short to tell.

    Codex writes a message's ``method`` first (or ``id``, for its responses), a request's
    ``id`` right after its method, and an item event's ``item`` first with ``type`` first in
    it; a JSON string cannot hold an unescaped quote, so these bytes can only be the
    message's own. Deltas, responses, usage updates and the ``item/completed`` of passive
    items are skipped this way — most of a session. A request of a method the mapping does
    not know is not: the mapping reports it (codex changed).

    The leading-byte rule: a line that does not start with ``{`` (:data:`MESSAGE_START`) is
    skipped, whatever follows (codex writes no whitespace before a message, and neither do
    its clients); the mapping applies it to client lines too. It lets the relay skip such
    lines without looking at them one by one.
    """
    if head[:1] != MESSAGE_START:
        return True if head else None
    if head.startswith(RESPONSE_PREFIX):
        return True
    if not head.startswith(METHOD_PREFIX):
        if METHOD_PREFIX.startswith(head) or RESPONSE_PREFIX.startswith(head):
            return None
        return False
    end = head.find(b'"', _PREFIX_LEN)
    if end < 0:
        return None
    method = head[_PREFIX_LEN:end]
    if b"\\" in method:
        return False
    if method not in _STATE_METHODS_BYTES:
        if head.startswith(REQUEST_ID_INFIX, end):
            return False
        # (compared only when short: a delta's whole line is never copied for it)
        cut = len(head) - end < len(REQUEST_ID_INFIX) and REQUEST_ID_INFIX.startswith(head[end:])
        return None if cut else True
    if method != b"item/completed":
        return False
    if not head.startswith(ITEM_TYPE_PREFIX, end):
        cut = len(head) - end < len(ITEM_TYPE_PREFIX) and ITEM_TYPE_PREFIX.startswith(head[end:])
        return None if cut else False
    start = end + len(ITEM_TYPE_PREFIX)
    type_end = head.find(b'"', start)
    if type_end < 0:
        return None
    return head[start:type_end] in _PASSIVE_ITEM_TYPES_BYTES
