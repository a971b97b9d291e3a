"""What a session's transitions mean to a person: the words for a transition's cause.

A transition's cause is the name of the message that made it (a JSON-RPC method, a hook's
name): exact, and what ``replay --json`` and the fixtures' expectations keep.
:func:`event_words` says the same as an event a person knows ("approval requested", "turn
completed"): each client's words say it (the registry, :mod:`codex_presence.core.clients`,
holds them, reading the message itself where its name alone does not tell), and the causes
every session shares (its end, a recording that stops, a hang-up) are said here. Pure:
causes in, words out.
"""

from __future__ import annotations

from codex_presence._wire import printable
from codex_presence.core.clients import CLIENTS

__all__ = ["event_words"]

_SHARED = {
    "eof": "session ended",
    "stopped": "the recording stops mid-session",
    "hangup": "the client hung up",
}


def event_words(cause: str, message: object = None, *, previous: str = "idle") -> str:
    """The event a person knows for a transition's ``cause``, out of the ``previous``
    state; ``message`` (the one that caused it, if at hand) tells the cases its name does
    not apart. A cause no client has words for is said as it is."""
    for client in CLIENTS:
        words = client.words(cause, message, previous)
        if words is not None:
            return words
    return _SHARED.get(cause, printable(cause))  # a name from the wire: shown, never acted on
