"""codex-presence: live idle/working/blocked presence for Codex app-server sessions.

The data path, in file order: ``_codex`` maps app-server traffic onto the ``_activity``
signal (both sans-I/O); ``_relay`` is the byte-exact stdio proxy that feeds them;
``_recording`` and ``_replay`` write and read sessions; ``_reporter`` tells the broker;
``_broker`` is the reference presence broker.
"""

from codex_presence.core.activity import ActivitySignal, ActivityState, HandleKind, Transition
from codex_presence.core.codex import CodexMapping, Direction, MappingStats
from codex_presence.core.recording import Entry, encode_entry, read_entries

__version__ = "0.1.0"

__all__ = [
    "ActivitySignal",
    "ActivityState",
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
