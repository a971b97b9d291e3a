"""The shared vocabulary of everything that talks to a broker, pure data and pure functions.

One place for what a runner, the broker, its clients and the web page must agree on:

* :class:`ActivityState`, and the design's ``Presence`` object (:func:`presence` builds it
  exactly: ``name, connected, createdAt, lastSeen, role``, then ``activity`` only when not
  idle and ``busy`` only when ``activity`` is there, true iff working), plus one additive
  field of ours, ``activitySince`` (unix ms: since when the activity holds), also only
  with ``activity``, and two more, ``sessions`` and ``background``/``backgroundSince``
  (see :func:`presence`);
* the session id a runner gives its reports and its subscription (:func:`session_id_problem`
  says what is wrong with one), how many sessions a member may have working or blocked at
  once (:data:`MAX_SESSIONS`), and the grace a session gets when its subscription ends
  (:data:`SESSION_GRACE`); and the background count a report may carry
  (:func:`background_problem` says what is wrong with one, :data:`MAX_BACKGROUND`);
* the endpoint paths and the SSE event names;
* the defaults: the broker's port and URL, the activity TTL (and the least a broker
  accepts), the runner's heartbeat (a third of the TTL), the stream keep-alive, and how
  long a silent stream may stay silent;
* the token: where it comes from in the environment, and which characters it may hold;
* the privilege bucket (admin, operator or none) and the permissions that make it;
* the answer to ``GET /whoami`` (:func:`parse_whoami`: bytes in, :class:`Whoami` or None);
* :class:`Refused`: a request answered with an error status and its reason, whichever
  server refuses it (the broker's endpoints, ``claude``'s hook server);
* text that is safe to show: which characters a terminal or a log would act on instead of
  showing (:func:`control_character`), and the same text with them escaped
  (:func:`printable`); and a count with its noun (:func:`counted`: "1 member").

No I/O here, and no import from the rest of the package but :mod:`codex_presence._env` (the
names a command reads before anything loads, re-exported here): every subpackage may use it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, Protocol, TypedDict

import orjson

from codex_presence._env import DEFAULT_BROKER, DEFAULT_PORT, TOKEN_ENV

__all__ = [
    "ACTIVITY_PATH",
    "ACTIVITY_STATES",
    "ADMIN_PERMISSION",
    "AGENT_MAX_BYTES",
    "CHANGED_EVENT",
    "DEFAULT_BROKER",
    "DEFAULT_PORT",
    "DEFAULT_TTL",
    "HEALTHZ_PATH",
    "HEARTBEAT",
    "HISTORY_PATH",
    "KEEPALIVE",
    "KNOWN_PERMISSIONS",
    "MAX_BACKGROUND",
    "MAX_SESSIONS",
    "METRICS_PATH",
    "MIN_TTL",
    "NOTIFY_PATH",
    "OPERATOR_PERMISSION",
    "PRESENCE_EVENT",
    "ROSTER_EVENT",
    "ROSTER_PATH",
    "SESSION_GRACE",
    "SESSION_ID_MAX",
    "SILENT_STREAM_TIMEOUT",
    "STALE_EVENT",
    "SUBSCRIBE_PATH",
    "TOKEN_ENV",
    "WAIT_KINDS",
    "WHOAMI_PATH",
    "ActivityState",
    "Presence",
    "Refused",
    "RoleJson",
    "Whoami",
    "agent_problem",
    "background_problem",
    "control_character",
    "counted",
    "heartbeat_for",
    "is_token_text",
    "masked",
    "parse_whoami",
    "presence",
    "printable",
    "privilege",
    "session_id_problem",
]


class ActivityState(enum.StrEnum):
    """What a member is doing, as the design's schema names it."""

    IDLE = "idle"
    WORKING = "working"
    BLOCKED = "blocked"


ACTIVITY_STATES: Mapping[str, ActivityState] = {state.value: state for state in ActivityState}
"""Each state by its name on the wire: a lookup that says "unknown" with ``.get`` instead
of raising, as ``ActivityState(name)`` does."""


# -- endpoints -------------------------------------------------------------------------------

NOTIFY_PATH = "/notify"
"""The broker's notification targets, as an admin sees them (never their URLs)."""
ACTIVITY_PATH = "/presence/activity"
SUBSCRIBE_PATH = "/subscribe"
ROSTER_PATH = "/roster"
WHOAMI_PATH = "/whoami"
HEALTHZ_PATH = "/healthz"
HISTORY_PATH = "/history"
"""A member's timeline: intervals, totals, waits (``?member=NAME[&since=MS]``)."""
METRICS_PATH = "/metrics"
"""Prometheus's text format, for a scraper with a member's token."""

