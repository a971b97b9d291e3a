"""codex-presence: live idle/working/blocked presence for Codex app-server and Claude Code
sessions.

The data path, by subpackage: codex traffic or Claude Code hooks → ``core`` (the sans-I/O
mappings onto the activity signal, the recording format, the report policy) → ``agent``
(``wrap``: the byte-exact relay; ``claude``: the hook server; the activity reporter, the
subscription) → ``broker`` (the reference
presence broker) → ``client`` (the roster, live or as text, and the MCP tool); ``cli`` is
the command line over all of them and ``_wire`` the vocabulary they share. The names
below are the sans-I/O core's.
"""

from codex_presence.core.activity import ActivitySignal, ActivityState, HandleKind, Transition
from codex_presence.core.claude import ClaudeMapping
from codex_presence.core.codex import CodexMapping, Direction, MappingStats
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
