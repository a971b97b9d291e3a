"""What a codex session's messages mean to a person: the words for a transition's cause
(:func:`codex_words`, the codex line of :func:`codex_presence.core.wording.event_words`),
and a running account of what a codex session is doing (:class:`Narrator`).

:func:`codex_words` reads the message itself where its name alone does not tell (a status
change that raised the waiting flag, a turn that was interrupted). :class:`Narrator`
follows a codex session message by message and says, in a sentence, what the session is
doing at each step that matters ("codex asks to run `make` — waiting for approval"): the
demo's commentary. Pure: messages in, words out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codex_presence._wire import printable
from codex_presence.core.codex.protocol import ACTIVE_STATUS, BLOCKING_REQUESTS, WAITING_FLAGS

__all__ = ["Narrator", "codex_words"]

_COMMAND_APPROVALS = frozenset({"item/commandExecution/requestApproval", "execCommandApproval"})
_FILE_APPROVALS = frozenset({"item/fileChange/requestApproval", "applyPatchApproval"})
_APPROVALS = _COMMAND_APPROVALS | _FILE_APPROVALS | {"item/permissions/requestApproval"}
_REQUESTS = {
    "item/commandExecution/requestApproval": "approval requested (a command)",
    "execCommandApproval": "approval requested (a command)",
    "item/fileChange/requestApproval": "approval requested (a file change)",
    "applyPatchApproval": "approval requested (a file change)",
    "item/permissions/requestApproval": "permissions requested",
    "item/tool/requestUserInput": "question asked",
    "mcpServer/elicitation/request": "an MCP server asks for input",
}
_TURN_ENDS = {
    "completed": "turn completed",
    "interrupted": "turn interrupted",
    "failed": "turn failed",
}
_THREAD_STATUSES = {
    "idle": "turn over",
    "systemError": "turn over: thread error",
    "notLoaded": "thread unloaded",
}
_ITEMS = {
    "commandExecution": "command",
    "fileChange": "file change",
    "mcpToolCall": "MCP tool call",
    "dynamicToolCall": "tool call",
    "collabAgentToolCall": "subagent",
    "subAgentActivity": "subagent",
    "webSearch": "web search",
    "imageView": "image view",
    "imageGeneration": "image generation",
    "agentMessage": "answer",
    "reasoning": "reasoning",
}
_OTHER = {
    "turn/started": "turn started",
    "thread/started": "thread started",
    "thread/closed": "thread closed",
    "serverRequest/resolved": "request resolved",
}
_DECISIONS = {
    "accept": "approved",
    "acceptForSession": "approved for the session",
    "approved": "approved",
    "approved_for_session": "approved for the session",
    "decline": "declined",
    "denied": "declined",
    "cancel": "cancelled",
    "abort": "cancelled",
    "timed_out": "timed out",
}


def _get(value: object, *keys: str) -> Any:
    """``value[k1][k2]…``, or None where any step is missing or not an object."""
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _word(value: object) -> str:
    """``value`` if it is a string, else "" (a key no table holds)."""
    return value if isinstance(value, str) else ""


def _flags(params: object) -> set[str]:
    """The ``activeFlags`` of a thread status change."""
    flags = _get(params, "status", "activeFlags")
    return {f for f in flags if isinstance(f, str)} if isinstance(flags, list) else set()


def _decision(result: object) -> str:
    """What a person made of a request: the decision (or an elicitation's action) in the
    client's answer."""
    choice = _get(result, "decision")
    if choice is None:
        choice = _get(result, "action")
    if isinstance(choice, Mapping):  # {"acceptWithExecpolicyAmendment": …}, {"denied": …}
        choice = _word(next(iter(choice), None))
        if choice.startswith(("accept", "approved", "apply")):
            return "approved"
    return _DECISIONS.get(_word(choice), "answered")


def codex_words(cause: str, message: object, previous: str) -> str | None:
    """The event a person knows for a codex transition's ``cause``, out of the ``previous``
    state; ``message`` (the one that caused it, if at hand) tells a status change, a turn's
    end or an answer apart. None: not a cause of codex's."""
    if cause in _REQUESTS:
        return _REQUESTS[cause]
    params = _get(message, "params")
    if cause == "thread/status/changed":
        status = _word(_get(params, "status", "type"))
        if status == ACTIVE_STATUS:
            flags = _flags(params)
            if "waitingOnApproval" in flags:
                return "approval requested"
            if flags & WAITING_FLAGS:
                return "input requested"
            return "answered: working again" if previous == "blocked" else "thread active"
        return _THREAD_STATUSES.get(status, "thread status changed")
    if cause == "turn/completed":
        return _TURN_ENDS.get(_word(_get(params, "turn", "status")), "turn ended")
    if cause in ("item/started", "item/completed"):
        kind = _get(params, "item", "type")
        what = _ITEMS.get(kind, printable(kind)) if isinstance(kind, str) else "item"
        if cause == "item/completed":
            return f"{what} finished"
        return f"{what} started: working again" if previous == "idle" else f"{what} started"
    if cause == "response":
        return _decision(_get(message, "result"))
    return _OTHER.get(cause)


class Narrator:
    """What a codex session is doing, in a sentence at each step that matters, from its
    messages as they cross the wire (:meth:`feed`)."""

    def __init__(self, *, width: int = 72) -> None:
        self.width = width
        """The longest quotation of a prompt, a command or an answer, in characters."""
        self._asked: dict[int | str, str] = {}
        """Server requests waiting on a person, by id: what was asked, in words."""
        self._waiting: set[str] = set()
        """Threads whose status says they wait on a person."""
        self._prompt = ""

    def feed(self, direction: str, message: object) -> str | None:
        """The sentence for ``message`` (from ``"client"`` or ``"server"``), or None."""
        if not isinstance(message, Mapping):
            return None
        raw_method = message.get("method")
        method = _word(raw_method)
        params = message.get("params")
        if direction == "client":
            if method == "turn/start":
                texts = [
                    i.get("text") for i in _get(params, "input") or () if isinstance(i, Mapping)
                ]
                self._prompt = " ".join(t for t in texts if isinstance(t, str))
                return f"the user asks: {self._quote(self._prompt)}" if self._prompt else None
            answered = message.get("id")
            if raw_method is None and isinstance(answered, int | str) and answered in self._asked:
                return f"{self._asked.pop(answered)} {_decision(message.get('result'))}"
            return None
        if method in BLOCKING_REQUESTS:
            return self._request(method, message.get("id"), params)
        if method == "turn/started":
            return f"codex works on {self._quote(self._prompt)}" if self._prompt else "codex works"
        if method == "turn/completed":
            return _TURN_ENDS.get(_word(_get(params, "turn", "status")), "turn ended")
        if method == "thread/status/changed":
            thread = _word(_get(params, "threadId"))
            if _flags(params) & WAITING_FLAGS:
                self._waiting.add(thread)
            else:
                self._waiting.discard(thread)
            return None
        item = _get(params, "item")
        kind = _get(item, "type")
        if method == "item/started" and kind == "commandExecution":
            if _word(_get(params, "threadId")) in self._waiting:
                return None  # its approval request comes next, and says so
            return f"codex runs {self._code(_get(item, 'command'))}"
        if method == "item/completed" and kind == "commandExecution":
            code = _get(item, "exitCode")
            return "the command finished" + (f" (exit {code})" if isinstance(code, int) else "")
        if method == "item/completed" and kind == "agentMessage":
            text = _get(item, "text")
            return f"codex says: {self._quote(text)}" if isinstance(text, str) and text else None
        return None

    def _request(self, method: str, request_id: object, params: object) -> str:
        """What a request asks of a person, remembered under its id for the answer."""
        if method in _COMMAND_APPROVALS:
            what, asks = "the command", f"to run {self._code(_get(params, 'command'))}"
        elif method in _FILE_APPROVALS:
            what, asks = "the file change", "to change files"
        elif method == "item/permissions/requestApproval":
            what, asks = "the permissions", "for more permissions"
        elif method == "mcpServer/elicitation/request":
            server = _get(params, "serverName")
            who = printable(server) if isinstance(server, str) else "an MCP server"
            what, asks = f"the request of {who}", f"for input (for {who})"
        else:
            what, asks = "the question", "a question"
        if isinstance(request_id, int | str):
            self._asked[request_id] = what
        waits = "approval" if method in _APPROVALS else "an answer"
        return f"codex asks {asks} — waiting for {waits}"

    def _quote(self, text: str) -> str:
        text = printable(" ".join(text.split()))
        cut = text if len(text) <= self.width else text[: self.width - 1] + "…"
        return f"“{cut}”"

    def _code(self, command: object) -> str:
        """A command as codex shows it, without the shell's wrapper."""
        if isinstance(command, list):
            command = " ".join(str(part) for part in command)
        if not isinstance(command, str):
            return "a command"
        for wrapper in ("/bin/bash -lc ", "bash -lc ", "/bin/sh -c ", "sh -c ", "/bin/zsh -lc "):
            if command.startswith(wrapper):
                inner = command[len(wrapper) :]
                if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
                    command = inner[1:-1]
                break
        command = printable(" ".join(command.split()))
        cut = command if len(command) <= self.width else command[: self.width - 1] + "…"
        return f"`{cut}`"