ROSTER_EVENT = "roster"
"""SSE event: the whole roster, ``{"team", "you", "members": [Presence...], "privileges"}``."""
PRESENCE_EVENT = "presence"
"""SSE event: one member's full, current Presence object."""
CHANGED_EVENT = "changed"
"""SSE event of a light stream (``?light=1``), where the full stream sends ``roster``:
``{"version", "team", "you", "privileges"}``, the members to be read with ``GET /roster``
(``If-None-Match``: 304 while the roster is the one the client has)."""
STALE_EVENT = "stale"
"""SSE event: ``{"stale": true, "reason"}`` — the broker lost its shared store; what the
stream shows may be out of date until its next ``roster`` event."""

# -- defaults --------------------------------------------------------------------------------

DEFAULT_TTL = 30.0
"""Seconds a working/blocked report holds at the broker without a heartbeat."""
MIN_TTL = 1.0
"""The shortest TTL the broker command accepts."""


def heartbeat_for(ttl: float) -> float:
    """Seconds between a non-idle runner's re-reports to a broker whose TTL is ``ttl``: a
    third of it, so that two heartbeats may be lost before the TTL lapses."""
    return ttl / 3


HEARTBEAT = heartbeat_for(DEFAULT_TTL)
"""The heartbeat for :data:`DEFAULT_TTL` (10 s), until the broker says its own TTL."""
KEEPALIVE = 15.0
"""Seconds between the broker's keep-alive comments on a quiet stream."""
SILENT_STREAM_TIMEOUT = 3 * KEEPALIVE
"""A stream (or a connection) silent this long is taken for dead, on both sides."""

# -- sessions --------------------------------------------------------------------------------

SESSION_ID_MAX = 64
"""The longest session id a broker takes (a runner picks 16 characters)."""
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]+")
MAX_SESSIONS = 16
"""Sessions of one member that may be working or blocked at once (idle ones hold nothing):
a report that would start one more is refused (429) until one ends or lapses."""
SESSION_GRACE = 3.0
"""Seconds a session's working or blocked state outlives the end of the subscription it is
bound to (a reconnect within it re-sends the state: nobody sees a thing)."""


MAX_BACKGROUND = 1024
"""The largest background count a report may carry (commands or tasks a session left
running): a count past it is refused (400), not clipped. A runner's signal keeps no more
handles than this (:mod:`codex_presence.core.activity`), so its counts always fit."""


def background_problem(count: object) -> str | None:
    """Why ``count`` is not a session's background count (an integer, 0 to
    :data:`MAX_BACKGROUND`; not a boolean, not a float), or None when it is one."""
    if isinstance(count, bool) or not isinstance(count, int):
        return '"background" must be an integer (the commands or tasks left running)'
    if not 0 <= count <= MAX_BACKGROUND:
        return f'"background" must be 0 to {MAX_BACKGROUND}, not {count}'
    return None


def session_id_problem(session: object) -> str | None:
    """Why ``session`` is not a session id (1 to :data:`SESSION_ID_MAX` characters of
    ``A-Z a-z 0-9 _ -``, the URL-safe base64 alphabet), or None when it is one."""
    if not isinstance(session, str):
        return '"session" must be a string'
    if not session:
        return "the session id is empty"
    if len(session) > SESSION_ID_MAX:
        return f"the session id is {len(session)} characters long; at most {SESSION_ID_MAX}"
    if _SESSION_ID.fullmatch(session) is None:
        return "the session id may hold only A-Z, a-z, 0-9, '_' and '-'"
    return None


# -- the token -------------------------------------------------------------------------------


def is_token_text(token: str) -> bool:
    """The token rule: non-empty, printable ASCII, no whitespace (it travels in a header)."""
    return bool(token) and all(33 <= ord(c) < 127 for c in token)


# -- privilege -------------------------------------------------------------------------------

ADMIN_PERMISSION = "members.manage"
OPERATOR_PERMISSION = "objectives.create"
KNOWN_PERMISSIONS: Mapping[str, str] = {ADMIN_PERMISSION: "admin", OPERATOR_PERMISSION: "operator"}
"""The permissions the roster knows, and the privilege bucket each makes (admin wins).
A team file may hold others (the wider system's); they make no bucket."""


def privilege(permissions: Iterable[str]) -> str | None:
    """The design's privilege bucket: admin, operator or nothing."""
    perms = set(permissions)
    if ADMIN_PERMISSION in perms:
        return "admin"
    if OPERATOR_PERMISSION in perms:
        return "operator"
    return None


# -- the Presence object ---------------------------------------------------------------------


class RoleJson(TypedDict):
    """The design's ``Role`` object."""

    title: str
    permissions: list[str]


class _HasRoleJson(Protocol):
    def to_json(self) -> RoleJson: ...


