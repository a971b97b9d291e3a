"""The connection registry: how many live SSE subscribers each member has.

A member is *on the wire* while some process holds ``GET /subscribe?name=<self>`` open;
``connected`` counts those streams. ``createdAt`` is when the registry first saw the
member (first attach or first emit), ``lastSeen`` ticks on every attach and every emit
(an authenticated report from the member). Both are unix epoch milliseconds; a member never
seen has 0 for both.

State is per broker process, in memory, as the design says.
"""

from __future__ import annotations

from codex_presence.broker.record import record_class

__all__ = ["Connection", "ConnectionRegistry"]


@record_class
class Connection:
    """One member's connection presence (made at every report in Redis mode)."""

    connected: int = 0
    created_at: int = 0
    last_seen: int = 0


_NEVER = Connection()


class ConnectionRegistry:
    """The connection counts of one broker process, in memory."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, Connection] = {}

    def attach(self, name: str, now_ms: int) -> int:
        old = self._entries.get(name, _NEVER)
        new = Connection(old.connected + 1, old.created_at or now_ms, now_ms)
        self._entries[name] = new
        return new.connected

    def detach(self, name: str) -> int:
        old = self._entries.get(name, _NEVER)
        count = max(0, old.connected - 1)
        self._entries[name] = Connection(count, old.created_at, old.last_seen)
        return count

    def touch(self, name: str, now_ms: int) -> None:
        old = self._entries.get(name, _NEVER)
        self._entries[name] = Connection(old.connected, old.created_at or now_ms, now_ms)

    def get(self, name: str) -> Connection:
        return self._entries.get(name, _NEVER)
