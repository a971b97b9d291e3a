"""The guard every shell runs its activity analysis in: a bug there ends in idle, said once.

The shells (``wrap``'s relay, the TUI's websocket relay, the Claude Code session) feed a
sans-I/O mapping and hand its transitions to observers (the reporter heartbeats a working
or blocked state). The mappings never raise on their input; a bug could. Then the analysis
must stop for the rest of the session (its state is no longer trustworthy), but the last
state the observers got must not stay: a member shown working, heartbeat after heartbeat,
while nothing watches any more, is the stuck state the design forbids. So on the first
exception :class:`AnalysisGuard` logs it with its traceback, closes the mapping, and hands
back one transition to idle from the state the observers last got (cause
:data:`ANALYSIS_FAILED`); from then on it analyses nothing. The session (the bytes, claude)
goes on untouched.

Light at import (the standard library's ``logging`` only): ``wrap``'s pump equips its
analysis with the guard before the mapping is loaded, and a session over by then (``codex
--version``) loads nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

TYPE_CHECKING = False  # see the module's doc
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    from codex_presence.core.activity import ActivityState, Transition

    Outcome: TypeAlias = Transition | Iterable[Transition] | None
    """What an analysis step returns: a transition, several, or none (for type checkers)."""

__all__ = ["ANALYSIS_FAILED", "AnalysisGuard"]

logger = logging.getLogger("codex_presence.analysis")

ANALYSIS_FAILED = "analysis failed"
"""The cause of the idle a failed analysis ends in."""


class AnalysisGuard:
    """Runs a shell's analysis steps; the first one that raises ends the analysis in idle.

    ``close`` closes the mapping (``mapping.close``): it is called with
    :data:`ANALYSIS_FAILED` when a step fails. Every step whose transitions reach the
    observers must run through :meth:`run` (the session's end too), so that the guard knows
    the state they last got. Not thread-safe: a shell with two threads calls it under its
    own lock."""

    def __init__(self, close: Callable[[str], Outcome]) -> None:
        self._close = close
        self._shown: ActivityState | None = None
        """The state the observers last got (None: idle, as at the start)."""
        self._background = 0
        """The background count the observers last got."""
        self.failed = False
        """A step raised: nothing is analysed any more."""

    def run(self, step: Callable[..., Outcome], *args: Any) -> list[Transition]:
        """``step(*args)``'s transitions; after a failure, none. If it raises: the failure
        is logged and the transition to idle comes back instead."""
        if self.failed:
            return []
        try:
            transitions = _listed(step(*args))
        except Exception:
            logger.exception(
                "activity analysis failed (a bug): reporting idle, and the session goes on "
                "without it"
            )
            return self._give_up()
        if transitions:
            self._shown = transitions[-1].state
            self._background = transitions[-1].background
        return transitions

    def _give_up(self) -> list[Transition]:
        from codex_presence.core.activity import ActivityState, Transition

        self.failed = True
        try:
            self._close(ANALYSIS_FAILED)  # its own view of what was shown may be off now
        except Exception:
            logger.exception("closing the mapping failed too")
        shown, self._shown = self._shown, None
        background, self._background = self._background, 0
        if (shown is None or shown is ActivityState.IDLE) and not background:
            return []
        return [
            Transition(
                previous=shown or ActivityState.IDLE,
                state=ActivityState.IDLE,
                cause=ANALYSIS_FAILED,
                previous_background=background,
            )
        ]


def _listed(outcome: Outcome) -> list[Transition]:
    if type(outcome) is list:  # the relay's analyzer, per chunk: no copy, no ABC check
        return outcome
    if outcome is None:
        return []
    if isinstance(outcome, Iterable):  # a Transition is not
        return list(outcome)
    return [outcome]