class Presence(TypedDict):
    """The design's ``Presence`` object, as the broker sends it."""

    name: str
    connected: int
    createdAt: int
    lastSeen: int
    role: RoleJson | None
    activity: NotRequired[str]
    busy: NotRequired[bool]
    activitySince: NotRequired[int]
    """Ours, additive like ``activity`` (older clients ignore it): since when (unix ms) the
    working or blocked state holds. A heartbeat does not move it; a change of state does."""
    sessions: NotRequired[dict[str, int]]
    """Ours, additive, only while two or more of the member's sessions are working or
    blocked: how many are ``"working"`` and ``"blocked"``, each key only when its count is
    not 0."""
    background: NotRequired[int]
    """Ours, additive, only while the member's sessions have commands or tasks left running
    (whatever the state, idle included): how many, over every session. It never makes a
    member working or blocked."""
    backgroundSince: NotRequired[int]
    """Ours, with ``background``: since when (unix ms) the earliest of those sessions has
    had something running in the background."""
    agents: NotRequired[list[dict[str, Any]]]
    """Ours, additive, while one of the member's sessions is working or blocked or reported
    an ``agent`` object: one object per session, ``session``, ``state``, ``since``,
    ``background`` and that session's ``agent`` members spread in (AGENT-RECORD), blocked
    first, then working, then idle, then by ``since``."""


def presence(
    *,
    name: str,
    connected: int,
    created_at: int,
    last_seen: int,
    role: _HasRoleJson | Mapping[str, Any] | None,
    activity: ActivityState | str = ActivityState.IDLE,
    activity_since: int | None = None,
    sessions: tuple[int, int] = (0, 0),
    background: tuple[int, int | None] = (0, None),
    agents: Sequence[dict[str, Any]] = (),
) -> Presence:
    """The design's Presence object, keys in the schema's order (then ``activitySince``,
    with ``activity`` when known, and ``sessions``, with ``activity``).

    A member may run several sessions (a codex TUI, Claude Code, an app-server), each
    reporting apart; ``activity`` is the strongest of their states (blocked > working >
    idle), ``activitySince`` that state's, and ``sessions`` (the counts ``(working,
    blocked)``) says how many are in each, e.g. ``"sessions": {"working": 2, "blocked":
    1}``; a count of 0 is left out. The field is there only while two or more sessions are
    working or blocked: with one (or none), ``activity`` says it all, and the object is
    exactly what it was before sessions (every existing client reads it unchanged).

    ``background`` (the count, ``backgroundSince``) is what the sessions left running: e.g.
    ``"background": 1, "backgroundSince": 1764590000000`` on an idle member whose build goes
    on after the turn; both absent when the count is 0, as ``activity`` is when idle.

    ``agents``: each session's entry (:attr:`Presence.agents`), absent when there is none."""
    role_json: Any
    if role is None or isinstance(role, Mapping):
        role_json = dict(role) if role else None
    else:
        role_json = role.to_json()
    obj: Presence = {
        "name": name,
        "connected": connected,
        "createdAt": created_at,
        "lastSeen": last_seen,
        "role": role_json,
    }
    if activity != "idle":
        obj["activity"] = str(activity)
        obj["busy"] = activity == "working"
        if activity_since is not None:
            obj["activitySince"] = activity_since
        if sum(sessions) > 1:
            obj["sessions"] = {
                k: n for k, n in zip(("working", "blocked"), sessions, strict=True) if n
            }
    count, count_since = background
    if count > 0:
        obj["background"] = count
        if count_since is not None:
            obj["backgroundSince"] = count_since
    if agents:
        obj["agents"] = list(agents)
    return obj


# -- GET /whoami -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Whoami:
    """A broker's answer to ``GET /whoami``: whose token this is, in which team, and how
    long the broker holds an activity report (None from a broker that does not say)."""

    team: str
    name: str
    activity_ttl: float | None = None
    """Seconds, from the answer's ``activityTtlMs``."""


def parse_whoami(body: bytes) -> Whoami | None:
    """The ``/whoami`` answer in ``body``, or None if it is not one (a proxy's sign-in
    page, a dev server's fallback route: a URL that is not a codex-presence broker)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(answer, dict):
        return None
    team, name = answer.get("team"), answer.get("name")
    if not isinstance(team, str) or not isinstance(name, str) or not name:
        return None
    ttl_ms = answer.get("activityTtlMs")
    ttl = None
    if isinstance(ttl_ms, int | float) and not isinstance(ttl_ms, bool) and ttl_ms > 0:
        ttl = ttl_ms / 1000
    return Whoami(team=team, name=name, activity_ttl=ttl)


# -- text that is safe to show ---------------------------------------------------------------

_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""C0 and C1 controls and DEL (escape sequences: screen clearing, OSC 52 clipboard writes;
line breaks that forge lines), Unicode's line and paragraph separators, and the
bidirectional marks and overrides that make text read other than it is."""


