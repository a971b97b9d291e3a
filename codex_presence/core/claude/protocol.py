"""The Claude Code vocabulary that the activity mapping reads (Claude Code 2.1.332).

The three sources the mapping is fed (:data:`ClaudeSource`), the hook events it needs (all,
or, where claude's session file leads, :data:`FILE_LED_EVENTS` for the versions of
:data:`FILE_LED_VERSIONS`) and the settings document that registers them
(:func:`hook_settings`: async command hooks running our bash poster or curl, which claude
does not wait for, or HTTP hooks), the parting hint's flags, the notification types and
session statuses that mean something, the transcript's interrupt marker and background
tasks. ``docs/claude-code-hooks.md`` holds the measurements behind each of them. Pure data
and pure functions, and the standard library's ``re`` alone: a runner writes claude's
settings with it before claude's spawn (issue 34), so no dataclass and no typing here (the
mapping's counters and its view of the session file are :mod:`.mapping`'s).
"""

from __future__ import annotations

import re

from codex_presence.core.hooks.poster import HOOK_SECRET_HEADER

TYPE_CHECKING = False  # typing is not loaded before claude's spawn
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, Literal, TypeAlias

    ClaudeSource: TypeAlias = Literal["hook", "transcript", "session", "history"]
    """Where a message came from: a hook POST, an entry of the session's transcript
    (JSONL), a new content of claude's session status file
    (``<config dir>/sessions/<pid>.json``), or a line of claude's prompt history
    (``<config dir>/history.jsonl``, every session's, its ``sessionId`` ours). A name for
    the type checker alone: import it under ``TYPE_CHECKING``."""

__all__ = [
    "BLOCKING_NOTIFICATIONS",
    "FILE_LED_EVENTS",
    "FILE_LED_MATCHERS",
    "FILE_LED_VERSIONS",
    "HOOK_EVENTS",
    "HOOK_TIMEOUT",
    "IDLE_NOTIFICATION",
    "IDLE_STATUSES",
    "INTERRUPT_PREFIX",
    "PACKAGE",
    "PERSON_WAITS",
    "PRINT_WAITED_EVENTS",
    "RESUME_HINT_FLAGS_ENV",
    "SOURCES",
    "TRANSCRIPT_TYPES",
    "WAITED_EVENTS",
    "background_command_id",
    "background_launch_id",
    "history_prompt",
    "hook_settings",
    "is_interrupt_marker",
    "is_one_of",
    "prints",
    "resume_hint_flags",
    "running_tasks",
    "task_notification_id",
    "transcript_line_may_matter",
    "transcript_task_end",
    "with_hooks",
]

PACKAGE = "@anthropic-ai/claude-code"
"""Claude Code's npm package: its ``package.json`` beside the program says the version
(:mod:`codex_presence.agent.installed`)."""

SOURCES: tuple[ClaudeSource, ...] = ("hook", "transcript", "session", "history")

HOOK_EVENTS: tuple[str, ...] = (
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "SessionEnd",
)
"""The hook events the mapping reads when the hooks lead, each registered as a hook of
ours. (SessionStart is not one: Claude Code skips HTTP hooks for it, and the state does not
need it.)"""

FILE_LED_EVENTS: tuple[str, ...] = ("SessionStart", "SessionEnd")
"""The hooks registered when claude's session file leads: only those that fire outside a
turn, where claude draws no spinner to name them in. SessionStart (an async command hook:
claude runs no HTTP hook for it) names the transcript and says the file leads; SessionEnd
closes everything as claude leaves."""

FILE_LED_MATCHERS: dict[str, str] = {
    "SessionStart": "startup|resume|clear",
    "SessionEnd": "prompt_input_exit|logout|other",
}
"""Which of their sources (claude matches a SessionStart hook on its ``source``, a
SessionEnd one on its ``reason``) the file-led hooks fire for: SessionStart at claude's
start and when a new transcript begins (``/clear``, ``/resume``), not after a compaction
(which may come mid-turn, under the spinner); SessionEnd when claude exits, not at
``/clear`` or ``/resume`` (claude waits for it there, and names it on screen)."""

