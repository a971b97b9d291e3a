"""Waiting in tests, always bounded: :func:`eventually` for a condition, :class:`Lines` for
what a process writes."""

from __future__ import annotations

import functools
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable

import anyio

WAIT = 60.0
"""The deadline of a wait for what must happen (docs/development.md): generous, so that a
loaded machine (eight suites at once on two cores) never turns a test red; a wait costs
only as long as the condition takes."""

LONGEST_PAUSE = 0.05
"""The longest pause between two looks at a condition, in seconds: what a wait may add to
the time a condition took to hold (tests that bound that time have this much slack)."""


def eventually(
    predicate: Callable[[], object],
    within: float = WAIT,
    what: str = "condition",
    *,
    interval: float = 0.01,
    seen: Callable[[], object] | None = None,
) -> float:
    """Poll ``predicate`` until it holds; fail the test if it does not ``within`` that many
    seconds, saying what ``seen`` returns then (a process's log, say). Returns how long it
    took.

    The pauses start at ``interval`` and grow by half each time up to :data:`LONGEST_PAUSE`
    (or ``interval``, if longer): a quick condition is seen as soon as before, and a long
    wait no longer asks a hundred times a second (most predicates are an HTTP request to a
    broker, or read /proc: CPU that the processes under test need on a loaded machine)."""
    start = time.monotonic()
    pause = interval
    while not predicate():
        if time.monotonic() - start >= within:
            saw = "" if seen is None else f"; saw: {seen()!r}"
            raise AssertionError(f"{what} never held within {within} s{saw}")
        time.sleep(pause)
        pause = min(pause * 1.5, max(interval, LONGEST_PAUSE))
    return time.monotonic() - start


async def eventually_async(
    predicate: Callable[[], object],
    within: float = WAIT,
    what: str = "condition",
    *,
    interval: float = 0.01,
    seen: Callable[[], object] | None = None,
) -> float:
    """:func:`eventually` for an async test: the polling runs in a worker thread, so the
    event loop (and whatever the test is waiting for on it) runs meanwhile."""
    poll = functools.partial(eventually, predicate, within, what=what, interval=interval, seen=seen)
    return await anyio.to_thread.run_sync(poll)


def exits(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str],
    within: float = WAIT,
    what: str = "the process",
    *,
    seen: Callable[[], object] | None = None,
) -> int:
    """``proc``'s exit status, once it has exited; fail the test if it has not ``within``
    that many seconds, saying what ``seen`` returns then (its output so far, say)."""
    try:
        return proc.wait(within)
    except subprocess.TimeoutExpired:
        saw = "" if seen is None else f"; saw: {seen()!r}"
        raise AssertionError(f"{what} did not exit within {within} s{saw}") from None


class Lines:
    """A process's text stream read line by line in a thread, with bounded waits."""

    def __init__(self, stream: Iterable[str]) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []

        def pump() -> None:
            for line in stream:
                self.queue.put(line)
            self.queue.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, pattern: str, timeout: float = WAIT) -> str:
        """The next line matching ``pattern`` (a regular expression)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"{pattern!r} not seen in: {''.join(self.seen)!r}")

    def rest(self, timeout: float = WAIT) -> str:
        """Everything the stream said, once it has ended."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                return "".join(self.seen)
            self.seen.append(line)
        raise AssertionError(f"the stream did not end; so far: {''.join(self.seen)!r}")
