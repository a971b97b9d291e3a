"""The relay: the I/O shell of ``wrap``, a byte-exact stdio proxy in front of a child.

It owns the child process and the bytes between it and our own stdin/stdout: spawning,
the two copy loops, backpressure, signals, exit status and the child's death with us. What
the bytes mean is not its business; after each chunk has been forwarded it hands the chunk
to the sans-I/O :class:`~codex_presence.core.prefilter.ChunkAnalyzer` (which feeds the codex
mapping) and to the optional recorder, and passes each resulting
:class:`~codex_presence.core.activity.Transition` to its observers.

Design, and why:

* Raw non-blocking file descriptors, one read and one write per chunk, no stream
  buffering: the bytes are exactly those read, and each direction holds at most one
  chunk (the backpressure: while the client does not read, we do not read the child).
  A read or write is tried first and waited for only on ``EAGAIN``, so regular files
  and ``/dev/null`` (which epoll refuses) work as stdin or stdout too.
* Our stdin → the child runs on the event loop (:func:`anyio.wait_readable` /
  :func:`anyio.wait_writable`). The child's stdout → our stdout, the heavy direction,
  runs on an anyio worker thread with ``poll``: its copies (which release the GIL) and
  its analysis overlap with the other direction, and it wakes the moment the child
  writes, or when a wake pipe tells it to end. It never waits on the event loop: the
  transitions it finds go into an outbox and a byte on a second pipe wakes the event
  loop's delivery task (a blocking hand-over cost ~0.5 ms per chunk under load).
* The child's stderr is our stderr, inherited: untouched, unbuffered, no copy. Our own
  stdin and stdout are made non-blocking without the flag reaching the child's stderr
  through a shared open file description (a terminal, ``2>&1``): a stalled terminal would
  fail its writes with EAGAIN.
* The child gets its own process group (signals we forward reach its helpers too, and a
  terminal's Ctrl-C is not delivered twice) and ``PR_SET_PDEATHSIG`` = SIGKILL, so it
  never outlives us, even when we are SIGKILLed. These OS-level pieces are
  :mod:`codex_presence.agent.child`'s; the recorder is :mod:`codex_presence.agent.recorder`'s.
* Analysis, recording and observers run after the write of the chunk they concern; none
  of them awaits anything, so the relay never waits on parsing, logging, recording or
  the network. Observers must not block: the reporter of issue 5 only records the state
  and wakes its own task.
* ``companions`` are async context managers entered before the child starts and left
  after its end (and the final ``eof`` transition) was delivered: the place for the
  reporter's background task and its "idle on exit" report.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, suppress

import anyio

from codex_presence.agent.child import (
    exit_status,
    grow_pipe,
    is_fifo,
    kill_group,
    nonblocking,
    spawn,
    wait_child,
)
from codex_presence.agent.recorder import Recorder, start_recorder
from codex_presence.core.activity import Transition
from codex_presence.core.codex import CodexMapping, Direction, Unknown
from codex_presence.core.prefilter import DEFAULT_MAX_LINE, ChunkAnalyzer

__all__ = [
    "Companion",
    "Observer",
    "Relay",
    "deliver",
    "exit_status",
    "log_transition",
    "log_unknown",
]

logger = logging.getLogger("codex_presence.relay")

Observer = Callable[[Transition], object]
"""Called with every transition, synchronously, on the relay's event loop; must not block."""

Companion = Callable[[], AbstractAsyncContextManager[object]]
"""Makes an async context manager that lives exactly as long as the relayed session."""

CHUNK_SIZE = 1024 * 1024
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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