FILE_LED_VERSIONS: frozenset[str] = frozenset({"2.1.332"})
"""Claude Code versions whose session status file was checked to say, alone, what the hooks
say of a session's state (every interactive recording in ``fixtures/``): for these, an
interactive claude gets only :data:`FILE_LED_EVENTS`. Any other version gets every hook."""

HOOK_TIMEOUT = 2
"""Seconds claude waits for a hook's answer. The server answers at once; this bounds what
a wedged server could cost a turn (claude waits on the answers of its own flow)."""

BLOCKING_NOTIFICATIONS: frozenset[str] = frozenset(
    {"permission_prompt", "agent_needs_input", "elicitation_dialog"}
)
"""``Notification`` types that mean a person must act (the design's list)."""

IDLE_NOTIFICATION = "idle_prompt"
"""claude has sat at its prompt for ``messageIdleNotifThresholdMs`` (60 s by default)."""

IDLE_STATUSES: frozenset[str] = frozenset({"idle", "shell"})
"""Session statuses that say nothing runs: ``shell`` is idle with a background command
still running, which is not the member's work (see the mapping)."""

PERSON_WAITS: frozenset[str] = frozenset(
    {"permission prompt", "input needed", "worker request", "sandbox request"}
)
"""``waitingFor`` values of a ``waiting`` session status that wait on a person. Others
(``dialog open``: a settings dialog the person opened, say) carry no opinion."""


def is_one_of(value: object, names: frozenset[str]) -> bool:
    """``value in names``, for a value of any JSON type (a list is unhashable)."""
    return isinstance(value, str) and value in names


def history_prompt(line: Mapping[str, Any]) -> float | None:
    """When (``timestamp``, ms since the epoch, claude's clock) a line of claude's prompt
    history says a prompt was submitted that may start a turn; None for one that cannot
    say so: a slash command (``/help``, ``/cost`` open a dialog, ``/clear`` nothing: no
    turn, while the line is written as a prompt's is; the session file says what a
    command does), or a line without its timestamp."""
    display, stamp = line.get("display"), line.get("timestamp")
    if not isinstance(display, str) or display.startswith("/"):
        return None
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool):
        return None
    return float(stamp)


INTERRUPT_PREFIX = "[Request interrupted by user"
"""The text of the user entry claude writes when an interrupt (Esc, Ctrl+C, "No" at a
permission dialog) ends a turn: ``… for tool use]`` or ``…]``."""

TRANSCRIPT_TYPES: frozenset[bytes] = frozenset(
    {b"user", b"assistant", b"system", b"queue-operation"}
)
"""Transcript entry types worth reading and recording: the conversation, its ``system``
markers and the prompt queue. The rest is bookkeeping (``api-request-shape`` holds the
whole system prompt), ~90% of the bytes."""

RESUME_HINT_FLAGS_ENV = "CLAUDE_CODE_RELAUNCH_RESUME_HINT_FLAGS"
"""The variable claude reads (once, then unsets) for the flags of its parting hint
(``claude FLAGS --resume ID``) in place of its own arguments. Without it claude lists its
own arguments, our ``--settings FILE`` first: a path, so the flags are printed only if the
whole line fits the terminal (otherwise none at all), and they would name a file that is
gone. claude takes the value only if parsing it as arguments gives it back unchanged."""

_TYPE_MARKER = re.compile(
    rb'"type"\s*:\s*"(?:%s)"' % b"|".join(re.escape(kind) for kind in sorted(TRANSCRIPT_TYPES))
)


def transcript_line_may_matter(line: bytes) -> bool:
    """A byte-level pre-check: can this transcript line be of a :data:`TRANSCRIPT_TYPES`
    type? (A ``"type": "…"`` with its quotes unescaped is JSON structure, never string
    text.) False lines are skipped unparsed."""
    return _TYPE_MARKER.search(line) is not None