_URL_PASSWORD = r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*):[^\s/@]*@"
_SECRET_PARAMETER = r"(?i)([?&;][^\s=&;#]*(?:pass|secret|token|key)[^\s=&;#]*=)[^\s&;#]*"
_TOKEN = r"\bcp_[A-Za-z0-9_-]{8,}"


def masked(text: str) -> str:
    """``text`` (a URL, or a message naming one) without the secrets it may hold: a URL's
    password (``scheme://user:***@host``), the value of a query parameter named like a
    secret (``?password=***``), a member token. Whatever a client prints or returns that
    names a broker goes through it: a password in ``--broker`` reached the logs, the
    roster's errors and the MCP tool's result (the model)."""
    text = re.sub(_URL_PASSWORD, r"\1:***@", text)
    text = re.sub(_SECRET_PARAMETER, r"\1***", text)
    return re.sub(_TOKEN, "cp_***", text)


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one: "1 member", "2 members"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def control_character(text: str) -> str | None:
    """The first character of ``text`` that a terminal, a log or a line-based reader would
    act on instead of showing, or None."""
    found = _CONTROL.search(text)
    return None if found is None else found.group()


def printable(text: str) -> str:
    """``text`` with each such character written as ``\\xNN`` or ``\\uNNNN``: it shows as
    what it is, and does nothing."""
    return _CONTROL.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class Refused(Exception):
    """A request answered with ``status`` and ``{"error": reason}``: what any of our HTTP
    servers raises where it refuses one. ``headers`` are what that answer must carry;
    ``close``: the rest of the request is never read, so the connection must close."""

    def __init__(
        self,
        status: int,
        reason: str,
        *,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = dict(headers or {})
        if close:
            self.headers["connection"] = "close"


# -- the agent object ------------------------------------------------------------------------

AGENT_MAX_BYTES = 512
"""The largest ``agent`` object a report may carry, encoded (orjson, compact)."""
WAIT_KINDS = ("command", "file_change", "question", "permission", "elicitation", "other")
"""What a blocked session waits on (``agent.waits.kind``)."""
_CLIENT = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")
_AGENT_TEXT = {"version": 64, "host": 64, "project": 64}
_WAITS_TEXT = {"tool": 64, "program": 64, "detail": 120}


def agent_problem(agent: object) -> str | None:
    """Why ``agent`` is not a report's ``agent`` object (see AGENT-RECORD: ``client``,
    ``version``, ``host``, ``project``, ``waits`` with ``kind``, ``tool``, ``program``,
    ``detail``, each bounded, no control character, at most :data:`AGENT_MAX_BYTES`
    encoded), or None when it is one (``null`` included: it clears the stored one). The
    reason names the field. Nothing is stripped: what is wrong is refused."""
    if agent is None:
        return None
    if not isinstance(agent, dict):
        return '"agent" must be a JSON object or null'
    problem = _text_fields(agent, "agent", _AGENT_TEXT, {"client", "waits"})
    if problem is not None:
        return problem
    if "client" in agent:
        client = agent["client"]
        if not isinstance(client, str) or _CLIENT.fullmatch(client) is None:
            return (
                '"agent.client" must be a short token naming the client (its runner\'s, or a '
                "custom reporter's): a-z, 0-9, '.', '_', '-', at most 32 characters"
            )
    waits = agent.get("waits")
    if waits is not None:
        if not isinstance(waits, dict):
            return '"agent.waits" must be a JSON object or null'
        problem = _text_fields(waits, "agent.waits", _WAITS_TEXT, {"kind"})
        if problem is not None:
            return problem
        if "kind" not in waits:
            return '"agent.waits.kind" is missing'
        if waits["kind"] not in WAIT_KINDS:
            return '"agent.waits.kind" must be one of ' + ", ".join(WAIT_KINDS)
    size = len(orjson.dumps(agent))
    if size > AGENT_MAX_BYTES:
        return f'"agent" is {size} bytes encoded; at most {AGENT_MAX_BYTES}'
    return None


def _text_fields(
    obj: Mapping[str, object], where: str, texts: Mapping[str, int], others: set[str]
) -> str | None:
    """Why ``obj`` has a key other than ``texts`` and ``others``, or a ``texts`` value that is
    no string within its bound or holds a control character; None when it has not."""
    for key, value in obj.items():
        if key not in texts:
            if key not in others:
                return f'"{where}" has an unknown key {printable(key)!r}'
            continue
        if not isinstance(value, str):
            return f'"{where}.{key}" must be a string'
        if len(value) > texts[key]:
            return f'"{where}.{key}" is {len(value)} characters long; at most {texts[key]}'
        if control_character(value) is not None:
            return f'"{where}.{key}" holds a control character'
    return None
