"""The chunk pre-filter, with plain data: whatever the chunking, the same transitions as
feeding every whole line to ``CodexMapping.feed_line`` one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codex_presence import CodexMapping, Direction, read_entries
from codex_presence.core.codex.prefilter import HOT_SKIPPED_PREFIXES, ChunkAnalyzer
from codex_presence.core.codex.protocol import skips_unparsed
from tests.support.depth import examples

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "codex-0.169.0"


def _fixture_lines() -> list[tuple[Direction, bytes]]:
    lines: list[tuple[Direction, bytes]] = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        with path.open("rb") as f:
            for entry in read_entries(f):
                if entry.message is not None:
                    lines.append((entry.direction, orjson.dumps(entry.message)))
    return lines


FIXTURE_LINES = _fixture_lines()


def note(method: str, **params: Any) -> bytes:
    return orjson.dumps({"method": method, "params": params, "emittedAtMs": 1796044232571})


THREADS = ["a", "b"]
TURNS = ["t1", "t2"]


@st.composite
def server_line(draw: st.DrawFn) -> bytes:
    th = draw(st.sampled_from(THREADS))
    tu = draw(st.sampled_from(TURNS))
    rid = draw(st.integers(0, 3))
    kind = draw(st.integers(0, 15))
    if kind == 0:
        return note("turn/started", threadId=th, turn={"id": tu})
    if kind == 1:
        return note("turn/completed", threadId=th, turn={"id": tu, "status": "completed"})
    if kind == 2:
        return note(
            "item/started", threadId=th, turnId=tu, item={"type": "commandExecution", "id": "c"}
        )
    if kind == 3:
        return note(
            "item/completed", threadId=th, turnId=tu, item={"type": "commandExecution", "id": "c"}
        )
    if kind == 4:
        flags = draw(st.sampled_from([[], ["waitingOnApproval"]]))
        status = draw(st.sampled_from(["idle", "active"]))
        return note(
            "thread/status/changed", threadId=th, status={"type": status, "activeFlags": flags}
        )
    if kind == 5:
        return orjson.dumps(
            {
                "method": "item/commandExecution/requestApproval",
                "id": rid,
                "params": {"threadId": th, "turnId": tu, "itemId": "c"},
            }
        )
    if kind == 6:
        return note("serverRequest/resolved", threadId=th, requestId=rid)
    if kind == 7:  # the bulk: deltas, sometimes with tricky text
        text = draw(st.text(max_size=40))
        return note("item/agentMessage/delta", threadId=th, turnId=tu, itemId="m", delta=text)
    if kind == 8:
        return orjson.dumps({"id": rid, "result": {"turn": {"id": tu}}})
    if kind == 9:  # non-canonical: spaces, other key order, escaped method
        method = draw(st.sampled_from(["turn/started", "turn/completed", "turn\\/started"]))
        return b'{ "params": {"threadId": "%s", "turn": {"id": "%s"}}, "method": "%s" }' % (
            th.encode(),
            tu.encode(),
            method.encode(),
        )
    if kind == 10:
        return b'{"method":"turn\\/started","params":{"threadId":"%s","turn":{"id":"%s"}}}' % (
            th.encode(),
            tu.encode(),
        )
    if kind == 11:  # garbage: any bytes but a newline
        return draw(st.binary(max_size=30)).replace(b"\n", b"")
    if kind == 12:
        return draw(st.sampled_from([ln for d, ln in FIXTURE_LINES if d == "server"]))
    if kind == 13:
        return note("thread/tokenUsage/updated", threadId=th, turnId=tu)
    if kind == 14:  # item events of passive and tool items, in codex's field order
        event = draw(st.sampled_from(["item/started", "item/completed"]))
        item_type = draw(st.sampled_from(["agentMessage", "reasoning", "webSearch", "mcpToolCall"]))
        item_id = draw(st.sampled_from(["c", "w"]))
        return orjson.dumps(
            {
                "method": event,
                "params": {
                    "item": {"type": item_type, "id": item_id},
                    "threadId": th,
                    "turnId": tu,
                },
            }
        )
    return b""


@st.composite
def client_line(draw: st.DrawFn) -> bytes:
    rid = draw(st.integers(0, 3))
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return orjson.dumps({"id": rid, "result": {"decision": "accept"}})
    if kind == 1:
        return b'{ "result": {}, "id": %d }' % rid
    if kind == 2:
        return orjson.dumps({"method": "turn/start", "id": 100 + rid, "params": {}})
    if kind == 3:
        return draw(st.binary(max_size=20)).replace(b"\n", b"")
    return draw(st.sampled_from([ln for d, ln in FIXTURE_LINES if d == "client"]))


session = st.lists(
    st.one_of(
        st.tuples(st.just("server"), server_line()),
        st.tuples(st.just("client"), client_line()),
    ),
    max_size=60,
)


def oracle(events: list[tuple[Direction, bytes]]) -> list[tuple[str, str, str]]:
    """Whole lines, one by one, in the order their newline arrived; tails at the end."""
    mapping = CodexMapping()
    out = []
    buffers: dict[Direction, bytes] = {"client": b"", "server": b""}
    for direction, chunk in events:
        data = buffers[direction] + chunk
        *complete, buffers[direction] = data.split(b"\n")
        for line in complete:
            out.append(mapping.feed_line(direction, line + b"\n"))
    for direction in ("client", "server"):
        if buffers[direction]:
            out.append(mapping.feed_line(direction, buffers[direction]))
    out.append(mapping.close("eof"))
    return [(t.previous.value, t.state.value, t.cause) for t in out if t is not None]


def analysed(events: list[tuple[Direction, bytes]], **kwargs: Any) -> list[tuple[str, str, str]]:
    analyzer = ChunkAnalyzer(**kwargs)
    out = []
    for direction, chunk in events:
        out.extend(analyzer.feed(direction, chunk))
    out.extend(analyzer.close("eof"))
    return [(t.previous.value, t.state.value, t.cause) for t in out]


@st.composite
def chunked(draw: st.DrawFn) -> list[tuple[Direction, bytes]]:
    """A session's two byte streams, cut at arbitrary points and interleaved."""
    lines = draw(session)
    final_newline = draw(st.booleans())
    streams: dict[Direction, bytearray] = {"client": bytearray(), "server": bytearray()}
    order: list[Direction] = []
    for direction, line in lines:
        streams[direction] += line + b"\n"
        order.append(direction)
    if not final_newline:
        for stream in streams.values():
            if stream:
                del stream[-1:]
    events: list[tuple[Direction, bytes]] = []
    pos: dict[Direction, int] = {"client": 0, "server": 0}
    while any(pos[d] < len(streams[d]) for d in streams):
        choices = [d for d in ("client", "server") if pos[d] < len(streams[d])]
        direction = draw(st.sampled_from(choices))
        left = len(streams[direction]) - pos[direction]
        size = draw(st.integers(1, min(left, 400)))
        events.append(
            (direction, bytes(streams[direction][pos[direction] : pos[direction] + size]))
        )
        pos[direction] += size
    return events


