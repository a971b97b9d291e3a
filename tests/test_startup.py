"""wrap's start-up (issue 13): the child is spawned, and its bytes copied, before the
analysis has loaded; what crossed meanwhile is analysed in order once it has, from a
bounded buffer whose overflow is said and treated as a gap.

The in-process tests start a :class:`Pump` (the byte path, as ``wrap`` starts it before
loading anything else), talk to the child through it with no event loop and no mapping at
all, and only then hand it to a :class:`WrapSession`, which attaches the mapping.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from codex_presence.agent.wrap.pump import Pump
from codex_presence.agent.wrap.session import WrapSession
from codex_presence.core.activity import Transition
from codex_presence.core.codex.prefilter import ChunkAnalyzer
from codex_presence.core.recording import read_entries, read_relevant_entries
from codex_presence.core.timeline import timeline
from tests.support.broker_harness import make_team, running_broker, token_of
from tests.support.waiting import WAIT, eventually
from tests.support.wrap_harness import WrapProcess

PY = sys.executable


def started(thread: str) -> bytes:
    return b'{"method":"turn/started","params":{"threadId":"%s","turn":{"id":"t"}}}\n' % (
        thread.encode()
    )


def completed(thread: str) -> bytes:
    return b'{"method":"turn/completed","params":{"threadId":"%s","turn":{"id":"t"}}}\n' % (
        thread.encode()
    )


APPROVAL = (
    b'{"method":"item/commandExecution/requestApproval","id":7,'
    b'"params":{"threadId":"a","turnId":"t","itemId":"c"}}\n'
)
ANSWER = b'{"id":7,"result":{"decision":"accept"}}\n'


class Wire:
    """Our side of a pump's stdin and stdout: what we write, what came back."""

    def __init__(self) -> None:
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.received = bytearray()
        self._more = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while data := os.read(self.out_r, 1 << 16):
            with self._more:
                self.received += data
                self._more.notify_all()

    def wait_for(self, marker: bytes, timeout: float = WAIT) -> None:
        with self._more:
            assert self._more.wait_for(lambda: marker in self.received, timeout), (
                marker,
                bytes(self.received),
            )

    def send(self, data: bytes) -> None:
        os.write(self.in_w, data)

    def close(self) -> None:
        for fd in (self.in_r, self.in_w, self.out_w):
            os.close(fd)
        self._reader.join(WAIT)
        os.close(self.out_r)


@contextmanager
def wire() -> Iterator[Wire]:
    w = Wire()
    try:
        yield w
    finally:
        w.close()


def pump_on(
    w: Wire, *, record: Path | None = None, max_early: int = 1 << 24, analyzer: bool = False
) -> Pump:
    """A pump as ``wrap`` starts it: no analysis loaded yet (unless ``analyzer``), the
    bytes kept for it up to ``max_early``."""
    return Pump(
        analyzer=ChunkAnalyzer(deferred=True) if analyzer else None,
        record=record,
        stdin=w.in_r,
        stdout=w.out_w,
        max_early=max_early,
    )


def states(seen: list[Transition]) -> list[tuple[str, str]]:
    return [(t.state.value, t.cause) for t in seen]


def replayed(record: Path) -> list[tuple[str, str]]:
    return [(r.state, r.cause) for r in timeline(read_relevant_entries(record.read_bytes()))]


# A child that asks for an approval, waits for the answer, and ends its turn.
ASKS_AND_WAITS = (
    "import sys; out = sys.stdout.buffer"
    f"; out.write({started('a') + APPROVAL!r}); out.flush()"
    "; sys.stdin.buffer.readline()"
    f"; out.write({completed('a')!r}); out.flush()"
    "; sys.stdin.buffer.read()"
)


@pytest.mark.anyio
async def test_bytes_before_the_analysis_attached_are_relayed_and_analysed_in_order(
    tmp_path: Path,
) -> None:
    """A whole exchange (a turn, an approval, its answer, the turn's end) crosses both ways
    before anything analyses it: nothing waits for the analysis. Attached afterwards, the
    mapping sees it in the order it crossed the wire, and so does the recording."""
    record = tmp_path / "session.jsonl"
    seen: list[Transition] = []
    with wire() as w:
        pump = pump_on(w, record=record)
        assert pump.start([PY, "-c", ASKS_AND_WAITS]) is None
        w.wait_for(APPROVAL)  # the child's bytes reached us: relayed with no analysis loaded
        w.send(ANSWER)  # and ours reached the child: it answers with the turn's end
        w.wait_for(completed("a"))
        assert pump.analyzer is None  # nothing loaded: the bytes are kept for it
        analyzer = ChunkAnalyzer(deferred=True)
        pump.equip(analyzer)  # the analysis has loaded (the mapping has not)
        assert analyzer.stats.deferred == 4  # the lines that may matter, in order
        assert pump.take_transitions() == []  # nothing analysed yet
        os.close(w.in_w)
        w.in_w = os.open(os.devnull, os.O_WRONLY)  # (closed by the fixture)
        with anyio.fail_after(60):
            status = await WrapSession(pump=pump, observers=[seen.append]).run()
    assert status == 0
    assert bytes(w.received) == started("a") + APPROVAL + completed("a")
    live = states(seen)
    assert live == [
        ("working", "turn/started"),
        ("blocked", "item/commandExecution/requestApproval"),
        ("working", "response"),
        ("idle", "turn/completed"),
    ]
    assert replayed(record) == live


