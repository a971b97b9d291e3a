"""The few names every command needs before anything else loads: a leaf of the package.

``wrap`` reads them before it spawns its child, and loads nothing heavier than the standard
library until then (issue 13); :mod:`codex_presence._wire`, the shared vocabulary, re-exports
them with the rest.
"""

__all__ = ["DEFAULT_BROKER", "DEFAULT_PORT", "TOKEN_ENV"]

DEFAULT_PORT = 8765
DEFAULT_BROKER = f"http://127.0.0.1:{DEFAULT_PORT}"
TOKEN_ENV = "CODEX_PRESENCE_TOKEN"
"""The member token's variable (there is no flag for it: argv is world-readable)."""
