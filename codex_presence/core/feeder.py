"""The one interface every client's mapping implements: a *feeder* of the activity signal.

Like httpx's transports (one interface, several implementations), each client's mapping
(its traffic in, activity transitions out) is a :class:`Feeder`, and the code that replays,
words or records a session talks to that interface only, never to a client by name; which
feeder a recording's source belongs to is the registry's (:mod:`codex_presence.core.clients`).

A feeder is sans-I/O and is fed **events with their time** (seconds, any monotonic
origin): :meth:`Feeder.feed` a parsed message of one of its sources, :meth:`Feeder.feed_raw`
a line as it crossed the wire (a client that frames its own bytes parses it; one that has
none counts it as not JSON), :meth:`Feeder.feed_connection` a recording's connection line.
Each returns the **transitions** it caused. A feeder that needs time to pass (a view it
adopts once it has held) says when by its :attr:`Feeder.deadline`, and its shell (or the
replay) calls :meth:`Feeder.tick` then; one that needs none has no deadline. It ends with
:meth:`Feeder.close` and the cause (end of stream, the client's hang-up, a gap): every
handle closes. It keeps :attr:`Feeder.stats` (lines seen, of them not JSON), the count of
session messages it was fed (:attr:`Feeder.messages`), the names it does not know
(:attr:`Feeder.unknowns`), and its **background** count (work left running, never working
or blocked: :mod:`codex_presence.core.activity`).

Standard library only at import: a relay loads its pre-filter (which shares this module's
vocabulary of connection events) before anything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from codex_presence.core.activity import ActivitySignal, Transition

__all__ = [
    "CONNECTION_EVENTS",
    "MAX_LINE",
    "ConnectionEvent",
    "Feeder",
    "FeederStats",
    "JsonSourcesFeeder",
    "JsonSourcesStats",
    "Unknown",
]

MAX_LINE = 16 * 1024 * 1024
"""Longest line (bytes) a feeder is given; longer ones are relayed, never analysed (a
recording keeps only their size, and a replay skips them as live)."""

ConnectionEvent = Literal["open", "hangup", "lost"]
"""What happened to a client connection of a relayed session: opened, ended by the client's
close (a hang-up), or ended without one (dropped)."""

CONNECTION_EVENTS: tuple[ConnectionEvent, ...] = ("open", "hangup", "lost")


@dataclass(frozen=True, slots=True)
class Unknown:
    """A name this version of a feeder does not classify, seen on the wire."""

    kind: str
    """What kind of name it is, in the client's words (``server request method``, …)."""
    name: str


class FeederStats(Protocol):
    """What every feeder counts of what it was fed (each counts more of its own)."""

    lines: int
    """Entries fed: messages, raw lines, lines of a source not its own."""
    not_json: int
    """Of them, lines that were not JSON."""


@dataclass(slots=True)
class JsonSourcesStats:
    """What a :class:`JsonSourcesFeeder` (a hook-driven client's mapping) saw and ignored,
    for debug logs, tests and ``replay``; each client's adds its own counts."""

    lines: int = 0
    not_json: int = 0
    hooks: int = 0
    ignored: int = 0
    wrong_shape: int = 0
    late: int = 0


class Feeder(Protocol):
    """A client's mapping, as the shared code sees it (see the module doc)."""

    @property
    def state(self) -> str:
        """``idle``, ``working`` or ``blocked``."""
        ...

    @property
    def background(self) -> int:
        """Work left running (never working or blocked)."""
        ...

    @property
    def stats(self) -> FeederStats: ...

    @property
    def messages(self) -> int:
        """Messages of a session fed so far (none: what was fed held no session)."""
        ...

    @property
    def unknowns(self) -> set[Unknown]:
        """Names seen that this version does not classify (a replay warns of each)."""
        ...

    @property
    def changes_possible(self) -> bool:
        """Whether any message fed could change the state (a replay says when none could)."""
        ...

    @property
    def deadline(self) -> float | None:
        """When :meth:`tick` must be called, if the feeder waits on time; else None."""
        ...

    def feed(self, source: str, message: object, t: float) -> list[Transition]:
        """One parsed message of ``source``, seen ``t`` seconds in."""
        ...

    def feed_raw(self, source: str, line: bytes, t: float) -> list[Transition]:
        """One line of ``source`` as it crossed the wire, unparsed."""
        ...

    def feed_connection(
        self, connection: int, event: ConnectionEvent, t: float
    ) -> list[Transition]:
        """Client connection ``connection`` (counted from 1) was opened, hung up or lost."""
        ...

    def tick(self, t: float) -> Transition | None:
        """The time is ``t``: what the deadline brings, if due."""
        ...

    def close(self, cause: str = "eof") -> Transition | None:
        """The end, for ``cause``: every handle closes."""
        ...


class JsonSourcesFeeder:
    """What a feeder whose every source is JSON (hooks, files) shares: its state, raw lines
    counted and ignored, and no connections (a relay's only). Its dataclass has the
    ``signal`` and ``stats`` it reads."""

    signal: ActivitySignal
    stats: FeederStats

    @property
    def state(self) -> str:
        return self.signal.state.value

    def feed_raw(self, source: str, line: bytes, t: float) -> list[Transition]:
        """A line that is not JSON (every source of this client is): counted, ignored."""
        self.stats.lines += 1
        self.stats.not_json += 1
        return []

    def feed_connection(
        self, connection: int, event: ConnectionEvent, t: float
    ) -> list[Transition]:
        """No connection lines in a hook-fed session: nothing."""
        return []
