"""The agent record a runner reports: what leaves the machine about its agent, at each
share level, and in what bounds.

The record (``agent`` in ``POST /presence/activity``, issue 32's contract) says which
client runs, its version, the host, the project and, while blocked, what the agent waits
on. A person decides how much of it leaves their machine (:class:`Share`, ``--share``):

* ``none``: no record at all (the state alone);
* ``default``: ``client``, ``version``, ``host``, ``project`` and ``waits`` with its
  ``kind``, ``tool`` and ``program`` (the command's program name, ``make``: never its
  arguments, which can hold a path, a host or a secret);
* ``detail``: also ``waits.detail``, the command (or the question, the file, the message)
  cut to one short line.

Every string is made one clean line before it is sent (:func:`one_line`): control and
format characters go (a line break becomes a space), and it is cut to its bound
(:data:`MAX_FIELD`, :data:`MAX_DETAIL`) with an ellipsis; the broker refuses what is
still wrong, so a record built here is always taken. Pure: the caller says the host and
the project (:func:`record` takes them as plain strings).

The same record comes back to the readers (``agents`` in the roster): :func:`agent_words`
and :func:`waits_words` say it for people ("claude in api-server", "approve `make`"), the
one wording the roster text, the MCP tool and the notifications share (the page has its
copy in ``roster-words.js``). They read whatever a broker sent: a value of the wrong type
says nothing, and the caller escapes the text it shows.
"""

from __future__ import annotations

import enum
import re
import shlex
import unicodedata
from typing import Any

import orjson

from codex_presence._wire import AGENT_MAX_BYTES, WAIT_KINDS
from codex_presence.core.activity import Waits

__all__ = [
    "MAX_DETAIL",
    "MAX_FIELD",
    "Share",
    "agent_words",
    "command_line",
    "described",
    "one_line",
    "program_of",
    "record",
    "waits_words",
]

MAX_FIELD = 64
"""Characters of ``version``, ``host``, ``project``, ``waits.tool``, ``waits.program``."""
MAX_DETAIL = 120
"""Characters of ``waits.detail``."""
_CLIENT = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")


class Share(enum.Enum):
    """How much of the agent record leaves the machine (``--share``)."""

    NONE = "none"
    DEFAULT = "default"
    DETAIL = "detail"


def one_line(text: str, most: int) -> str:
    """``text`` as one clean line of at most ``most`` characters: whitespace runs (line
    breaks and tabs included) become one space, other control and format characters go
    (an escape sequence or a bidi override cannot act where it is shown), and what is
    longer is cut with ``…``."""
    kept = []
    for char in text:
        if char.isspace():
            kept.append(" ")
        elif not unicodedata.category(char).startswith("C"):
            kept.append(char)
    line = " ".join("".join(kept).split())
    return line if len(line) <= most else line[: most - 1].rstrip() + "…"


def command_line(command: str | tuple[str, ...]) -> str:
    """The command as one shell line (an argument vector quoted as a shell would)."""
    return command if isinstance(command, str) else shlex.join(command)


_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
_PREFIXES = frozenset({"sudo", "env", "nice", "nohup", "time", "exec", "command", "timeout"})
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "(", ")"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: the words as they come
        return line.split()


def program_of(command: str | tuple[str, ...]) -> str | None:
    """The program a command runs, by name: ``make`` for ``make test``, for
    ``bash -lc 'cd api && make test'``, for ``CI=1 sudo /usr/bin/make``; None when there
    is none to name. The first command that is not a ``cd``."""
    words = list(command) if isinstance(command, tuple) else _words(command)
    for _ in range(4):  # a shell's script may run a shell
        segment: list[str] = []
        for word in [*words, ";"]:
            if word not in _OPERATORS:
                segment.append(word)
                continue
            while segment and (
                _ASSIGNMENT.match(segment[0])
                or segment[0] in _PREFIXES
                or (segment[0].startswith("-") and len(segment) > 1)
            ):
                segment.pop(0)
            if segment and segment[0] not in ("cd", "pushd"):
                break
            segment = []
        if not segment:
            return None
        name = segment[0].rsplit("/", 1)[-1]
        script = _script(segment) if name in _SHELLS else None
        if script is None:
            return one_line(name, MAX_FIELD) or None
        words = _words(script)
    return None


