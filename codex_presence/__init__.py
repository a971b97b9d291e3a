"""codex-presence: live idle/working/blocked presence for Codex app-server and Claude Code
sessions.

The data path, by subpackage: codex traffic or Claude Code hooks → ``core`` (the sans-I/O
mappings onto the activity signal, the recording format, the report policy) → ``agent``
(``wrap``: the byte-exact relay; ``claude``: the hook server; the activity reporter, the
subscription) → ``broker`` (the reference
presence broker) → ``client`` (the roster, live or as text, and the MCP tool); ``cli`` is
the command line over all of them and ``_wire`` the vocabulary they share. The names
below are the sans-I/O core's.

They load on first use (PEP 562): the command line imports this package first, and ``wrap``
must spawn its child before anything heavier than the standard library is loaded (the
codex mapping pulls in jsonrpcserver, and with it jsonschema).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: importing typing costs the child's start-up time
if TYPE_CHECKING:
    from typing import Any

    from codex_presence.core.activity import (
        ActivitySignal,
        ActivityState,
        HandleKind,
        Transition,
    )
    from codex_presence.core.claude.mapping import ClaudeMapping
    from codex_presence.core.codex.mapping import CodexMapping, Direction, MappingStats
    from codex_presence.core.recording import Entry, encode_entry, read_entries

__version__ = "0.1.0"

__all__ = [
    "ActivitySignal",
    "ActivityState",
    "ClaudeMapping",
    "CodexMapping",
    "Direction",
    "Entry",
    "HandleKind",
    "MappingStats",
    "Transition",
    "__version__",
    "encode_entry",
    "read_entries",
]

_HOMES = {
    "ActivitySignal": "codex_presence.core.activity",
    "ActivityState": "codex_presence.core.activity",
    "HandleKind": "codex_presence.core.activity",
    "Transition": "codex_presence.core.activity",
    "ClaudeMapping": "codex_presence.core.claude.mapping",
    "CodexMapping": "codex_presence.core.codex.mapping",
    "Direction": "codex_presence.core.codex.mapping",
    "MappingStats": "codex_presence.core.codex.mapping",
    "Entry": "codex_presence.core.recording",
    "encode_entry": "codex_presence.core.recording",
    "read_entries": "codex_presence.core.recording",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
