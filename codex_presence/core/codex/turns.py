"""What the codex mapping remembers of turns that ended, and of threads that never count.

Pure bookkeeping for :mod:`codex_presence.core.codex.mapping` (whose docstring states the rules),
bounded in memory, the oldest entries forgotten first:

* **ended turns**: events that arrive for them later are late and open nothing;
* **revivable turns**, per thread: the ended turns that a new ``item/started`` reopens (the
  revival rule). A thread's set is emptied by its next ``turn/started``, so it holds the
  turns ended since then: usually one, or none;
* **title threads**: the TUI's side threads, which never count.

It also tells the mapping which passive items' ``item/started`` can change nothing: on a
line's bytes (:meth:`TurnMemory.may_revive`), so that the mapping parses only those that
may name a revivable turn, and on a parsed message (:meth:`TurnMemory.revives_nothing`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from codex_presence.core.codex.protocol import PASSIVE_ITEM_TYPES

__all__ = ["TurnMemory"]

MAX_ENDED_TURNS = 4096
MAX_THREADS = 4096
"""Threads remembered with revivable turns, and title threads."""
MAX_REVIVABLE_PER_THREAD = 16


def _turn_needle(turn: str) -> bytes:
    """How codex writes a turn id in an item event's params (serde and orjson escape alike)."""
    return b'"turnId":' + orjson.dumps(turn)


class TurnMemory:
    """Ended turns, revivable turns per thread, title threads."""

    def __init__(self) -> None:
        self._ended: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._revivable: OrderedDict[str, dict[str, None]] = OrderedDict()
        """Per thread, its revivable turns, oldest first."""
        self._needles: tuple[bytes, ...] | None = ()
        """The revivable turns' ids as a line holds them; ``None``: to be recomputed."""
        self.title_threads: OrderedDict[str, None] = OrderedDict()
        """The TUI's title threads (read it as a cheap "are there any?" first)."""

    # -- ended turns ---------------------------------------------------------------------

    def is_ended(self, thread: str, turn: str) -> bool:
        return (thread, turn) in self._ended

    def end(self, thread: str, turns: Iterable[str]) -> None:
        for turn in turns:
            self._ended[(thread, turn)] = None
        while len(self._ended) > MAX_ENDED_TURNS:
            self._ended.popitem(last=False)

    # -- revival -------------------------------------------------------------------------

    def allow_revival(self, thread: str, turns: Iterable[str]) -> None:
        """``turns`` of ``thread`` (ended) may be reopened by a new item."""
        revivable = self._revivable.get(thread, {})
        for turn in turns:
            revivable.pop(turn, None)
            revivable[turn] = None  # the newest last
        if not revivable:
            return
        while len(revivable) > MAX_REVIVABLE_PER_THREAD:
            del revivable[next(iter(revivable))]
        self._revivable[thread] = revivable
        self._revivable.move_to_end(thread)
        while len(self._revivable) > MAX_THREADS:
            self._revivable.popitem(last=False)
        self._needles = None

    def forbid_revival(self, thread: str, turn: str | None = None) -> None:
        """No new item reopens ``turn`` of ``thread`` (or any of its turns, by default)."""
        revivable = self._revivable.get(thread)
        if revivable is None:
            return
        if turn is None:
            del self._revivable[thread]
        else:
            revivable.pop(turn, None)
            if not revivable:
                del self._revivable[thread]
        self._needles = None

    def forbid_all_revival(self) -> None:
        """No new item reopens any turn that ended so far."""
        if self._revivable:
            self._revivable.clear()
            self._needles = None

    def can_revive(self, thread: str, turn: str) -> bool:
        return turn in self._revivable.get(thread, ())

    def revive(self, thread: str, turn: str) -> bool:
        """Reopen an ended turn, if it may be; whether it was."""
        if not self.can_revive(thread, turn):
            return False
        self._ended.pop((thread, turn), None)
        self.forbid_revival(thread, turn)
        return True

    def revives_nothing(self, params: Mapping[str, Any]) -> bool:
        """Whether an ``item/started`` (its params) is of a passive item on a turn it cannot
        revive: it would change nothing, so the mapping does not dispatch it."""
        item = params.get("item")
        kind = item.get("type") if isinstance(item, dict) else None
        if not isinstance(kind, str) or kind not in PASSIVE_ITEM_TYPES:
            return False  # (a type that is not a string: the handler says what is wrong)
        thread, turn = params.get("threadId"), params.get("turnId")
        if not isinstance(thread, str) or not isinstance(turn, str):
            return False  # the handler says what is wrong with it
        return not self.can_revive(thread, turn)

    def may_revive(self, line: bytes) -> bool:
        """Whether ``line`` may name a revivable turn: a superset (the bytes of its id
        anywhere in the line), decided without parsing; one search per revivable turn."""
        needles = self._needles
        if needles is None:
            needles = self._needles = tuple(
                _turn_needle(turn) for turns in self._revivable.values() for turn in turns
            )
        return any(needle in line for needle in needles)

    # -- title threads -------------------------------------------------------------------

    def ignore_thread(self, thread: str) -> None:
        self.forbid_revival(thread)
        self.title_threads[thread] = None
        while len(self.title_threads) > MAX_THREADS:
            self.title_threads.popitem(last=False)

    def is_ignored(self, thread: object) -> bool:
        return isinstance(thread, str) and thread in self.title_threads
