"""The registry of clients: a recording's source to its client's feeder and words.

One entry per client (:data:`CLIENTS`): the sources its sessions record (a recording line's
``from``), how to make its feeder (:class:`~codex_presence.core.feeder.Feeder`, imported
when first needed: a feeder may load more than a reader of recordings wants), its words for
people (:func:`~codex_presence.core.wording.event_words` asks each client in turn), what its
messages are called (``replay`` says which it found none of), and, where its recordings are
long, the scan that finds the lines of one that may change the state
(:func:`~codex_presence.core.recording.read_relevant_entries`). The replay, the timeline,
the recording format and the wording read this and name no client; a new client is one
entry here (``docs/architecture.md``, "Adding a client").
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from codex_presence.core.claude.protocol import PACKAGE as CLAUDE_PACKAGE
from codex_presence.core.claude.protocol import SOURCES as CLAUDE_SOURCES
from codex_presence.core.claude.words import claude_words
from codex_presence.core.codex.protocol import PACKAGE as CODEX_PACKAGE
from codex_presence.core.codex.words import codex_words
from codex_presence.core.feeder import Feeder
from codex_presence.core.gemini.protocol import PACKAGE as GEMINI_PACKAGE
from codex_presence.core.gemini.protocol import SOURCES as GEMINI_SOURCES
from codex_presence.core.gemini.words import gemini_words

__all__ = [
    "CLIENTS",
    "PLAIN_OUTPUT",
    "SOURCES",
    "Client",
    "client_named",
    "client_of",
    "where_to_get",
]

Words = Callable[[str, object, str], "str | None"]
"""``(cause, message, previous state)`` to the event a person knows, None if not the
client's cause."""


@dataclass(frozen=True, slots=True)
class Client:
    """One client, as the shared code sees it."""

    name: str
    """The runner's name (``codex-presence NAME``)."""
    sources: frozenset[str]
    """A recording line's ``from`` values that are this client's."""
    feeder: str
    """``module:Class`` of its feeder, made by :meth:`new_feeder` (imported then)."""
    words: Words
    messages: str
    """What its messages are called, for a person ("app-server (JSON-RPC)")."""
    package: str | None = None
    """Its npm package, whose ``package.json`` beside the program says the version
    (:mod:`codex_presence.agent.installed`) for a session that never says it."""
    install: str | None = None
    """Where a person gets it, said when its program (:attr:`name`) is not found."""
    candidates: str | None = None
    """``module:function`` of the scan of its long recordings: ``function(recording)``
    gives the pattern that starts a line which may change the state (``recording`` False:
    the client's plain output, not a recording); None: every line of one matters."""

    def new_feeder(self) -> Feeder:
        return cast(Feeder, _load(self.feeder)())

    def scan(self, recording: bool) -> re.Pattern[bytes] | None:
        """The pattern of :attr:`candidates`, or None."""
        if self.candidates is None:
            return None
        return cast("re.Pattern[bytes]", _load(self.candidates)(recording))


def _load(where: str) -> Callable[..., object]:
    module, name = where.split(":")
    return cast("Callable[..., object]", getattr(importlib.import_module(module), name))


CLIENTS: tuple[Client, ...] = (
    Client(
        "codex",
        frozenset({"client", "server"}),
        "codex_presence.core.codex.mapping:CodexMapping",
        codex_words,
        "app-server (JSON-RPC)",
        CODEX_PACKAGE,
        "install codex with npm install -g @openai/codex, or give its path; bash "
        "tests/run.sh keeps its copies in ~/.cache/codex-presence/codex-VERSION/",
        "codex_presence.core.codex.prefilter:recording_candidates",
    ),
    Client(
        "claude",
        frozenset(CLAUDE_SOURCES),
        "codex_presence.core.claude.mapping:ClaudeMapping",
        claude_words,
        "Claude Code",
        CLAUDE_PACKAGE,
        "install Claude Code with npm install -g @anthropic-ai/claude-code, or give its "
        "path; bash tests/run.sh keeps its copy in "
        "~/.cache/codex-presence/claude-code-VERSION/node_modules/.bin/claude",
    ),
    Client(
        "gemini",
        GEMINI_SOURCES,
        "codex_presence.core.gemini.mapping:GeminiMapping",
        gemini_words,
        "Gemini CLI",
        GEMINI_PACKAGE,
        "install Gemini CLI with npm install -g @google/gemini-cli, or give its path; bash "
        "tests/run.sh keeps its copy in "
        "~/.cache/codex-presence/gemini-cli-VERSION/node_modules/.bin/gemini",
    ),
)

PLAIN_OUTPUT = CLIENTS[0]
"""The client whose plain output (not a recording: codex app-server's stdout, one message
per line) ``replay`` reads too, and whose feeder replays what names no client's source."""

SOURCES: frozenset[str] = frozenset().union(*(client.sources for client in CLIENTS))
"""Every client's sources: a recording line's ``from`` must be one."""

_BY_SOURCE = {source: client for client in CLIENTS for source in client.sources}
assert len(_BY_SOURCE) == sum(len(client.sources) for client in CLIENTS), "a source is shared"


def client_of(source: object) -> Client | None:
    """The client whose source ``source`` is, if any."""
    return _BY_SOURCE.get(source) if isinstance(source, str) else None


def client_named(name: str) -> Client | None:
    """The client whose runner is ``codex-presence NAME``, if any."""
    return next((c for c in CLIENTS if c.name == name), None)


def where_to_get(program: str) -> str | None:
    """Where to get the client whose program ``program`` (a command's first word, a path
    or a name) is, for a person who does not have it; None for any other program."""
    client = client_named(program.rsplit("/", 1)[-1])
    return None if client is None else client.install
