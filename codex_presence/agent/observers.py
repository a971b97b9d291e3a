"""What every agent-side shell does with the transitions it derives: the observers that get
them and the companions that live as long as the session.

``wrap`` (:mod:`~codex_presence.agent.wrap.session`), the TUI session
(:mod:`~codex_presence.agent.tui.session`) and the Claude Code session
(:mod:`~codex_presence.agent.claude.session`) share these, so a transition reaches the log
and the broker link the same way whichever feeder found it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager

from codex_presence.core.activity import Transition
from codex_presence.core.codex.mapping import Unknown

__all__ = ["Companion", "Observer", "deliver", "log_transition", "log_unknown"]

logger = logging.getLogger("codex_presence.relay")

Observer = Callable[[Transition], object]
"""Called with every transition, synchronously, on the session's event loop; must not block."""

Companion = Callable[[], AbstractAsyncContextManager[object]]
"""Makes an async context manager that lives exactly as long as the session."""


def log_transition(transition: Transition) -> None:
    """The default observer: ``codex-presence: working (turn/started)`` on stderr."""
    logger.info("%s (%s)", transition.state.value, transition.cause)


def deliver(observers: Sequence[Observer], transitions: Iterable[Transition]) -> None:
    """Each transition to every observer, in order; an observer that fails is logged."""
    for transition in transitions:
        for observer in observers:
            try:
                observer(transition)
            except Exception:
                logger.exception("observer %r failed", observer)


def log_unknown(unknown: Unknown) -> None:
    """Said once per session for each name the mapping does not classify: codex changed."""
    logger.warning(
        "codex sent %s %s that this codex-presence does not know: %r; the state may be wrong "
        "(`codex-presence doctor` lists everything this codex adds)",
        "an" if unknown.kind[0] in "aeiou" else "a",
        unknown.kind,
        unknown.name,
    )