@settings(max_examples=examples(4), suppress_health_check=[HealthCheck.too_slow])
@given(chunked())
def test_any_chunking_gives_the_transitions_of_whole_lines(
    events: list[tuple[Direction, bytes]],
) -> None:
    assert analysed(events) == oracle(events)


@settings(max_examples=examples(2), suppress_health_check=[HealthCheck.too_slow])
@given(session, st.data())
def test_whole_chunks_of_many_lines(
    lines: list[tuple[Direction, bytes]], data: st.DataObject
) -> None:
    """Big chunks: each run of same-direction lines arrives as one chunk (the bulk path)."""
    events: list[tuple[Direction, bytes]] = []
    for direction, line in lines:
        if events and events[-1][0] == direction and data.draw(st.booleans()):
            events[-1] = (direction, events[-1][1] + line + b"\n")
        else:
            events.append((direction, line + b"\n"))
    assert analysed(events) == oracle(events)


@settings(max_examples=examples(3), suppress_health_check=[HealthCheck.too_slow])
@given(chunked(), st.data())
def test_lines_kept_until_the_mapping_is_attached_give_the_same_transitions(
    events: list[tuple[Direction, bytes]], data: st.DataObject
) -> None:
    """wrap's start-up: the analyzer frames and filters before it has its mapping, keeps
    the lines that may matter, and feeds them, in order, when the mapping is attached, at
    any point of the session: the same transitions as whole lines one by one."""
    attach_at = data.draw(st.integers(0, len(events)))
    analyzer = ChunkAnalyzer(deferred=True)
    out = []
    for n, (direction, chunk) in enumerate(events):
        if n == attach_at:
            out.extend(analyzer.attach(CodexMapping()))
        out.extend(analyzer.feed(direction, chunk))
    if attach_at == len(events):
        out.extend(analyzer.attach(CodexMapping()))
    out.extend(analyzer.close("eof"))
    assert [(t.previous.value, t.state.value, t.cause) for t in out] == oracle(events)


