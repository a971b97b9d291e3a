"""The session of ``wrap``: a byte-exact stdio proxy in front of a child.

The bytes are :mod:`codex_presence.agent.wrap.pump`'s (spawn, the two copy threads, the
analysis lock) and the child's process is :mod:`codex_presence.agent.child`'s; the relay is
the event loop around them, on the shells' skeleton (:mod:`codex_presence.agent.session`:
observers, companions, the end, signals). It attaches the codex mapping to the pump's
analyzer, delivers each :class:`~codex_presence.core.activity.Transition` the copy threads
found to its observers, waits for the child, drains what it wrote, and returns its exit
status. What the bytes mean is not its business: the sans-I/O
:class:`~codex_presence.core.codex.prefilter.ChunkAnalyzer` feeds the mapping.

Design, and why:

* ``wrap`` starts the pump before it imports the relay (or anyio, the mapping, the broker
  link): the child's first answer must not wait for them (issue 13). :class:`WrapSession`
  takes over a started pump; given none, it makes and starts one itself.
* Observers run on the event loop, never in a copy thread: the copy threads put what they
  find in an outbox and wake the delivery task through a pipe (a blocking hand-over cost
  ~0.5 ms per chunk under load). Observers must not block: the reporter only records the
  state and wakes its own task.
* The companions are entered before the session's analysis attaches and left after the
  child's end (and the final ``eof`` transition) was delivered, as in every shell.
* The analysis runs in :class:`~codex_presence.agent.analysis.AnalysisGuard`, as in every
  shell: a bug in it (the mapping's, the pre-filter's) ends the member's state in idle, said
  once, instead of freezing it for the rest of the session; the bytes go on.
* The child gets its own process group (signals we forward reach its helpers too, and a
  terminal's Ctrl-C is not delivered twice) and a watchdog that kills its whole tree when
  we die, even when we are SIGKILLed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import suppress

import anyio

from codex_presence.agent.analysis import AnalysisGuard
from codex_presence.agent.child import wait_child
from codex_presence.agent.session import Companion, Observer, Session, log_transition, log_unknown
from codex_presence.agent.signals import exit_status
from codex_presence.agent.wrap.pump import CHUNK_SIZE, Pump
from codex_presence.core.codex.mapping import CodexMapping
from codex_presence.core.codex.prefilter import DEFAULT_MAX_LINE, ChunkAnalyzer

__all__ = ["WrapSession"]


class WrapSession:
    """One relayed session: spawn, copy both ways, analyse, forward signals, exit status."""

    def __init__(
        self,
        *,
        pump: Pump | None = None,
        observers: Sequence[Observer] = (log_transition,),
        companions: Sequence[Companion] = (),
        record: str | os.PathLike[str] | None = None,
        mapping: CodexMapping | None = None,
        stdin: int = 0,
        stdout: int = 1,
        max_line: int = DEFAULT_MAX_LINE,
        chunk_size: int = CHUNK_SIZE,
        drain_grace: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._mapping = mapping if mapping is not None else CodexMapping(on_unknown=log_unknown)
        if pump is None:
            pump = Pump(
                analyzer=ChunkAnalyzer(max_line=max_line, deferred=True),
                record=record,
                stdin=stdin,
                stdout=stdout,
                chunk_size=chunk_size,
                clock=clock,
            )
        self.pump = pump
        self.session = Session(
            observers=observers, companions=companions, close=pump.close_analysis
        )
        self._drain_grace = drain_grace

    @property
    def observers(self) -> list[Observer]:
        return self.session.observers

    @property
    def analyzer(self) -> ChunkAnalyzer:
        analyzer = self.pump.analyzer
        assert analyzer is not None, "the pump has no analyzer"
        return analyzer

    @property
    def mapping(self) -> CodexMapping:
        return self._mapping

    @property
    def analysis(self) -> AnalysisGuard:
        """The guard the analysis runs in (the pump's): a bug ends it in idle, said once."""
        analysis = self.pump.analysis
        assert analysis is not None, "the pump has no analyzer"
        return analysis

    async def run(self, command: Sequence[str] | None = None) -> int:
        """Relay until the child has exited and its output is drained; its exit status.
        Starts the pump with ``command`` unless it was started already."""
        pump = self.pump
        if pump.child is None:
            assert command is not None, "a command, or a started pump"
            status = pump.start(command)
            if status is not None:
                return status
        try:
            async with self.session.lifetime():
                try:
                    return await self._supervise()
                finally:
                    self._flush_outbox()  # what the copy threads found comes before the end
        finally:
            await anyio.to_thread.run_sync(pump.close)

    # -- the session ---------------------------------------------------------------------

    async def _supervise(self) -> int:
        pump = self.pump
        child = pump.child
        assert child is not None
        server_done = anyio.Event()
        async with anyio.create_task_group() as tg:
            await tg.start(self.session.forward_signals, pump.signals)
            tg.start_soon(self._deliver_ready, server_done)
            pump.attach(self._mapping)
            returncode = await wait_child(child)
            # Drain what the child wrote before it exited. A slow client is waited
            # for; a grandchild that holds the pipe without writing is not.
            while not server_done.is_set():
                with anyio.move_on_after(self._drain_grace):
                    await server_done.wait()
                if pump.server_waiting_to_read:
                    break
            # Let the copy threads see the stop flag and end before their
            # descriptors are closed.
            pump.request_stop()
            with anyio.move_on_after(1):
                await server_done.wait()
            tg.cancel_scope.cancel()
        return exit_status(returncode)

    async def _deliver_ready(self, server_done: anyio.Event) -> None:
        """Deliver what the copy threads put in the outbox, each time they say so, and
        notice the end of the server's copy."""
        pump = self.pump
        while True:
            await anyio.wait_readable(pump.ready_r)
            with suppress(BlockingIOError):
                while os.read(pump.ready_r, 4096):
                    pass
            self._flush_outbox()
            if pump.server_done.is_set():
                server_done.set()

    def _flush_outbox(self) -> None:
        """Deliver waiting transitions in order; on the event loop thread only."""
        self.session.deliver(self.pump.take_transitions())
