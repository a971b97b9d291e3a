"""The recording format: written verbatim, read back exactly, either format detected."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from codex_presence import Entry, encode_entry, read_entries
from codex_presence.core.recording import detect_format, read_relevant_entries
from codex_presence.core.timeline import timeline


def test_json_line_is_embedded_verbatim_with_t_and_from_first() -> None:
    line = b'{"method":"turn/started","params":{"threadId":"a"},"emittedAtMs":1}\n'
    out = encode_entry(1.5, "server", line)
    assert out == b'{"t":1.500000,"from":"server","msg":' + line[:-1] + b"}\n"
    (entry,) = read_entries([out])
    assert (entry.t, entry.direction, entry.line) == (1.5, "server", 1)
    assert entry.message == orjson.loads(line)


def test_non_json_and_non_utf8_lines_are_kept_not_lost() -> None:
    text = encode_entry(0.0, "client", b"hello world\n")
    binary = encode_entry(0.1, "server", b"\xff\x00\xfe")
    first, second = read_entries([text, binary])
    assert first.message is None and first.raw == b"hello world"
    assert second.message is None and second.raw == b"\xff\x00\xfe"


@given(st.binary(max_size=200).filter(lambda b: b"\n" not in b))
def test_any_line_round_trips(line: bytes) -> None:
    (entry,) = read_entries([encode_entry(0.25, "client", line)])
    if entry.message is None:
        assert entry.raw == line
    else:
        assert entry.message == orjson.loads(line)


def test_plain_server_stdout_is_detected_and_has_no_times() -> None:
    lines = [b'{"method":"turn/started","params":{}}', b"", b"junk", b'{"id":1,"result":{}}']
    assert detect_format(lines[0]) == "server-stdout"
    entries = list(read_entries(lines))
    assert [e.line for e in entries] == [1, 3, 4]
    assert all(e.t is None and e.direction == "server" for e in entries)
    assert entries[1].raw == b"junk"


def test_recording_is_detected_from_its_first_line() -> None:
    assert detect_format(b'{"t":0,"from":"client","msg":{}}') == "recording"
    assert detect_format(b'{"t":"0","from":"client","msg":{}}') == "server-stdout"


# -- the bulk pre-filter gives the same timeline as reading every line -----------------------

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "codex-0.169.0"


def rows(entries: Iterable[Entry]) -> list[tuple[object, ...]]:
    return [(r.t, r.line, r.state, r.cause) for r in timeline(entries)]


def stdout_projection(data: bytes) -> bytes:
    return b"".join(
        orjson.dumps(e.message) + b"\n"
        for e in read_entries(data.splitlines())
        if e.direction == "server" and e.message is not None
    )


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.jsonl")), ids=lambda p: p.stem)
def test_relevant_entries_replay_like_all_entries_on_every_fixture(path: Path) -> None:
    data = path.read_bytes()
    assert rows(read_relevant_entries(data)) == rows(read_entries(data.splitlines()))
    projected = stdout_projection(data)
    assert rows(read_relevant_entries(projected)) == rows(read_entries(projected.splitlines()))


def test_relevant_entries_skip_deltas_but_keep_the_last_line_for_its_time() -> None:
    lines = [
        encode_entry(
            0.0, "server", b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}'
        ),
        encode_entry(0.5, "server", b'{"method":"item/agentMessage/delta","params":{"delta":"x"}}'),
        encode_entry(0.9, "server", b'{"method":"item/agentMessage/delta","params":{"delta":"y"}}'),
    ]
    entries = list(read_relevant_entries(b"".join(lines)))
    assert [e.line for e in entries] == [1, 3]
    assert rows(entries)[-1] == (0.9, None, "idle", "eof")


pool = [
    b'{"method":"turn/started","params":{"threadId":"a","turn":{"id":"t"}}}',
    b'{"method":"turn/completed","params":{"threadId":"a","turn":{"id":"t"}}}',
    b'{"method":"item/agentMessage/delta","params":{"threadId":"a","delta":"x"}}',
    b'{"method":"item/started","params":{"item":{"type":"commandExecution","id":"c"},"threadId":"a","turnId":"t"}}',
    b'{"method":"item/started","params":{"item":{"type":"agentMessage","id":"m"},"threadId":"a","turnId":"t"}}',
    b'{"method":"thread/status/changed","params":{"threadId":"a","status":{"type":"idle"}}}',
    b'{"method":"item/tool/requestUserInput","id":0,"params":{"threadId":"a","turnId":"t"}}',
    b'{"id":0,"result":{}}',
    b"not json",
    b"",
    b"   ",
]


@given(
    st.lists(st.tuples(st.sampled_from(pool), st.sampled_from(["client", "server"])), max_size=30),
    st.booleans(),
    st.booleans(),
)
def test_relevant_entries_equal_all_entries_on_any_stream(
    lines: list[tuple[bytes, str]], recording: bool, final_newline: bool
) -> None:
    if recording:
        data = b"".join(encode_entry(i / 10, d, line) for i, (line, d) in enumerate(lines))  # type: ignore[arg-type]
    else:
        data = b"\n".join(line for line, _ in lines)
    if final_newline and data:
        data += b"\n"
    assert rows(read_relevant_entries(data)) == rows(read_entries(data.splitlines()))
