"""The one session skeleton the three shells run on: what a session does with the
transitions it derives, what lives as long as it does, and how it ends.

``wrap`` (:mod:`codex_presence.agent.wrap.session`), the TUI session
(:mod:`codex_presence.agent.tui.session`) and the Claude Code session
(:mod:`codex_presence.agent.claude.session`) differ in how they reach the agent (pipes, a
websocket, HTTP hooks) and in nothing else. What they share is here, written once:

* **Observers** get every transition, in order, synchronously on the event loop; one that
  fails is logged and the others still get it (:func:`deliver`). The default observer logs
  it (:func:`log_transition`); the broker link's observer reports it.
* **Background work** (:mod:`codex_presence.core.activity`): a transition also carries the
  count of commands and tasks the session left running, and comes when only that count
  changed (``changes_state`` False: observers that want the state alone skip those). The
  session keeps the count and since when (unix seconds) there has been some
  (:attr:`Session.background`, :attr:`Session.background_since`), on the way to its
  observers.
* **Companions** are async context managers that live exactly as long as the session
  (the broker link: its subscription and its reporter). They are entered before the
  analysis can deliver anything and left after the session's end was delivered.
* **The end** (:meth:`Session.lifetime`): however the session ends (the agent exited, a
  signal, an exception, a cancellation), the mapping is closed with cause ``eof`` through the
  analysis guard and that last transition is delivered before the companions are left, so
  the link reports idle on its way out and a bug in the close cannot freeze the state.
* **Signals** (:meth:`Session.forward_signals`): SIGINT, SIGTERM and SIGHUP are passed on
  by :class:`~codex_presence.agent.signals.SignalForwarding`'s one rule.
* **The recording's end** (:func:`finish_recording`): the recorder is told the session's
  end and waited for, off the event loop, with a warning when it cannot complete.
* **A command that cannot run** ends the session with a shell's status, said on the log
  (:func:`~codex_presence.agent.signals.cannot_run`: 127 if it was not found, else 126).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from codex_presence.agent.signals import FORWARDED_SIGNALS, SignalForwarding
from codex_presence.core.activity import Transition

if TYPE_CHECKING:
    from codex_presence.agent.recorder import Recorder
    from codex_presence.core.feeder import Unknown

__all__ = [
    "Companion",
    "Observer",
    "Session",
    "deliver",
    "finish_recording",
    "log_transition",
    "log_unknown",
]

logger = logging.getLogger("codex_presence.relay")

Observer = Callable[[Transition], object]
"""Called with every transition, synchronously, on the session's event loop; must not block."""

Companion = Callable[[], AbstractAsyncContextManager[object]]
"""Makes an async context manager that lives exactly as long as the session."""


def log_transition(transition: Transition) -> None:
    """The default observer: ``codex-presence: working (turn/started)`` on stderr, and
    ``codex-presence: 1 left running in the background: turn/completed``."""
    if transition.changes_state:
        logger.info("%s (%s)", transition.state.value, transition.cause)
    if transition.changes_background:
        logger.info(
            "%d left running in the background: %s", transition.background, transition.cause
        )


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


class Session:
    """The shared part of one shell's session: its observers, its companions and its end.

    ``close`` ends the analysis with a cause and returns the transitions that causes; it
    must run the mapping's close in the shell's analysis guard (and under the shell's lock,
    if it has one). A shell holds one :class:`Session` and runs its own part inside
    :meth:`lifetime`."""

    def __init__(
        self,
        *,
        observers: Sequence[Observer],
        companions: Sequence[Companion],
        close: Callable[[str], list[Transition]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.observers = list(observers)
        self.companions = list(companions)
        self._close = close
        self._clock = clock
        self.background = 0
        """Commands and tasks the session left running (as of the last delivery)."""
        self.background_since: float | None = None
        """Since when (unix seconds, the session's clock) there has been background work."""

    def deliver(self, transitions: Iterable[Transition]) -> None:
        """Each transition to every observer, in order (on the event loop only), with the
        background count noted first (an observer may read :attr:`background_since`)."""
        deliver(self.observers, self._note_background(transitions))

    def _note_background(self, transitions: Iterable[Transition]) -> Iterator[Transition]:
        for transition in transitions:
            if transition.changes_background:
                if not transition.background:
                    self.background_since = None
                elif not self.background or self.background_since is None:
                    self.background_since = self._clock()
                self.background = transition.background
            yield transition

    def close(self, cause: str) -> None:
        """End the analysis now (e.g. the agent's server is gone before the session's end)
        and deliver what that changes; a later close changes nothing."""
        self.deliver(self._close(cause))

    @asynccontextmanager
    async def lifetime(self) -> AsyncIterator[None]:
        """The companions entered, then the shell's part; on the way out, whatever ended
        it, the analysis closed (``eof``) and its transition delivered, then the companions
        left (the link reports idle)."""
        async with AsyncExitStack() as companions:
            for companion in self.companions:
                await companions.enter_async_context(companion())
            try:
                yield
            finally:
                self.close("eof")

    @staticmethod
    async def forward_signals(
        forwarding: SignalForwarding,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Pass every signal we get on by :class:`SignalForwarding`'s rule, until cancelled
        (``task_status.started()`` once the signals are ours)."""
        with anyio.open_signal_receiver(*FORWARDED_SIGNALS) as signals:
            task_status.started()
            async for signum in signals:
                forwarding.forward(signum)


RECORDING_GRACE = 10.0
"""Seconds a session's end waits for its recording to be written out."""


async def finish_recording(recorder: Recorder | None, t: float) -> None:
    """The recording's end at ``t``, waited for off the event loop (shielded: a cancelled
    session still completes its file) up to :data:`RECORDING_GRACE`; a warning when it
    cannot complete in time."""
    if recorder is None:
        return
    recorder.finish(t)
    with anyio.CancelScope(shield=True):
        complete = await anyio.to_thread.run_sync(recorder.join, RECORDING_GRACE)
    if not complete:
        logger.warning("the recording of %s is not complete", recorder.path)
