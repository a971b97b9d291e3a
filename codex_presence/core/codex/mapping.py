"""The codex mapping: app-server JSON-RPC traffic in, activity transitions out.

Sans-I/O, like :mod:`codex_presence.core.activity` under it: it is fed one line (or one parsed
message) at a time with its direction, and returns the :class:`Transition` that message
caused, if any. Nothing here reads a pipe or a clock.

Direction ``"server"`` is what ``codex app-server`` writes (notifications, its requests to
the client, its responses); ``"client"`` is what the client writes to it (requests, and
its responses to the server's requests). Request ids are per direction: the server counts
its own from 0, just like many clients do, so a client *response* is matched only against
*server* requests.

The rules (codex 0.169.0 and 0.171.0; ``shared/codex-app-server-protocol.md`` §2, §5–7, §11):

* ``turn/started`` opens a turn. A thread runs one turn at a time, so it also ends every
  other open turn of that thread, with its tools and requests, and no older turn of it can
  be revived any more — the recovery when ``turn/completed`` was lost and the thread's idle
  status too (openai/codex #28495, #35810, #35847). ``turn/start`` from the client opens
  nothing: on a busy thread it steers.
* ``turn/completed`` (completed, interrupted or failed) ends every open turn of its thread
  — the one it names and any other (one turn at a time) — with all their tools and requests,
  and the thread's waiting flags. It is the end of the thread's work whatever arrives late:
  the turn's other events are then ignored, e.g. an interrupted command's ``item/completed``
  (protocol §6.7).
* ``item/started`` of a tool item (:data:`TOOL_ITEM_TYPES`) opens a tool; its
  ``item/completed`` closes it. An item of an ended turn opens nothing, unless:
* **Revival.** A new ``item/started``, of *any* item type, on a turn that ended normally
  (``turn/completed`` with status ``completed``) or that its thread's idle status ended
  (or a ``turn/completed`` naming another turn of its thread), reopens that turn: codex goes
  on with new root items on the same turn id after ``turn/completed``, for minutes, then
  completes it again or goes idle (get-bb/bb #1646, PRs #1697 and #2141); and the idle status
  can come while the turn's work goes on (multica-ai/multica PR #1771). ``item/completed``
  never revives, and nothing revives an interrupted or failed turn (the fix of bb #1697
  excludes them), a turn the thread's ``systemError``/``notLoaded`` status or
  ``thread/closed`` ended, or a turn older than the thread's last ``turn/started``.
* A human-facing server request (:data:`BLOCKING_REQUESTS`) opens a blocked handle, unless
  its turn has ended. Automatic requests (``item/tool/call``, …) are remembered, so their
  answers are known, but never block.
* ``thread/status/changed`` is the server's own view of a thread. ``idle``, ``systemError``
  and ``notLoaded`` (and ``thread/closed``) end every open turn of that thread with all its
  handles — the recovery when ``turn/completed`` never comes. ``active`` with the flag
  ``waitingOnApproval`` or ``waitingOnUserInput`` holds a blocked handle for the thread
  until a status without those flags arrives, so the server's flags and the requests agree.
  ``active`` alone opens nothing.
* A thread announced by ``thread/started`` with ``threadSource: "thread_title"`` (the side
  thread the TUI runs to name a session, ``docs/codex-tui.md`` §9) never counts: its turns,
  items and requests open nothing, and whatever it had open closes.
* **A "no, stop" answer** (:func:`~codex_presence.core.codex.protocol.answer_ends_turn`:
  ``cancel``, the codex TUI's only no) interrupts its turn, which codex ends 12-50 ms later;
  the working in between (its waiting flag is cleared first) is marked
  :attr:`~codex_presence.core.activity.Transition.passing` while only such turns work, so
  that a reporter need not show a spinner the person never saw. A new ``item/started`` on
  the thread (a tool: passive items are not read) means the turn goes on after all.
* **What a block waits on** (:class:`~codex_presence.core.activity.Waits`): each blocking
  request's, read from its params (:func:`~.handlers.waits_of`); the waiting flags say
  nothing of their own. Where and which: ``thread/started`` (not a title thread's) notes
  its ``cwd`` and ``cliVersion``.
* The member's state is the union over every thread (subagent threads included; they
  need no ``thread/started``).

Every handle, and the events that close it (so a stuck "working" cannot happen):

* **turn** ``(thread, turn)`` — opened by ``turn/started`` or a reviving ``item/started``;
  closed by any ``turn/completed`` on its thread, a ``turn/started`` of another turn on its
  thread, the thread's ``idle``/``systemError``/``notLoaded`` status, ``thread/closed``,
  ``thread/started`` announcing a title thread, end of stream or the client's hang-up
  (:meth:`CodexMapping.close`; no event reopens a turn after that).
* **tool** ``(thread, turn, item)`` — opened by ``item/started`` of a tool item; closed by
  its ``item/completed``, and by everything that closes its turn (above).
* **request** ``(thread, turn, "request", id)`` — opened by a blocking server request;
  closed by the client's response to its id, ``serverRequest/resolved``, everything that
  closes its turn (a request without a turn: everything above that ends every turn of its
  thread), being the oldest of more than 4,096 pending requests, end of stream.
* **pending child** ``(child, None, "pending")`` — opened by the ``item/completed`` of a
  ``collabAgentToolCall`` ``spawnAgent`` whose ``agentsStates`` says a child thread is still
  ``pendingInit``: the parent's turn may complete before the child's turn starts, and the
  child then works for minutes (openai/codex #36141), so the member works on. Closed by
  everything that ends the child thread's turns (its ``turn/completed``, its
  ``idle``/``systemError``/``notLoaded`` status, ``thread/closed``), a later collab
  item that gives the child a final status, end of stream.
* **waiting flags** ``(thread, None, "flags")`` — opened by an ``active`` status with a
  waiting flag; closed by a status without one, and by everything that closes a turn of its
  thread, end of stream.

**Background** (:attr:`CodexMapping.background`; never working or blocked, see
:mod:`codex_presence.core.activity`): a ``commandExecution`` whose turn ends while it runs
(Esc: codex interrupts the turn and keeps the command running, "1 background terminal
running" in the TUI; protocol §6.7) is work left running:

* **background command** ``(thread, "background", item)`` — opened when its turn ends
  while its tool handle is open, by ``turn/completed`` (any status), a ``turn/started`` of
  another turn on its thread, or the thread's ``idle`` status. Closed by its
  ``item/completed``, by the thread's ``systemError``/``notLoaded`` status,
  ``thread/closed`` or a ``thread/started`` announcing a title thread (codex kills a
  thread's terminals when it unloads it), being the oldest of more than
  :data:`~codex_presence.core.activity.MAX_BACKGROUND`, end of stream or the client's
  hang-up. (``thread/backgroundTerminals/list``, a client request the TUI makes only on
  resume, is not read.)

The handlers, one per method (turns, items: tools, revival, background commands, pending
children; thread statuses; requests), are
:mod:`codex_presence.core.codex.handlers`'s.

Anything else — unknown methods, responses to unknown ids, non-JSON lines, messages of the
wrong shape — is ignored and counted in :class:`MappingStats`, never fatal. A server request
method, item type, thread status or flag that :mod:`codex_presence.core.codex.protocol`
does not classify is also reported once, to ``on_unknown`` (codex changed: ``doctor`` says
more). A bug in a handler is logged with its traceback (:mod:`codex_presence.core.router`)
and counted as ``internal_errors``; the next message is handled as usual.

Hot path: most app-server lines are deltas. :meth:`CodexMapping.feed_line` looks at the
first bytes of a server line (codex writes ``{"method":"…"`` first) and skips the line
unparsed unless its method can change the state; only those reach ``orjson.loads`` and the
jsonrpcserver dispatch, whose per-message cost is two orders of magnitude higher. A passive
item's ``item/started`` is parsed only when the line holds the id of a turn it would revive
(one bytes search per revivable turn, usually none or one).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import orjson

from codex_presence.core.activity import (
    ActivitySignal,
    ActivityState,
    HandleKind,
    Transition,
    Waits,
)
from codex_presence.core.codex.handlers import MappingState, routes
from codex_presence.core.codex.protocol import (
    BLOCKING_REQUESTS,
    MESSAGE_START,
    PASSIVE_ITEM_STARTS,
    STATE_METHODS,
    Direction,
    answer_ends_turn,
    skips_unparsed,
)
from codex_presence.core.codex.turns import TurnMemory
from codex_presence.core.feeder import ConnectionEvent, Feeder, Unknown
from codex_presence.core.router import (
    Outcome,
    Router,
    request_id_param,
)

if TYPE_CHECKING:
    from codex_presence.core.codex.websocket import ClientLinks

__all__ = ["CodexMapping", "Direction", "MappingStats", "Unknown"]

logger = logging.getLogger("codex_presence.codex")

_MAX_PENDING_REQUESTS = 4096
_MAX_UNKNOWNS = 64
_MAX_UNKNOWN_NAME = 120


@dataclass(slots=True)
class MappingStats:
    """What the mapping saw and ignored; for debug logs and tests."""

    lines: int = 0
    skipped: int = 0
    dispatched: int = 0
    not_json: int = 0
    wrong_shape: int = 0
    not_rpc: int = 0
    """JSON objects that are no JSON-RPC message at all (no method, no id): not app-server
    traffic (``replay`` says so when a file holds nothing else)."""
    internal_errors: int = 0
    """Messages a handler failed on (a bug; logged with its traceback)."""
    unknown_status: int = 0
    unknown_response: int = 0
    late_events: int = 0
    revived: int = 0
    """Ended turns reopened by a new ``item/started``."""
    title_thread_events: int = 0


@dataclass(slots=True)
class _PendingRequest:
    method: str
    thread: str | None
    turn: str | None
    blocking: bool


@dataclass
class CodexMapping:
    """Feeds an :class:`ActivitySignal` from codex app-server traffic."""

    signal: ActivitySignal = field(default_factory=ActivitySignal)
    stats: MappingStats = field(default_factory=MappingStats)
    on_unknown: Callable[[Unknown], object] | None = None
    """Called once per unclassified name seen (wrap logs it); must not block."""
    unknowns: set[Unknown] = field(default_factory=set)
    _pending: OrderedDict[Hashable, _PendingRequest] = field(default_factory=OrderedDict)
    _turns: TurnMemory = field(default_factory=TurnMemory)
    _stopping: set[str] = field(default_factory=set)
    """Threads whose turn the client's answer interrupts (:func:`answer_ends_turn`): until
    their work ends, a working of theirs alone is marked passing."""
    _commands: set[tuple[str, str, str]] = field(default_factory=set)
    """The open ``commandExecution`` tools: they go to the background if their turn ends."""
    _current_id: object = None
    _cause: str = ""
    _links: ClientLinks | None = None
    """The client connections of a replayed relay (:meth:`feed_connection`)."""

    def __post_init__(self) -> None:
        self._router = Router(routes())

    # -- public --------------------------------------------------------------------------

    @property
    def state(self) -> str:
        return self.signal.state.value

    @property
    def background(self) -> int:
        """Commands left running after their turn (see the module doc)."""
        return self.signal.background

    @property
    def has_pending(self) -> bool:
        """Whether a server request awaits the client's answer: only then can a client
        line change the state (pre-filters may skip client lines otherwise)."""
        return bool(self._pending)

    def is_title_thread(self, thread: object) -> bool:
        """Whether ``thread`` is one of the TUI's side threads that title a session (as its
        ``thread/started`` said): never a session of its own, nor one to resume."""
        return self._turns.is_ignored(thread)

    def feed_line(self, direction: Direction, line: bytes) -> Transition | None:
        """Feed one raw line (with or without its newline) as it crossed the wire."""
        self.stats.lines += 1
        if not line.startswith(MESSAGE_START):
            # The leading-byte rule (skips_unparsed): no message as codex writes one. Parsed
            # only to be counted right (the relay's pre-filter never hands such a line over).
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                self.stats.not_json += 1
            else:
                self.stats.wrong_shape += 1
            return None
        if direction == "server":
            if skips_unparsed(line) or (
                line.startswith(PASSIVE_ITEM_STARTS) and not self._turns.may_revive(line)
            ):
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

    # -- the feeder interface (:class:`~codex_presence.core.feeder.Feeder`) ------------------

    @property
    def messages(self) -> int:
        """JSON-RPC messages fed (skipped deltas included)."""
        stats = self.stats
        return stats.lines - stats.not_json - stats.wrong_shape - stats.not_rpc

    @property
    def changes_possible(self) -> bool:
        return bool(self.stats.dispatched)

    @property
    def deadline(self) -> float | None:
        """None: codex's traffic alone moves the state; no timer."""
        return None

    def tick(self, t: float) -> Transition | None:
        return None

    def feed(self, source: str, message: object, t: float) -> list[Transition]:
        """:meth:`feed_message` (a direction is a source; the time is not needed)."""
        transition = self.feed_message(cast(Direction, source), message)
        return [] if transition is None else [transition]

    def feed_raw(self, source: str, line: bytes, t: float) -> list[Transition]:
        """:meth:`feed_line`."""
        transition = self.feed_line(cast(Direction, source), line)
        return [] if transition is None else [transition]

    def feed_connection(
        self, connection: int, event: ConnectionEvent, t: float
    ) -> list[Transition]:
        """A TUI session's client connection: its hang-up closes everything, as live
        (:class:`~codex_presence.core.codex.websocket.ClientLinks`)."""
        if self._links is None:
            from codex_presence.core.codex.websocket import ClientLinks

            self._links = ClientLinks()
        if not self._links.apply(connection, event):
            return []
        from codex_presence.core.codex.websocket import HANGUP

        transition = self.close(HANGUP)
        return [] if transition is None else [transition]

    def close(self, cause: str = "eof") -> Transition | None:
        """End of stream (the child exited, the pipe closed) or the client's hang-up
        (:data:`~codex_presence.core.codex.websocket.HANGUP`): everything closes, and every turn
        that was open or revivable is over for good — an event of it that still comes
        (the app-server goes on with a turn after a hang-up) reopens nothing."""
        for kind in HandleKind:
            for key in self.signal.keys(kind):
                if len(key) > 1 and isinstance(key[0], str) and isinstance(key[1], str):
                    self._turns.end(key[0], [key[1]])
        self._turns.forbid_all_revival()
        self.signal.close_all()
        self.signal.close_all_background()
        self._commands.clear()
        self._pending.clear()
        return self.signal.commit(cause)

    # -- routing -------------------------------------------------------------------------

    def _feed(self, direction: Direction, message: object) -> Transition | None:
        transition = self._handle(direction, message)
        if self._stopping:
            self._stopping = {t for t in self._stopping if self._open_turns(t)}
            if transition is not None and self._only_stopping_threads_work():
                transition = replace(transition, passing=True)
        return transition

    def _only_stopping_threads_work(self) -> bool:
        """Whether the member works only in turns that a "no, stop" is ending."""
        if self.signal.state is not ActivityState.WORKING:
            return False
        return all(
            key[0] in self._stopping
            for kind in (HandleKind.TURN, HandleKind.TOOL)
            for key in self.signal.keys(kind)
        )

    def _handle(self, direction: Direction, message: object) -> Transition | None:
        if not isinstance(message, dict):
            self.stats.wrong_shape += 1
            logger.debug("ignored a %s message that is not an object", direction)
            return None
        method = message.get("method")
        if method is None:
            if "id" not in message:
                self.stats.not_rpc += 1
            elif direction == "client":
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
            if "id" in message:  # a request: every one the server sends must be classified
                self._unknown("server request method", method)
            self.stats.skipped += 1  # deltas, usage, warnings, unknown methods: no state
            return None
        params = message.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            self.stats.wrong_shape += 1
            return None
        if self._turns.title_threads and self._turns.is_ignored(params.get("threadId")):
            self.stats.title_thread_events += 1
            return None
        if method == "item/started" and self._turns.revives_nothing(params):
            self.stats.skipped += 1
            return None
        return self._dispatch(method, message.get("id"), params)

    def _dispatch(
        self, method: str, request_id: object, params: dict[str, Any]
    ) -> Transition | None:
        self.stats.dispatched += 1
        self._current_id = request_id
        self._cause = method
        outcome = self._router.route(self, method, params)
        if outcome is Outcome.WRONG_SHAPE:
            self.stats.wrong_shape += 1
            logger.debug("ignored %s of the wrong shape", method)
            return None
        if outcome is Outcome.INTERNAL_ERROR:
            self.stats.internal_errors += 1
        return self.signal.commit(method)

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
            if pending.thread is not None and answer_ends_turn(
                pending.method, message.get("result")
            ):
                self._stopping.add(pending.thread)
        return self.signal.commit("response")

    def _unknown(self, kind: str, name: str) -> None:
        """Report, once, a name the vocabulary does not classify (a long one cut short: it
        is for a log line)."""
        if len(name) > _MAX_UNKNOWN_NAME:
            name = name[:_MAX_UNKNOWN_NAME] + "…"
        unknown = Unknown(kind, name)
        if unknown in self.unknowns or len(self.unknowns) >= _MAX_UNKNOWNS:
            return
        self.unknowns.add(unknown)
        if self.on_unknown is not None:
            try:
                self.on_unknown(unknown)
            except Exception:  # the report is a courtesy; the state must not suffer
                logger.exception("on_unknown failed for %s %r", kind, name)

    # -- state helpers used by the handlers ------------------------------------------------

    def _open_turns(self, thread: str) -> set[str]:
        """The turns of ``thread`` that hold a handle (a turn, a tool or a request)."""
        return {turn for turn in self.signal.subscopes(thread) if isinstance(turn, str)}

    def _end_thread_work(self, thread: str, *, revivable: bool) -> None:
        """End every open turn of ``thread`` and close all its handles (its waiting flags
        and requests without a turn too). ``revivable``: the turns that were open may be
        reopened by a new item; else none of the thread's may."""
        turns = self._open_turns(thread)
        self._turns.end(thread, turns)
        if revivable:
            self._turns.allow_revival(thread, turns)
            self._leave_running(thread, turns)
        else:
            self._turns.forbid_revival(thread)
            self._commands.difference_update([c for c in self._commands if c[0] == thread])
            self.signal.close_background_scope(thread)
        self.signal.close_scope(thread)
        self._forget_requests(lambda p: p.thread == thread)

    def _leave_running(self, thread: str, turns: set[str]) -> None:
        """The open commands of ``turns`` (ending now) go on in the background."""
        for command in [c for c in self._commands if c[0] == thread and c[1] in turns]:
            self._commands.discard(command)
            if self.signal.is_open(HandleKind.TOOL, command):
                self.signal.open_background((thread, "background", command[2]))

    def _forget_requests(self, doomed: Callable[[_PendingRequest], bool]) -> None:
        for request_id in [rid for rid, p in self._pending.items() if doomed(p)]:
            del self._pending[request_id]

    def _request_key(self, request_id: Hashable, pending: _PendingRequest) -> tuple[Hashable, ...]:
        return (pending.thread, pending.turn, "request", request_id)

    def _add_request(
        self, thread: str | None, turn: str | None, waits: Waits | None = None
    ) -> None:
        method = self._cause
        request_id = request_id_param(self._current_id)
        blocking = method in BLOCKING_REQUESTS
        ended = thread is not None and turn is not None and self._turns.is_ended(thread, turn)
        if blocking and ended:
            self.stats.late_events += 1
            return
        pending = _PendingRequest(method=method, thread=thread, turn=turn, blocking=blocking)
        self._pending[request_id] = pending
        if len(self._pending) > _MAX_PENDING_REQUESTS:
            self._drop_oldest_request()
        if blocking:
            self.signal.open(HandleKind.BLOCK, self._request_key(request_id, pending), waits)

    def _drop_oldest_request(self) -> None:
        request_id, pending = self._pending.popitem(last=False)
        if pending.blocking:
            self.signal.close(HandleKind.BLOCK, self._request_key(request_id, pending))

    def _resolve_request(self, request_id: Hashable) -> None:
        # Usually already gone: the client's own answer comes first and closes it.
        pending = self._pending.pop(request_id, None)
        if pending is not None and pending.blocking:
            self.signal.close(HandleKind.BLOCK, self._request_key(request_id, pending))


def _is_what_the_handlers_use(mapping: CodexMapping) -> MappingState:
    """Never called: mypy checks here that the mapping is what its handlers take."""
    return mapping


def _is_a_feeder(mapping: CodexMapping) -> Feeder:
    """Never called: mypy checks here that the mapping is a feeder (the shared interface)."""
    return mapping