class Relay:
    """One relayed session: spawn, copy both ways, analyse, forward signals, exit status."""

    def __init__(
        self,
        *,
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
        self.observers = list(observers)
        self.companions = list(companions)
        if mapping is None:
            mapping = CodexMapping(on_unknown=log_unknown)
        self.analyzer = ChunkAnalyzer(mapping, max_line=max_line)
        self._record_path = record
        self._recorder: Recorder | None = None
        self._stdin = stdin
        self._stdout = stdout
        self._chunk_size = chunk_size
        self._drain_grace = drain_grace
        self._clock = clock
        self._start = clock()
        self._process: subprocess.Popen[bytes] | None = None
        self._analysis_failed = False
        self._analysis_lock = threading.Lock()
        self._outbox: deque[Transition] = deque()
        self._stop = False
        self._wake_r = self._wake_w = -1
        self._ready_r = self._ready_w = -1
        self._child_in = -1
        self._child_out = -1
        self._server_waiting_to_read = False
        self._originals: dict[int, int] = {}
        self._copy_ended = threading.Event()
        self._copy_ended.set()  # no copy thread yet
        """Private descriptors opened for our stdin/stdout → the inherited ones."""

    @property
    def mapping(self) -> CodexMapping:
        return self.analyzer.mapping

    async def run(self, command: Sequence[str]) -> int:
        """Relay until the child has exited and its output is drained; its exit status."""
        saved_flags: dict[int, bool] = {}
        for fd in (self._stdin, self._stdout):
            with suppress(OSError):  # a closed descriptor reads as EOF, fails as a write
                saved_flags[fd] = os.get_blocking(fd)
        try:
            async with AsyncExitStack() as stack:
                for companion in self.companions:
                    await stack.enter_async_context(companion())
                try:
                    return await self._run(command)
                finally:
                    self._flush_outbox()
                    self._deliver(self.analyzer.close("eof"))
        finally:
            for fd, blocking in saved_flags.items():
                with suppress(OSError):
                    os.set_blocking(fd, blocking)

    # -- the session ---------------------------------------------------------------------

    async def _run(self, command: Sequence[str]) -> int:
        child_in_r, self._child_in = os.pipe()
        self._child_out, child_out_w = os.pipe()
        for fd in (self._child_in, child_out_w):
            grow_pipe(fd)
        try:
            with anyio.open_signal_receiver(*_FORWARDED_SIGNALS) as signals:
                # Before the child exists, so that not even a probe reaches its stderr.
                self._stdin = self._nonblocking(self._stdin, os.O_RDONLY)
                self._stdout = self._nonblocking(self._stdout, os.O_WRONLY)
                for fd in (self._stdin, self._stdout):
                    if is_fifo(fd):
                        grow_pipe(fd)
                try:
                    process = spawn(command, stdin=child_in_r, stdout=child_out_w)
                except OSError as exc:
                    logger.error("cannot run %s: %s", command[0], exc.strerror or exc)
                    return 127 if isinstance(exc, FileNotFoundError) else 126
                self._process = process
                os.close(child_in_r)
                os.close(child_out_w)
                child_in_r = child_out_w = -1
                for fd in (self._child_in, self._child_out):
                    os.set_blocking(fd, False)
                return await self._supervise(process, signals)
        finally:
            for fd in (child_in_r, child_out_w):
                if fd >= 0:
                    os.close(fd)
            # Our ends: closed once, by whoever gets there first (see _close_child_*); the
            # copy thread's only once it has ended (see _supervise).
            self._close_child_in()
            copy_ended = self._copy_ended.is_set()
            if copy_ended:
                self._close_child_out()
            for private, original in self._originals.items():
                if copy_ended or private != self._stdout:
                    os.close(private)
                if self._stdin == private:
                    self._stdin = original
                if self._stdout == private:
                    self._stdout = original
            self._originals.clear()
            if self._process is not None and self._process.poll() is None:
                self._kill_group(signal.SIGKILL)
                self._process.wait()

    async def _supervise(
        self,
        process: subprocess.Popen[bytes],
        signals: AsyncIterator[signal.Signals],
    ) -> int:
        server_done = anyio.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._ready_r, self._ready_w = os.pipe()
        for fd in (self._wake_w, self._ready_r, self._ready_w):
            os.set_blocking(fd, False)
        try:
            return await self._supervise_with_wake(process, signals, server_done)
        finally:
            # The copy thread must be gone before its descriptors are closed: a number
            # closed under it could be reused by the next open() and written to.
            self._request_stop()
            if self._copy_ended.wait(2.0):  # at once, normally: it polls the wake pipe
                for fd in (self._wake_r, self._wake_w, self._ready_r, self._ready_w):
                    os.close(fd)
                self._wake_r = self._wake_w = self._ready_r = self._ready_w = -1
            else:
                logger.warning("the copy thread did not end; its descriptors stay open")

    def _request_stop(self) -> None:
        """Tell the copy thread to end, waking it if it is waiting in ``poll``."""
        self._stop = True
        if self._wake_w >= 0:
            with suppress(OSError):  # full (already woken) or closed: either way, done
                os.write(self._wake_w, b"!")

    async def _supervise_with_wake(
        self,
        process: subprocess.Popen[bytes],
        signals: AsyncIterator[signal.Signals],
        server_done: anyio.Event,
    ) -> int:
        async with anyio.create_task_group() as outer:
            self._recorder = start_recorder(self._record_path, outer)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._forward_signals, signals)
                    tg.start_soon(self._deliver_ready)
                    tg.start_soon(self._client_pump)
                    tg.start_soon(self._server_pump, server_done)
                    returncode = await wait_child(process)
                    # Drain what the child wrote before it exited. A slow client is
                    # waited for; a grandchild that holds the pipe without writing is not.
                    while not server_done.is_set():
                        with anyio.move_on_after(self._drain_grace):
                            await server_done.wait()
                        if self._server_waiting_to_read:
                            break
                    # Let the worker thread see the stop flag and end before its
                    # descriptors are closed.
                    self._request_stop()
                    with anyio.move_on_after(1):
                        await server_done.wait()
                    tg.cancel_scope.cancel()
            finally:
                if self._recorder is not None:  # the outer group waits for the rest on disk
                    self._recorder.finish(self._clock() - self._start)
        return exit_status(returncode)

    async def _forward_signals(self, signals: AsyncIterator[signal.Signals]) -> None:
        interrupts = 0
        async for signum in signals:
            if signum == signal.SIGINT:
                interrupts += 1
                if interrupts > 1:
                    logger.warning("second interrupt: killing %s", self._describe_child())
                    self._kill_group(signal.SIGKILL)
                    continue
            logger.debug("forwarding %s", signum.name)
            self._kill_group(signum)

    def _describe_child(self) -> str:
        return f"pid {self._process.pid}" if self._process else "the child"

    def _kill_group(self, signum: int) -> None:
        if self._process is not None:
            kill_group(self._process, signum)

    # -- the two copy loops --------------------------------------------------------------

    async def _client_pump(self) -> None:
        """Our stdin → the child's stdin. On EOF the child's stdin is closed."""
        src, dst = self._stdin, self._child_in
        try:
            while True:
                data = await self._read(src)
                if not data:
                    return
                t = self._clock() - self._start
                try:
                    await self._forward_client(dst, data, t)
                except OSError as exc:
                    if exc.errno != errno.EPIPE:
                        logger.warning("writing to the child's stdin failed: %s", exc)
                    # The child no longer reads: our client should see that, as it would
                    # without us. Detach our stdin from its pipe.
                    self._detach(src, os.O_RDONLY)
                    return
        finally:
            self._close_child_in()

    async def _server_pump(self, done: anyio.Event) -> None:
        """The child's stdout → our stdout, in a worker thread (see :meth:`_server_copy`)."""
        self._copy_ended.clear()
        try:
            await anyio.to_thread.run_sync(self._server_copy, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            self._request_stop()  # the thread wakes up, sees it and ends
            raise
        finally:
            done.set()

    def _server_copy(self) -> None:
        """The hot direction runs in a worker thread: its copies (read and write release
        the GIL) and its analysis overlap with the client direction on the event loop, and
        a blocking ``poll`` wakes it as soon as the child writes — or as soon as
        :meth:`_request_stop` writes to the wake pipe, so that an idle session costs no
        wake-ups at all. It never waits on the event loop.

        Each write and the analysis of the bytes it wrote happen under the analysis lock
        (never held while waiting): the client cannot answer bytes before they are written,
        so its answer is never analysed before the request it answers."""
        try:
            self._copy()
        finally:
            self._copy_ended.set()

    def _copy(self) -> None:
        src, dst = self._child_out, self._stdout
        readable, writable = select.poll(), select.poll()
        readable.register(src, select.POLLIN)
        writable.register(dst, select.POLLOUT)
        for waiter in (readable, writable):
            waiter.register(self._wake_r, select.POLLIN)
        while not self._stop:
            try:
                data = os.read(src, self._chunk_size)
            except BlockingIOError:
                self._server_waiting_to_read = True
                readable.poll()
                self._server_waiting_to_read = False
                continue
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EBADF):
                    return
                raise
            if not data:
                return
            t = self._clock() - self._start
            view, pos, ready = memoryview(data), 0, False
            try:
                while pos < len(data):
                    written, fed = self._write_part(dst, "server", data, view, pos, t)
                    pos, ready = pos + written, ready or fed
                    if pos < len(data):
                        if self._stop:
                            return
                        writable.poll()
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    logger.warning("writing to stdout failed: %s", exc)
                # Our reader is gone; let the child find out on its next write.
                self._close_child_out()
                return
            if ready:
                with suppress(BlockingIOError):  # full: the event loop is already woken
                    os.write(self._ready_w, b"!")

    async def _read(self, fd: int) -> bytes:
        while True:
            try:
                return os.read(fd, self._chunk_size)
            except BlockingIOError:
                pass
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EBADF, errno.ECONNRESET):
                    return b""  # a hung-up terminal or closed descriptor: end of input
                raise
            await anyio.wait_readable(fd)

    async def _forward_client(self, fd: int, data: bytes, t: float) -> None:
        """Write a client chunk to the child, recording and analysing each part as it is
        written, under the analysis lock (as the copy thread does the other way): no reply
        of the child's can be analysed before the bytes it answers. The lock is a thread
        lock, because the two directions run on two threads and anyio has none that sync
        code on both can take; it is never held while waiting."""
        view, pos, ready = memoryview(data), 0, False
        while pos < len(data):
            written, fed = self._write_part(fd, "client", data, view, pos, t)
            pos, ready = pos + written, ready or fed
            if pos < len(data):
                await anyio.wait_writable(fd)
        if ready:
            self._flush_outbox()

    def _write_part(
        self, fd: int, direction: Direction, data: bytes, view: memoryview, pos: int, t: float
    ) -> tuple[int, bool]:
        """One non-blocking write of ``data[pos:]``, and the recording and analysis of the
        part it wrote, under the analysis lock: (bytes written, transitions waiting).
        OSError other than EAGAIN is the caller's."""
        with self._analysis_lock:
            try:
                written = os.write(fd, view[pos:])
            except BlockingIOError:
                return 0, False
            done = data if written == len(data) else data[pos : pos + written]
            return written, self._analyse_locked(direction, done, t)

    def _close_child_in(self) -> None:
        if self._child_in >= 0:
            os.close(self._child_in)
            self._child_in = -1

    def _close_child_out(self) -> None:
        if self._child_out >= 0:
            os.close(self._child_out)
            self._child_out = -1

    def _detach(self, fd: int, mode: int) -> None:
        null = os.open(os.devnull, mode)
        try:
            os.dup2(null, fd)
            if fd in self._originals:  # the inherited descriptor holds the pipe open too
                os.dup2(null, self._originals[fd])
        finally:
            os.close(null)

    def _nonblocking(self, fd: int, mode: int) -> int:
        """``fd`` made non-blocking, or a private descriptor of it (see
        :func:`~codex_presence.agent.child.nonblocking`), remembered for the cleanup."""
        private = nonblocking(fd, mode)
        if private != fd:
            self._originals[private] = fd
        return private

    # -- after each forwarded chunk --------------------------------------------------------

    def _analyse_locked(self, direction: Direction, data: bytes, t: float) -> bool:
        """Record and analyse bytes that were forwarded (read ``t`` seconds into the
        session); True if transitions wait in the outbox. Under the analysis lock, so that
        the recording is in the very order of the analysis: its replay is the live
        timeline, and bytes that never reached the other side are in neither."""
        if self._recorder is not None:
            self._recorder.add(t, direction, data)
        if self._analysis_failed:
            return False
        try:
            transitions = self.analyzer.feed(direction, data)
        except Exception:  # a bug in the analysis must never stop the bytes
            logger.exception("activity analysis failed; relaying without it")
            self._analysis_failed = True
            return False
        self._outbox.extend(transitions)
        return bool(self._outbox)

    async def _deliver_ready(self) -> None:
        """Deliver what the copy thread put in the outbox, each time it says so."""
        while True:
            await anyio.wait_readable(self._ready_r)
            with suppress(BlockingIOError):
                while os.read(self._ready_r, 4096):
                    pass
            self._flush_outbox()

    def _flush_outbox(self) -> None:
        """Deliver waiting transitions in order; on the event loop thread only."""
        while self._outbox:
            self._deliver([self._outbox.popleft()])

    def _deliver(self, transitions: list[Transition]) -> None:
        deliver(self.observers, transitions)
