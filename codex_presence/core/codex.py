"""The codex mapping: app-server JSON-RPC traffic in, activity transitions out.

Sans-I/O, like :mod:`codex_presence.core.activity` under it: it is fed one line (or one parsed
message) at a time with its direction, and returns the :class:`Transition` that message
caused, if any. Nothing here reads a pipe or a clock.

Direction ``"server"`` is what ``codex app-server`` writes (notifications, its requests to
the client, its responses); ``"client"`` is what the client writes to it (requests, and
its responses to the server's requests). Request ids are per direction: the server counts
its own from 0, just like many clients do, so a client *response* is matched only against
*server* requests.

The rules (codex 0.169.0; see ``shared/codex-app-server-protocol.md`` §2, §5–7):

* ``turn/started`` opens a turn handle ``(thread, turn)``; ``turn/completed`` (completed,
  interrupted or failed) closes it and every tool and request of that turn, and marks the
  turn *ended*. ``turn/start`` from the client opens nothing: on a busy thread it steers.
* ``item/started`` of a tool item (:data:`TOOL_ITEM_TYPES`) opens a tool handle
  ``(thread, turn, item)``; ``item/completed`` closes it. Item events of an ended turn are
  ignored, so a command left running after an interrupt cannot pin "working".
* A human-facing server request (:data:`BLOCKING_REQUESTS`) opens a blocked handle. The
  client's response to its id, ``serverRequest/resolved``, or the end of its turn closes
  it. Automatic requests (``item/tool/call``, …) are remembered but never block.
* ``thread/status/changed`` is the server's own view of a thread. ``idle``, ``systemError``
  and ``notLoaded`` (and ``thread/closed``) end every turn of that thread and close all its
  handles — the recovery when ``turn/completed`` never comes. ``active`` with the flag
  ``waitingOnApproval`` or ``waitingOnUserInput`` holds a blocked handle for the thread
  until a status without those flags arrives, so the server's flags and the requests agree.
* The member's state is the union over every thread (subagent threads included; they
  need no ``thread/started``). End of stream closes everything.

Anything else — unknown methods, responses to unknown ids, non-JSON lines, messages of the
wrong shape — is ignored and counted in :class:`MappingStats`, never fatal.

The vocabulary these rules read (item types, request kinds, statuses, the methods that
matter) is :mod:`codex_presence.core.codex_protocol`'s.

Hot path: most app-server lines are deltas. :meth:`CodexMapping.feed_line` looks at the
first bytes of a server line (codex writes ``{"method":"…"`` first) and skips the line
unparsed unless its method can change the state; only those reach ``orjson.loads`` and the
jsonrpcserver dispatch, whose per-message cost is two orders of magnitude higher.
"""

from __future__ import annotations

import inspect
import logging
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from jsonrpcserver import JsonRpcError, Success
from jsonrpcserver.dispatcher import dispatch_request
from jsonrpcserver.request import Request
from jsonrpcserver.sentinels import NOID

from codex_presence.core.activity import ActivitySignal, HandleKind, Transition
from codex_presence.core.codex_protocol import (
    AUTOMATIC_REQUESTS,
    BLOCKING_REQUESTS,
    MESSAGE_START,
    STATE_METHODS,
    THREAD_ENDING_STATUSES,
    TOOL_ITEM_TYPES,
    WAITING_FLAGS,
    Direction,
    skips_unparsed,
)

__all__ = ["CodexMapping", "Direction", "MappingStats"]

logger = logging.getLogger("codex_presence.codex")

_MAX_ENDED_TURNS = 4096
_MAX_PENDING_REQUESTS = 4096


@dataclass(slots=True)
class MappingStats:
    """What the mapping saw and ignored; for debug logs and tests."""

    lines: int = 0
    skipped: int = 0
    dispatched: int = 0
    not_json: int = 0
    wrong_shape: int = 0
    unknown_status: int = 0
    unknown_response: int = 0
    late_events: int = 0


@dataclass(slots=True)
class _PendingRequest:
    method: str
    thread: str | None
    turn: str | None
    blocking: bool