def test_a_turn_started_in_the_first_bytes_reaches_the_broker() -> None:
    """codex's very first line starts a turn, long before wrap's broker link has loaded:
    the broker still shows the member working, and idle once the turn ends."""
    child = (
        "import sys; out = sys.stdout.buffer"
        f"; out.write({started('a')!r}); out.flush()"
        "; sys.stdin.buffer.readline()"
        f"; out.write({completed('a')!r}); out.flush(); sys.stdin.buffer.read()"
    )
    with running_broker(team=make_team("alice", "bob")) as broker:

        def activity() -> object:
            import httpx

            roster = httpx.get(broker.url + "/roster", headers=broker.auth("bob")).json()
            return next(p for p in roster if p["name"] == "alice").get("activity")

        with WrapProcess(
            ["--broker", broker.url, "--name", "alice"],
            child=[PY, "-c", child],
            env={"CODEX_PRESENCE_TOKEN": token_of("alice")},
        ) as wrap:
            eventually(lambda: activity() == "working", 60, "working at the broker")
            wrap.send({"id": 1, "result": {}})
            eventually(lambda: activity() is None, WAIT, "idle at the broker")
            assert wrap.close() == 0
    assert "working (turn/started)" in wrap.stderr.decode()


PADDING = b'{"pad":"' + b"x" * 200 + b'"}\n'
"""A line the pre-filter cannot rule out: kept for the mapping until it is attached."""


@pytest.mark.parametrize("full", ["bytes kept for the analysis", "lines kept for the mapping"])
@pytest.mark.anyio
async def test_a_start_up_buffer_overflow_is_said_and_closes_nothing_it_should_not(
    full: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before the analysis attaches, a turn starts, then more lines that may matter than
    the start-up buffer holds cross, the turn's end among them: the buffer of bytes kept
    until the analysis loads, or the analyzer's of lines kept until the mapping does. They
    are relayed all the same; the analysis says it missed them, and closes what was open
    (what closed it may be among them) — the turn, as a gap does in a recording — and
    nothing else: the child keeps its pipes and answers, a turn started after the gap
    counts, every byte arrives, and the recording replays to the same timeline."""
    record = tmp_path / "session.jsonl"
    before = started("a") + PADDING * 10  # kept; what follows does not fit: a gap
    lost = PADDING * 20 + completed("a") + PADDING * 20
    after = started("b")
    child = (
        "import sys, time; out = sys.stdout.buffer"
        f"; out.write({before!r}); out.flush(); time.sleep(0.3)"
        f"; out.write({lost!r}); out.flush()"
        "; sys.stdin.buffer.readline()"  # until the analysis has attached
        f"; out.write({after!r}); out.flush()"
    )
    seen: list[Transition] = []
    with wire() as w:
        if full == "bytes kept for the analysis":
            pump = pump_on(w, record=record, max_early=len(before) + 100)
        else:
            pump = pump_on(w, record=record, analyzer=True)
            assert pump.analyzer is not None
            pump.analyzer.max_deferred = 1000  # under ``before``'s lines

        def observe(transition: Transition) -> None:
            seen.append(transition)
            if transition.cause == "gap":
                w.send(b"go on\n")

        assert pump.start([PY, "-c", child]) is None
        w.wait_for(lost)
        if pump.analyzer is None:
            pump.equip(ChunkAnalyzer(deferred=True))
        with caplog.at_level(logging.WARNING, logger="codex_presence"), anyio.fail_after(60):
            status = await WrapSession(pump=pump, observers=[observe]).run()
    assert status == 0
    assert bytes(w.received) == before + lost + after
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "start-up buffer" in warnings[0], warnings
    live = states(seen)
    assert live == [
        ("working", "turn/started"),
        ("idle", "gap"),
        ("working", "turn/started"),
        ("idle", "eof"),
    ]
    entries = list(read_entries(record.read_bytes().splitlines()))
    assert [e.gap for e in entries if e.gap] == [len(lost)]
    assert [e.closed for e in entries if e.closed] == ["gap"]
    assert replayed(record) == live