def is_interrupt_marker(entry: Mapping[str, Any]) -> bool:
    """Whether a transcript entry is claude's own interrupt marker: a ``user`` entry whose
    content is one text block starting :data:`INTERRUPT_PREFIX` (a prompt the person typed
    is a plain string, so typing the same words cannot pass for it)."""
    if entry.get("type") != "user" or entry.get("rowSource", "harness") != "harness":
        return False
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or len(content) != 1:
        return False
    block = content[0]
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"].startswith(INTERRUPT_PREFIX)
    )


def resume_hint_flags(args: Sequence[str]) -> str:
    """The value of :data:`RESUME_HINT_FLAGS_ENV` for a claude given ``args`` (its arguments
    as the person typed them, a ``--settings`` of theirs included): the arguments themselves,
    which claude parses and takes only if they come back unchanged, so the hint lists what
    plain claude would list. A prompt at the end (an argument with a space) is left out, as
    claude leaves it out; any other argument with a space, or an empty one, cannot survive
    being joined with spaces: then "" (no flags, which is what claude makes of such a value)."""
    kept = list(args)
    if kept and _has_space(kept[-1]):
        kept.pop()
    if any(not arg or _has_space(arg) for arg in kept):
        return ""
    return " ".join(kept)


def _has_space(arg: str) -> bool:
    return any(char.isspace() for char in arg)


WAITED_EVENTS: frozenset[str] = frozenset({"SessionEnd"})
"""Events whose command hook claude waits for (not ``async``) even where the others are
async: claude exits right after them, and kills what is still running of its async hooks
then (a StopFailure's was lost so). claude gives its SessionEnd hooks 1.5 s in all
(``CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS``) and shows no spinner there."""

PRINT_WAITED_EVENTS: frozenset[str] = WAITED_EVENTS | {"Stop", "StopFailure"}
"""In print mode claude exits with the turn: the turn's last hooks are waited for too.
The others stay async (a hook claude waits for costs the turn a bash's start, 5-100 ms
on a loaded machine; an async one is long done by the end)."""


def prints(args: Sequence[str]) -> bool:
    """Whether claude given ``args`` runs in print mode (``-p``/``--print``): no screen,
    and it exits as soon as the turn ends."""
    return any(arg in ("-p", "--print") for arg in args)


MAX_TASKS = 256
"""Running tasks read from one ``background_tasks`` list at most."""

_TASK_ID = re.compile(r"<task-id>([^<]{1,200})</task-id>")


def running_tasks(tasks: object) -> dict[str, str] | None:
    """The tasks a Stop's ``background_tasks`` lists as ``running``: id -> type (``shell``,
    ``subagent``, or whatever claude calls a new kind); None if it is not a list (no
    opinion)."""
    if not isinstance(tasks, list):
        return None
    running: dict[str, str] = {}
    for task in tasks:
        if (
            isinstance(task, dict)
            and isinstance(task.get("id"), str)
            and task.get("status") == "running"
            and len(running) < MAX_TASKS
        ):
            kind = task.get("type")
            running[task["id"]] = kind if isinstance(kind, str) else ""
    return running


def task_notification_id(prompt: object) -> str | None:
    """The task whose end a ``<task-notification>`` prompt announces (its ``<task-id>``)."""
    if not isinstance(prompt, str) or not prompt.startswith("<task-notification>"):
        return None
    found = _TASK_ID.search(prompt, 0, 4096)
    return found.group(1) if found else None


def _user_content(entry: Mapping[str, Any]) -> object:
    message = entry.get("message")
    return message.get("content") if isinstance(message, dict) else None


def background_launch_id(entry: Mapping[str, Any]) -> str | None:
    """The task a transcript ``user`` entry (a tool result) says was started in the
    background: a Bash ``run_in_background`` (``toolUseResult.backgroundTaskId``) or a
    subagent launched asynchronously (``isAsync`` with its ``agentId``)."""
    result = entry.get("toolUseResult") if entry.get("type") == "user" else None
    if not isinstance(result, dict):
        return None
    task = result.get("backgroundTaskId")
    if task is None and result.get("isAsync") is True:
        task = result.get("agentId")
    return task if isinstance(task, str) and task else None