class _WrongShape(JsonRpcError):
    """Raised by a handler for params of the wrong type; jsonrpcserver turns it into an
    error result quietly (no traceback), and the mapping counts it."""

    def __init__(self, why: str) -> None:
        super().__init__(code=-32602, message=why)


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise _WrongShape(f"{what} is not a string")
    return value


def _obj(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _WrongShape(f"{what} is not an object")
    return value


def _request_id(value: object) -> Hashable:
    # bool is an int subclass; a JSON id is an integer or a string, nothing else.
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _WrongShape("request id is neither integer nor string")
    return value


@dataclass
class CodexMapping:
    """Feeds an :class:`ActivitySignal` from codex app-server traffic."""

    signal: ActivitySignal = field(default_factory=ActivitySignal)
    stats: MappingStats = field(default_factory=MappingStats)
    _pending: OrderedDict[Hashable, _PendingRequest] = field(default_factory=OrderedDict)
    _ended_turns: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict)
    _current_id: Hashable = None
    _handled: bool = False
    _cause: str = ""

    def __post_init__(self) -> None:
        self._methods = self._build_routes()

    # -- public --------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self.signal.state.value

    @property
    def has_pending(self) -> bool:
        """Whether a server request awaits the client's answer: only then can a client
        line change the state (pre-filters may skip client lines otherwise)."""
        return bool(self._pending)

    def feed_line(self, direction: Direction, line: bytes) -> Transition | None:
        """Feed one raw line (with or without its newline) as it crossed the wire."""
        self.stats.lines += 1
        if not line.startswith(MESSAGE_START):  # the leading-byte rule (skips_unparsed)
            self.stats.not_json += 1
            return None
        if direction == "server":
            if skips_unparsed(line):
                self.stats.skipped += 1
                return None
        elif not self._pending:
            self.stats.skipped += 1  # a client line matters only as an answer to a request
            return None
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.stats.not_json += 1
            logger.debug("ignored a %s line that is not JSON (%d bytes)", direction, len(line))
            return None
        return self._feed(direction, message)

    def feed_message(self, direction: Direction, message: object) -> Transition | None:
        """Feed one already-parsed message (the replay path for recordings)."""
        self.stats.lines += 1
        return self._feed(direction, message)

    def close(self, cause: str = "eof") -> Transition | None:
        """End of stream: the child exited or the pipe closed. Everything closes."""
        self.signal.close_all()
        self._pending.clear()
        return self.signal.commit(cause)

    # -- routing -------------------------------------------------------------------------

    def _feed(self, direction: Direction, message: object) -> Transition | None:
        if not isinstance(message, dict):
            self.stats.wrong_shape += 1
            logger.debug("ignored a %s message that is not an object", direction)
            return None
        method = message.get("method")
        if method is None:
            if direction == "client" and "id" in message:
                return self._client_response(message)
            self.stats.skipped += 1
            return None
        if direction == "client":
            self.stats.skipped += 1  # client requests (turn/start steers, …) open nothing
            return None
        if not isinstance(method, str):
            self.stats.wrong_shape += 1
            return None
        if method not in STATE_METHODS:
            self.stats.skipped += 1  # deltas, usage, warnings, unknown methods: no state
            return None
        return self._dispatch(method, message)

    def _dispatch(self, method: str, message: dict[str, Any]) -> Transition | None:
        self.stats.dispatched += 1
        self._current_id = message.get("id")
        self._handled = False
        self._cause = method
        # jsonrpcserver's own routing step (method lookup, argument binding, the call, and
        # errors turned into results). Its outer layers parse and validate JSON-RPC 2.0
        # text, which codex is not and which is already parsed here, so they are skipped.
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            self.stats.wrong_shape += 1
            return None
        request = Request(method, params or {}, message.get("id", NOID))
        dispatch_request(self._methods, self, request)
        if not self._handled:
            self.stats.wrong_shape += 1
            logger.debug("ignored %s of the wrong shape", method)
            return None
        return self.signal.commit(self._cause)

    def _client_response(self, message: dict[str, Any]) -> Transition | None:
        request_id = message["id"]
        if isinstance(request_id, bool) or not isinstance(request_id, int | str):
            self.stats.wrong_shape += 1
            return None
        pending = self._pending.pop(request_id, None)
        if pending is None:
            self.stats.unknown_response += 1
            logger.debug("client answered unknown server request id %r", request_id)
            return None
        if pending.blocking:
            self.signal.close(HandleKind.BLOCK, self._request_key(request_id, pending))
        return self.signal.commit("response")

    def _build_routes(self) -> dict[str, Any]:
        routes: dict[str, Any] = {
            "turn/started": _on_turn_started,
            "turn/completed": _on_turn_completed,
            "item/started": _on_item_started,
            "item/completed": _on_item_completed,
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
        for handler in set(routes.values()):
            # jsonrpcserver checks arguments with inspect.signature() on every dispatch;
            # a precomputed __signature__ is what inspect returns first, at no cost.
            handler.__signature__ = inspect.signature(handler)
        return routes

    # -- state helpers used by the handlers ------------------------------------------------

    def _is_ended(self, thread: str, turn: str) -> bool:
        return (thread, turn) in self._ended_turns

    def _end_turn(self, thread: str, turn: str) -> None:
        self._ended_turns[(thread, turn)] = None
        if len(self._ended_turns) > _MAX_ENDED_TURNS:
            self._ended_turns.popitem(last=False)
        self.signal.close_scope(thread, turn)
        # The server clears its waiting flags when a turn ends, before turn/completed.
        self.signal.close_scope(thread, None, "flags", kinds=(HandleKind.BLOCK,))
        self._forget_requests(lambda p: p.thread == thread and p.turn == turn)

    def _end_thread(self, thread: str) -> None:
        turns = {
            key[1] for kind in HandleKind for key in self.signal.keys(kind) if key[0] == thread
        }
        for turn in turns:
            if isinstance(turn, str):
                self._ended_turns[(thread, turn)] = None
        while len(self._ended_turns) > _MAX_ENDED_TURNS:
            self._ended_turns.popitem(last=False)
        self.signal.close_scope(thread)
        self._forget_requests(lambda p: p.thread == thread)

    def _forget_requests(self, doomed: Any) -> None:
        for request_id in [rid for rid, p in self._pending.items() if doomed(p)]:
            del self._pending[request_id]

    def _request_key(self, request_id: Hashable, pending: _PendingRequest) -> tuple[Hashable, ...]:
        return (pending.thread, pending.turn, "request", request_id)

    def _add_request(self, method: str, thread: str | None, turn: str | None) -> None:
        request_id = _request_id(self._current_id)
        blocking = method in BLOCKING_REQUESTS
        if blocking and thread is not None and turn is not None and self._is_ended(thread, turn):
            self.stats.late_events += 1
            self._handled = True
            return
        pending = _PendingRequest(method=method, thread=thread, turn=turn, blocking=blocking)
        self._pending[request_id] = pending
        if len(self._pending) > _MAX_PENDING_REQUESTS:
            self._drop_oldest_request()
        if blocking:
            self.signal.open(HandleKind.BLOCK, self._request_key(request_id, pending))
        self._handled = True

    def _drop_oldest_request(self) -> None:
        request_id, pending = self._pending.popitem(last=False)
        if pending.blocking:
            self.signal.close(HandleKind.BLOCK, self._request_key(request_id, pending))

    def _resolve_request(self, request_id: Hashable) -> None:
        # Usually already gone: the client's own answer comes first and closes it.
        pending = self._pending.pop(request_id, None)
        if pending is not None and pending.blocking:
            self.signal.close(HandleKind.BLOCK, self._request_key(request_id, pending))
        self._handled = True


# -- handlers: jsonrpcserver calls these with the mapping as context and params as kwargs --


def _on_turn_started(m: CodexMapping, threadId: object, turn: object, **_: object) -> Any:
    thread = _str(threadId, "threadId")
    turn_id = _str(_obj(turn, "turn").get("id"), "turn.id")
    if m._is_ended(thread, turn_id):
        m.stats.late_events += 1
    else:
        m.signal.open(HandleKind.TURN, (thread, turn_id))
    m._handled = True
    return Success()


def _on_turn_completed(m: CodexMapping, threadId: object, turn: object, **_: object) -> Any:
    thread = _str(threadId, "threadId")
    turn_id = _str(_obj(turn, "turn").get("id"), "turn.id")
    m._end_turn(thread, turn_id)
    m._handled = True
    return Success()


def _item_key(threadId: object, turnId: object, item: object) -> tuple[str, str, str, str]:
    body = _obj(item, "item")
    return (
        _str(threadId, "threadId"),
        _str(turnId, "turnId"),
        _str(body.get("id"), "item.id"),
        _str(body.get("type"), "item.type"),
    )


def _on_item_started(
    m: CodexMapping, threadId: object, turnId: object, item: object, **_: object
) -> Any:
    thread, turn, item_id, item_type = _item_key(threadId, turnId, item)
    m._handled = True
    if item_type not in TOOL_ITEM_TYPES:
        return Success()
    if m._is_ended(thread, turn):
        m.stats.late_events += 1
        return Success()
    m.signal.open(HandleKind.TOOL, (thread, turn, item_id))
    return Success()


def _on_item_completed(
    m: CodexMapping, threadId: object, turnId: object, item: object, **_: object
) -> Any:
    thread, turn, item_id, item_type = _item_key(threadId, turnId, item)
    m._handled = True
    if item_type in TOOL_ITEM_TYPES and m.signal.is_open(HandleKind.TOOL, (thread, turn, item_id)):
        m.signal.close(HandleKind.TOOL, (thread, turn, item_id))
    elif m._is_ended(thread, turn):
        m.stats.late_events += 1
    return Success()


def _on_thread_status_changed(
    m: CodexMapping, threadId: object, status: object, **_: object
) -> Any:
    thread = _str(threadId, "threadId")
    body = _obj(status, "status")
    kind = _str(body.get("type"), "status.type")
    flags_key = (thread, None, "flags")
    if kind in THREAD_ENDING_STATUSES:
        m._end_thread(thread)
    elif kind == "active":
        flags = body.get("activeFlags") or []
        if not isinstance(flags, list):
            raise _WrongShape("status.activeFlags is not a list")
        waiting = any(flag in WAITING_FLAGS for flag in flags if isinstance(flag, str))
        if waiting:
            if not m.signal.is_open(HandleKind.BLOCK, flags_key):
                m.signal.open(HandleKind.BLOCK, flags_key)
        elif m.signal.is_open(HandleKind.BLOCK, flags_key):
            m.signal.close(HandleKind.BLOCK, flags_key)
    else:
        m.stats.unknown_status += 1  # an unknown status type: leave the thread as it is
    m._handled = True
    return Success()


def _on_thread_closed(m: CodexMapping, threadId: object, **_: object) -> Any:
    m._end_thread(_str(threadId, "threadId"))
    m._handled = True
    return Success()


def _on_server_request_resolved(m: CodexMapping, requestId: object, **_: object) -> Any:
    m._resolve_request(_request_id(requestId))
    return Success()


def _on_blocking_request(
    m: CodexMapping, threadId: object, turnId: object = None, **_: object
) -> Any:
    thread = _str(threadId, "threadId")
    turn = None if turnId is None else _str(turnId, "turnId")
    m._add_request(m._cause, thread, turn)
    return Success()


def _on_legacy_blocking_request(m: CodexMapping, conversationId: object, **_: object) -> Any:
    m._add_request(m._cause, _str(conversationId, "conversationId"), None)
    return Success()


def _on_automatic_request(m: CodexMapping, threadId: object = None, **_: object) -> Any:
    m._add_request(m._cause, threadId if isinstance(threadId, str) else None, None)
    return Success()