def _script(words: list[str]) -> str | None:
    """The script of ``sh -c SCRIPT`` (``-lc``, ``-ec``…), if that is how it runs."""
    for i, word in enumerate(words[1:], 1):
        if not word.startswith("-"):
            return None
        if not word.startswith("--") and "c" in word and i + 1 < len(words):
            return words[i + 1]
    return None


def _waits(waits: Waits, share: Share) -> dict[str, str]:
    said: dict[str, str] = {"kind": waits.kind if waits.kind in WAIT_KINDS else "other"}
    if waits.tool:
        tool = one_line(waits.tool, MAX_FIELD)
        if tool:
            said["tool"] = tool
    if waits.command is not None and waits.kind == "command":
        program = program_of(waits.command)
        if program:
            said["program"] = program
    if share is Share.DETAIL and waits.command is not None:
        detail = one_line(command_line(waits.command), MAX_DETAIL)
        if detail:
            said["detail"] = detail
    return said


def record(
    *,
    share: Share,
    client: str,
    version: str | None = None,
    host: str | None = None,
    project: str | None = None,
    waits: Waits | None = None,
) -> dict[str, Any] | None:
    """The ``agent`` object to send at ``share`` (None at :attr:`Share.NONE`): ``client``
    (a short token: what is not one is ``other``), each of the rest only when known, each
    bounded and one clean line; ``waits`` only while blocked."""
    if share is Share.NONE:
        return None
    agent: dict[str, Any] = {"client": client if _CLIENT.fullmatch(client) else "other"}
    for key, value in (("version", version), ("host", host), ("project", project)):
        if value:
            text = one_line(value, MAX_FIELD)
            if text:
                agent[key] = text
    if waits is not None:
        agent["waits"] = _waits(waits, share)
    return _within_bytes(agent)


_SHRINKABLE = (("waits", "detail"), (None, "project"), (None, "host"), (None, "version"))


def _within_bytes(agent: dict[str, Any]) -> dict[str, Any]:
    """``agent``, its longest texts cut until it encodes in the wire's ``AGENT_MAX_BYTES``
    (every field at its bound, or wide characters, can pass it): the detail first, then
    the project, the host, the version."""
    for holder, key in _SHRINKABLE:
        excess = len(orjson.dumps(agent)) - AGENT_MAX_BYTES
        if excess <= 0:
            break
        fields = agent.get(holder) if holder else agent
        text = fields.get(key) if isinstance(fields, dict) else None
        if not isinstance(fields, dict) or not isinstance(text, str):
            continue
        keep = len(text)
        while keep > 0 and len(text[:keep].encode()) > len(text.encode()) - excess - 3:
            keep -= 1
        if keep <= 1:
            del fields[key]
        else:
            fields[key] = one_line(text, keep)
    return agent


def _said(obj: object, key: str) -> str | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) and value else None


def described(agent: object) -> bool:
    """Whether an agent of the roster says what it is (its runner shared a record)."""
    return _said(agent, "client") is not None


def agent_words(agent: object) -> str:
    """``claude in api-server`` (the client, and where), ``claude`` or ``an agent``, from an
    agent record (one of the roster's ``agents``)."""
    client = _said(agent, "client") or "an agent"
    project = _said(agent, "project")
    return f"{client} in {project}" if project else client


_ASKS = {
    "file_change": "approve a file change",
    "question": "answer a question",
    "permission": "grant a permission",
    "elicitation": "answer a form",
}


def waits_words(waits: object) -> str:
    """What a person must do: ``approve `make``` (by program name; by the command itself
    when the runner shared it), ``approve a file change``, ``answer a question``,
    ``grant `WebFetch```…, or ``needs input`` when the record does not say."""
    kind = _said(waits, "kind")
    detail, program, tool = (_said(waits, k) for k in ("detail", "program", "tool"))
    if kind == "command":
        shown = detail or program
        return f"approve `{shown}`" if shown else "approve a command"
    if kind == "permission" and tool:
        return f"grant `{tool}`"
    if kind == "elicitation" and tool:
        return f"answer `{tool}`"
    said = _ASKS.get(kind or "")
    if said is None:
        return "needs input"
    return f"{said}: {detail}" if detail else said