def test_what_cannot_matter_is_neither_parsed_nor_kept() -> None:
    """The leading-byte rule, at C speed: lines that do not start with ``{`` (2-byte lines,
    bare newlines, garbage) and methods that cannot change the state reach no Python code
    per line, and are not kept for a mapping still to come."""
    analyzer = ChunkAnalyzer(deferred=True)
    for direction in ("server", "client"):
        analyzer.feed(direction, b"x\n" * 100_000 + b"\n" * 100_000 + b" {not}\n" * 1000)
    analyzer.feed("server", note("some/unknown/method", threadId="a") + b"\n")
    assert (analyzer.stats.deferred, analyzer.stats.fed) == (0, 0)
    analyzer.feed("server", note("turn/started", threadId="a", turn={"id": "t"}) + b"\n")
    assert analyzer.stats.deferred == 1
    (transition,) = analyzer.attach(CodexMapping())
    assert transition.state == "working"


def test_a_real_session_byte_by_byte_and_in_one_piece() -> None:
    lines = FIXTURE_LINES
    whole = [(d, ln + b"\n") for d, ln in lines]
    expected = oracle(whole)
    assert [state for _, state, _ in expected].count("working") > 5  # the fixtures do turns
    assert analysed(whole) == expected
    tiny = [(d, bytes([b])) for d, ln in whole for b in ln]
    assert analysed(tiny) == oracle(tiny)


def test_skipped_lines_are_not_parsed() -> None:
    analyzer = ChunkAnalyzer()
    delta = note("item/agentMessage/delta", threadId="a", turnId="t", itemId="m", delta="x")
    analyzer.feed("server", (delta + b"\n") * 1000)
    analyzer.feed("client", b'{"id":1,"result":{}}\n' * 1000)
    assert analyzer.stats.fed == 0
    assert analyzer.mapping.stats.lines == 0
    analyzer.feed("server", note("turn/started", threadId="a", turn={"id": "t"}) + b"\n")
    assert analyzer.stats.fed == 1
    assert analyzer.mapping.state == "working"


def test_a_long_skipped_partial_line_is_not_buffered() -> None:
    analyzer = ChunkAnalyzer(max_line=1000)
    analyzer.feed("server", b'{"method":"item/agentMessage/delta","params":{"delta":"')
    for _ in range(100):
        analyzer.feed("server", b"x" * 10_000)
    assert analyzer._partial["server"].pieces == []
    analyzer.feed("server", b'"}}\n' + note("turn/started", threadId="a", turn={"id": "t"}) + b"\n")
    assert analyzer.mapping.state == "working"
    assert analyzer.stats.oversized == 0