def transcript_task_end(entry: Mapping[str, Any]) -> str | None:
    """The task whose end a transcript entry announces: the ``<task-notification>`` prompt
    claude queues (``queue-operation`` ``enqueue``) and then sends (a ``user`` entry)."""
    kind = entry.get("type")
    if kind == "queue-operation":
        return task_notification_id(entry.get("content"))
    return task_notification_id(_user_content(entry)) if kind == "user" else None


def background_command_id(post: Mapping[str, Any]) -> str | None:
    """The task id of a Bash command a PostToolUse says was started in the background
    (``run_in_background``; claude answers at once with a ``backgroundTaskId``)."""
    if post.get("tool_name") != "Bash":
        return None
    tool_input, response = post.get("tool_input"), post.get("tool_response")
    if not isinstance(tool_input, dict) or tool_input.get("run_in_background") is not True:
        return None
    task = response.get("backgroundTaskId") if isinstance(response, dict) else None
    return task if isinstance(task, str) and task else None


def hook_settings(
    url: str,
    *,
    command: str | None = None,
    events: tuple[str, ...] = HOOK_EVENTS,
    timeout: int = HOOK_TIMEOUT,
    printing: bool = False,
) -> dict[str, Any]:
    """The ``--settings`` document that sends each of ``events`` to us (no ``matcher``:
    every tool matches; :data:`FILE_LED_MATCHERS` for :data:`FILE_LED_EVENTS`): as a
    command hook running ``command`` (:func:`script_command` or :func:`poster_command`) if
    given — ``async``, so claude waits for none and its spinner names one only while
    claude starts it, but for those of :data:`WAITED_EVENTS`, or of
    :data:`PRINT_WAITED_EVENTS` when ``printing`` — else as an HTTP hook to ``url``
    (``http://127.0.0.1:PORT/SECRET/hook``), which claude waits for and names all the
    while, its secret sent in :data:`HOOK_SECRET_HEADER`, never in the URL claude prints.
    SessionStart needs ``command`` (claude runs no HTTP hook for it): ValueError without
    one."""
    if command is None and "SessionStart" in events:
        raise ValueError("SessionStart can only be a command hook")
    hooks: dict[str, Any] = {}
    for event in events:
        hook: dict[str, Any]
        if command is None:
            hook = _http_hook(url, timeout)
        else:
            wait = event in (PRINT_WAITED_EVENTS if printing else WAITED_EVENTS)
            hook = {"type": "command", "command": command, "async": not wait, "timeout": timeout}
        group: dict[str, Any] = {"hooks": [hook]}
        if events == FILE_LED_EVENTS:
            group["matcher"] = FILE_LED_MATCHERS[event]
        hooks[event] = [group]
    return {"hooks": hooks}


_SECRET_URL = re.compile(r"(http://127\.0\.0\.1:\d{1,5})/([A-Za-z0-9_-]+)/hook")


def _http_hook(url: str, timeout: int) -> dict[str, Any]:
    """An HTTP hook to ``url``, the secret in its path moved into a header."""
    match = _SECRET_URL.fullmatch(url)
    if match is None:
        raise ValueError("not a loopback hook URL with a secret")  # the URL is not said
    origin, secret = match.groups()
    return {
        "type": "http",
        "url": f"{origin}/hook",
        "headers": {HOOK_SECRET_HEADER: secret},
        "timeout": timeout,
    }


def with_hooks(
    settings: Mapping[str, Any],
    url: str,
    *,
    command: str | None = None,
    events: tuple[str, ...] = HOOK_EVENTS,
    printing: bool = False,
) -> dict[str, Any]:
    """The user's own settings document (from a ``--settings`` they gave claude) with our
    hooks for ``events`` (:func:`hook_settings`) added after theirs: claude takes one
    ``--settings``, the last one given."""
    merged = dict(settings)
    theirs = merged.get("hooks")
    hooks = dict(theirs) if isinstance(theirs, dict) else {}
    for event, groups in hook_settings(url, command=command, events=events, printing=printing)[
        "hooks"
    ].items():
        existing = hooks.get(event)
        hooks[event] = [*(existing if isinstance(existing, list) else []), *groups]
    merged["hooks"] = hooks
    return merged
