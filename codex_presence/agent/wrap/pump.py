"""The byte path of ``wrap``: the child spawned, and every byte copied both ways by two threads.

Standard library only, and light: ``wrap`` spawns the child and copies its first bytes
before it loads anything else (issue 13) — logging, the analysis and the recording come
once the child has started up, the codex mapping, anyio and the broker link after them.
Until the analysis is loaded (:meth:`Pump.equip`), the bytes that cross are kept, in order,
in a bounded buffer; then the analyzer frames and filters them and keeps the lines that may
matter until the mapping is attached (see :mod:`codex_presence.core.codex.prefilter`). The relay
is never held back.

Design, and why:

* Raw non-blocking file descriptors, one read and one write per chunk, no stream
  buffering: the bytes are exactly those read, and each direction holds at most one chunk
  (the backpressure: while the client does not read, we do not read the child). A read or
  write is tried first and waited for only on ``EAGAIN``, so regular files and
  ``/dev/null`` (which poll treats as always ready) work as stdin or stdout too.
* One thread per direction, each waiting in ``poll`` on its descriptor and on a wake pipe
  (so that it ends the moment it is told to, and an idle session costs no wake-ups). Their
  copies release the GIL and overlap. Neither ever waits on the event loop: the
  transitions they find go into an outbox, and a byte on the ready pipe wakes whoever
  delivers them.
* Each write, and the recording and analysis of the bytes it wrote, happen under one lock
  (never held while waiting): the other side cannot answer bytes before they are written,
  so an answer is never analysed before the request it answers, and the recording is in
  the very order of the analysis (its replay is the live timeline; bytes that never
  reached the other side are in neither).
* Our stdin and stdout are made non-blocking without the flag reaching the child's stderr
  through a shared open file description (a terminal, ``2>&1``); the child's stderr is our
  stderr, inherited, untouched. See :mod:`codex_presence.agent.child`, which also owns the
  child's process and its death with us.
* Until the event loop takes over, SIGINT, SIGTERM and SIGHUP are forwarded to the child's
  process group from here (a second SIGINT kills it).
* The analysis runs in the shells' :class:`~codex_presence.agent.analysis.AnalysisGuard`
  (under the same lock): a bug in it ends the member's state in idle, said once, and the
  bytes go on unanalysed.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

from codex_presence.agent.child import Child, Launched, launch, relay_log
from codex_presence.agent.signals import FORWARDED_SIGNALS, SignalForwarding, cannot_run

TYPE_CHECKING = False  # typing is not loaded before the child's first bytes are copied
if TYPE_CHECKING:
    from typing import Any

    from codex_presence.agent.analysis import AnalysisGuard
    from codex_presence.agent.recorder import Recorder
    from codex_presence.core.activity import Transition
    from codex_presence.core.codex.mapping import CodexMapping
    from codex_presence.core.codex.prefilter import ChunkAnalyzer
    from codex_presence.core.codex.protocol import Direction

__all__ = ["CHUNK_SIZE", "DEFAULT_MAX_EARLY", "Pump"]

CHUNK_SIZE = 1024 * 1024
DEFAULT_MAX_EARLY = 16 * 1024 * 1024
"""Bytes kept for the analysis and the recording until they are loaded (:meth:`Pump.equip`);
past that, the rest until then is a gap."""


class Pump:
    """One session's bytes: spawn, copy both ways, hand every forwarded chunk to the
    analyzer and the recorder, forward signals until the event loop does.

    Without an ``analyzer`` (``wrap``), the copy threads start before the analysis and the
    recording are even imported: what crosses meanwhile is kept, in order, up to
    ``max_early`` bytes, and handed to them by :meth:`equip`; past that, the rest until then
    is a gap for both (as a recorder that cannot keep up has one), said by the analysis."""

    def __init__(
        self,
        *,
        analyzer: ChunkAnalyzer | None = None,
        record: str | os.PathLike[str] | None = None,
        stdin: int = 0,
        stdout: int = 1,
        chunk_size: int = CHUNK_SIZE,
        max_early: int = DEFAULT_MAX_EARLY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.analyzer = analyzer
        self.analysis: AnalysisGuard | None = None
        """Guards every step of the analysis whose transitions reach the observers, once
        equipped (see the module's doc)."""
        self.recorder: Recorder | None = None
        """``record``'s recorder, once equipped (None if it cannot be written)."""
        self._record = record
        self._early: list[tuple[float, Direction, bytes]] = []
        self._early_size = 0
        self._max_early = max_early
        self._early_lost: dict[Direction, list[Any]] = {}
        """Past ``max_early``, per direction: [since, bytes, whether they end a line]."""
        self.child: Child | None = None
        self._outbox: deque[Transition] = deque()
        """Transitions found by the copy threads, for the event loop to deliver
        (:meth:`take_transitions`); under :attr:`lock`."""
        self._woken = False
        """The ready pipe was written for the transitions in the outbox: the event loop
        has yet to take them, and needs no second wake-up."""
        self.lock = threading.Lock()
        """The analysis lock: each write with the analysis and recording of its bytes."""
        self.server_done = threading.Event()
        """Set once the copy of the child's output has ended."""
        self.first_output = threading.Event()
        """Set once the child has written something (or its output has ended)."""
        self.server_waiting_to_read = False
        self.signals = SignalForwarding(name="the child")
        """Forwards SIGINT, SIGTERM and SIGHUP to the child, by the shells' one rule."""
        self._stdin = stdin
        self._stdout = stdout
        self._chunk_size = chunk_size
        self._clock = clock
        self._start = clock()
        self._stop = False
        self._wake_r = self._wake_w = -1
        self.ready_r = -1
        """Readable when the outbox has transitions or a copy thread has ended."""
        self._ready_w = -1
        self._child_in = self._child_out = -1
        self._originals: dict[int, int] = {}
        """Private descriptors opened for our stdin/stdout → the inherited ones."""
        self._saved_flags: dict[int, bool] = {}
        self._saved_handlers: dict[int, Any] = {}
        self._threads: list[threading.Thread] = []

    def now(self) -> float:
        """Seconds since the session started (the recording's clock)."""
        return self._clock() - self._start

    # -- start ---------------------------------------------------------------------------

    def start(self, command: Sequence[str], *, env: Mapping[str, str] | None = None) -> int | None:
        """Spawn ``command`` and start copying (see :meth:`adopt`). If the command cannot
        be run, everything is undone and its exit status is returned (see
        :func:`cannot_run`)."""
        try:
            launched = launch(command, stdin=self._stdin, stdout=self._stdout, env=env)
        except OSError as exc:
            return cannot_run(command, exc)
        self.adopt(launched)
        return None

    def adopt(self, launched: Launched) -> None:
        """Take over a launched child (:func:`~codex_presence.agent.child.launch`): open
        the recording, and start copying."""
        self.child = launched.child
        self.signals.attach(launched.child)
        self._stdin, self._stdout = launched.stdin, launched.stdout
        self._child_in, self._child_out = launched.child_in, launched.child_out
        self._originals, self._saved_flags = launched.originals, launched.saved_flags
        if self.analyzer is not None:
            self._equip_locked(self.analyzer)
        self._wake_r, self._wake_w = os.pipe()
        self.ready_r, self._ready_w = os.pipe()
        for fd in (self._wake_w, self.ready_r, self._ready_w):
            os.set_blocking(fd, False)
        if threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                self._saved_handlers[signum] = signal.signal(signum, self._on_signal)
        for name, copy in (
            ("relay-client", self._copy_client),
            ("relay-server", self._copy_server),
        ):
            thread = threading.Thread(target=self._run_copy, args=(copy,), name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def equip(self, analyzer: ChunkAnalyzer) -> None:
        """The analysis (and the recording) are loaded: they get every byte kept until now,
        in order, and a gap for what did not fit; then each chunk as it crosses."""
        with self.lock:
            self._equip_locked(analyzer)

    def _equip_locked(self, analyzer: ChunkAnalyzer) -> None:
        from codex_presence.agent.analysis import AnalysisGuard
        from codex_presence.agent.recorder import start_recorder

        self.analyzer = analyzer
        self.analysis = AnalysisGuard(self._close_mapping)
        self.recorder = start_recorder(self._record, max_line=analyzer.max_line)
        early, self._early, self._early_size = self._early, [], 0
        for t, direction, data in early:
            self._analyse_locked(direction, data, t)
        for direction, (since, size, ends_a_line) in self._early_lost.items():
            analyzer.lose(direction, size, ends_a_line=ends_a_line)
            if self.recorder is not None:
                self.recorder.lose(since, direction, size, ends_a_line=ends_a_line)
        self._early_lost.clear()

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.forward(signal.Signals(signum))

    def attach(self, mapping: CodexMapping) -> None:
        """The mapping is loaded: the analysis catches up on what crossed meanwhile."""
        analyzer, analysis = self.analyzer, self.analysis
        assert analyzer is not None and analysis is not None, "equip the pump first"
        with self.lock:
            transitions = analysis.run(analyzer.attach, mapping)
            if analyzer.stats.gap and self.recorder is not None:
                self.recorder.mark_closed(self.now(), "gap")
            self._outbox.extend(transitions)
        self._poke()

    def close_analysis(self, cause: str) -> list[Transition]:
        """The end of both streams, for the analysis (in its guard): the transitions."""
        analyzer, analysis = self.analyzer, self.analysis
        assert analyzer is not None and analysis is not None, "equip the pump first"
        with self.lock:
            return analysis.run(analyzer.close, cause)

    def _close_mapping(self, cause: str) -> Transition | None:
        """The guard's end of a failed analysis: the mapping closed, if it is attached."""
        analyzer = self.analyzer
        if analyzer is None or not analyzer.attached:
            return None
        return analyzer.mapping.close(cause)

    def take_transitions(self) -> list[Transition]:
        """The transitions found since the last call, in order (for the event loop)."""
        with self.lock:  # held only by a write and its analysis: never for long
            taken = list(self._outbox)
            self._outbox.clear()
            self._woken = False
        return taken

    # -- stop ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Tell the copy threads to end, waking them if they wait in ``poll``."""
        self._stop = True
        if self._wake_w >= 0:
            with suppress(OSError):  # full (already woken) or closed: either way, done
                os.write(self._wake_w, b"!")

    def close(self, timeout: float = 2.0) -> None:
        """End the session's byte path: stop and join the copy threads, close our
        descriptors, give our stdin/stdout back as they were, let go of the child (its
        watchdog kills whatever is left of its tree), and see the recording to its end."""
        if self.recorder is not None:
            self.recorder.finish(self.now())
        self.request_stop()
        deadline = time.monotonic() + timeout
        threads_ended = True
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            threads_ended = threads_ended and not thread.is_alive()
        if not threads_ended:
            # A descriptor closed under a thread could be reused by the next open().
            relay_log("warning", "a copy thread did not end; its descriptors stay open")
        else:
            for name in ("_wake_r", "_wake_w", "ready_r", "_ready_w", "_child_in", "_child_out"):
                fd = getattr(self, name)
                if fd >= 0:
                    os.close(fd)
                    setattr(self, name, -1)
            for private, original in self._originals.items():
                os.close(private)
                if self._stdin == private:
                    self._stdin = original
                if self._stdout == private:
                    self._stdout = original
            self._originals.clear()
        for fd, blocking in self._saved_flags.items():
            with suppress(OSError):
                os.set_blocking(fd, blocking)
        self._saved_flags.clear()
        for signum, handler in self._saved_handlers.items():
            with suppress(ValueError, TypeError):
                signal.signal(signum, handler)
        self._saved_handlers.clear()
        if self.child is not None:
            self.child.release()
        if self.recorder is not None and not self.recorder.join(10):
            relay_log("warning", "the recording of %s is not complete", self.recorder.path)

    # -- the copy threads ----------------------------------------------------------------

    def _run_copy(self, copy: Callable[[], None]) -> None:
        # The event loop's thread takes the forwarded signals (so that it wakes up).
        with suppress(AttributeError, ValueError):
            signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        try:
            copy()
        except Exception:
            relay_log("exception", "the relay's copy failed")
        finally:
            if copy == self._copy_server:
                self.server_done.set()
                self.first_output.set()
            self._poke()

    def _copy_client(self) -> None:
        """Our stdin → the child's stdin. On EOF the child's stdin is closed."""
        src, dst = self._stdin, self._child_in
        try:
            self._copy(src, dst, "client")
        except OSError as exc:
            if not isinstance(exc, BrokenPipeError):
                relay_log("warning", "relaying our stdin to the child failed: %s", exc)
            # The child no longer reads: our client should see that, as it would without
            # us. Detach our stdin from its pipe.
            self._detach(src, os.O_RDONLY)
        finally:
            if self._child_in >= 0 and not self._stop:
                os.close(self._child_in)
                self._child_in = -1

    def _copy_server(self) -> None:
        """The child's stdout → our stdout."""
        try:
            self._copy(self._child_out, self._stdout, "server")
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                relay_log("warning", "writing to stdout failed: %s", exc)
            # Our reader is gone; the child finds out on its next write.
            if self._child_out >= 0 and not self._stop:
                os.close(self._child_out)
                self._child_out = -1

    def _copy(self, src: int, dst: int, direction: Direction) -> None:
        """Copy until EOF (or a read error that means one) or a stop request; a write
        error is raised."""
        readable, writable = select.poll(), select.poll()
        readable.register(src, select.POLLIN)
        writable.register(dst, select.POLLOUT)
        for waiter in (readable, writable):
            waiter.register(self._wake_r, select.POLLIN)
        server = direction == "server"
        while not self._stop:
            try:
                data = os.read(src, self._chunk_size)
            except BlockingIOError:
                if server:
                    self.server_waiting_to_read = True
                readable.poll()
                self.server_waiting_to_read = False
                continue
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EBADF, errno.ECONNRESET):
                    return  # a hung-up terminal or closed descriptor: end of input
                raise
            if not data:
                return
            if server:
                self.first_output.set()
            t = self.now()
            view, pos, ready = memoryview(data), 0, False
            while pos < len(data):
                written, fed = self._write_part(dst, direction, data, view, pos, t)
                pos, ready = pos + written, ready or fed
                if pos < len(data):
                    if self._stop:
                        return
                    writable.poll()
            if ready:
                self._poke()

    def _write_part(
        self, fd: int, direction: Direction, data: bytes, view: memoryview, pos: int, t: float
    ) -> tuple[int, bool]:
        """One non-blocking write of ``data[pos:]``, and the recording and analysis of the
        part it wrote, under the analysis lock: (bytes written, transitions waiting).
        OSError other than EAGAIN is the caller's."""
        with self.lock:
            try:
                written = os.write(fd, view[pos:])
            except BlockingIOError:
                return 0, False
            done = data if written == len(data) else data[pos : pos + written]
            return written, self._analyse_locked(direction, done, t)

    def _analyse_locked(self, direction: Direction, data: bytes, t: float) -> bool:
        """Record and analyse bytes that were forwarded (read ``t`` seconds into the
        session); True if new transitions wait in the outbox and the event loop must be
        woken for them (once, until it takes them: a wake-up per chunk would cost the relay
        a tenth of its throughput on a busy stream, in GIL hand-overs)."""
        if self.analyzer is None:  # not loaded yet: kept for it, or lost past the bound
            if self._early_lost or self._early_size + len(data) > self._max_early:
                lost = self._early_lost.setdefault(direction, [t, 0, True])
                lost[1] += len(data)
                lost[2] = data.endswith(b"\n")
            else:
                self._early.append((t, direction, data))
                self._early_size += len(data)
            return False
        if self.recorder is not None:
            # Bytes the analysis leaves out (a start-up gap) are left out of the recording
            # too, so that its replay is the live timeline.
            if self.analyzer.in_gap:
                self.recorder.drop(t, direction, data)
            else:
                self.recorder.add(t, direction, data)
        assert self.analysis is not None  # equipped with the analyzer
        transitions = self.analysis.run(self.analyzer.feed, direction, data)
        self._outbox.extend(transitions)
        if not transitions or self._woken:
            return False
        self._woken = True
        return True

    def _poke(self) -> None:
        with suppress(OSError):  # full: the reader is already woken; closed: session over
            os.write(self._ready_w, b"!")

    def _detach(self, fd: int, mode: int) -> None:
        null = os.open(os.devnull, mode)
        try:
            os.dup2(null, fd)
            if fd in self._originals:  # the inherited descriptor holds the pipe open too
                os.dup2(null, self._originals[fd])
        finally:
            os.close(null)