def test_an_oversized_line_is_dropped_from_analysis_and_counted() -> None:
    big = note("turn/started", threadId="a", turn={"id": "t"}, pad="x" * 5000)
    for events in (
        [("server", big + b"\n")],
        [("server", big[:100]), ("server", big[100:] + b"\n")],
        [("server", big[:3000]), ("server", big[3000:])],
    ):
        analyzer = ChunkAnalyzer(max_line=4096)
        for direction, chunk in events:
            analyzer.feed(direction, chunk)  # type: ignore[arg-type]
        assert analyzer.mapping.state == "idle"
        assert analyzer.stats.oversized == 1
        analyzer.close()
        assert analyzer.stats.oversized == 1
    analyzer = ChunkAnalyzer(max_line=len(big))
    analyzer.feed("server", big + b"\n")
    assert analyzer.mapping.state == "working"


def test_client_lines_matter_only_while_a_request_is_pending() -> None:
    analyzer = ChunkAnalyzer()
    approval = orjson.dumps(
        {
            "method": "item/commandExecution/requestApproval",
            "id": 0,
            "params": {"threadId": "a", "turnId": "t", "itemId": "c"},
        }
    )
    analyzer.feed("server", note("turn/started", threadId="a", turn={"id": "t"}) + b"\n")
    analyzer.feed("client", b'{"id":0,"result":{}}\n')  # nothing pending yet: skipped
    assert analyzer.stats.fed == 1
    (t,) = analyzer.feed("server", approval + b"\n")
    assert t.state == "blocked"
    (t,) = analyzer.feed(
        "client", b'{"method":"x"}\n{"id":0,"result":{"decision":"accept"}}\n{"id":'
    )
    assert (t.state, t.cause) == ("working", "response")
    assert analyzer.close()[-1].state == "idle"


@pytest.mark.parametrize(
    ("head", "skipped"),
    [
        (b'{"id":', True),
        (b'{"id', None),
        (b"", None),
        (b'{"method":"item/agentMessage/delta","params":{', True),
        (b'{"method":"item/agentMessage/delta"', None),
        (b'{"method":"item/agentMessage/del', None),
        (b'{"method":"item/new/requestApproval","id":3', False),
        (b'{"method":"item/new/requestApproval","i', None),
        (b'{"method":"turn/started"', False),
        (b'{"method":"turn\\/started"', False),
        (b'{ "method"', False),
        (b"garbage", True),  # the leading-byte rule: only a line starting with { matters
        (b' {"method":"turn/started"', True),
        (b"\n", True),
        (b"{", None),
        (b'{"foo":1}', False),
        (b'{"method":"item/completed","params":{"item":{"type":"agentMessage"', True),
        (b'{"method":"item/started","params":{"item":{"type":"agentMessage"', False),
        (b'{"method":"item/started","params":{"item":{"type":"commandExecution"', False),
        (b'{"method":"item/completed","params":{"item":{"type":"agentMess', None),
        (b'{"method":"item/completed","params":{"it', None),
        (b'{"method":"item/completed","params":{"threadId":"a"', False),
        (b'{"method":"item/started","params":{"it', False),
    ],
)
def test_skips_unparsed(head: bytes, skipped: bool | None) -> None:
    assert skips_unparsed(head) is skipped


def test_hot_prefixes_never_change_the_state() -> None:
    for prefix in HOT_SKIPPED_PREFIXES:
        mapping = CodexMapping()
        mapping.feed_line("server", note("turn/started", threadId="a", turn={"id": "t"}))
        if b'"item":{"type":' in prefix:
            line = prefix + b',"id":"x"},"threadId":"a","turnId":"t"}}'
            assert orjson.loads(line)
        else:
            line = prefix + b',"params":{}}'
            assert skips_unparsed(line) is True
        assert mapping.feed_line("server", line) is None
        assert mapping.state == "working"
        assert mapping.stats.wrong_shape == 0
