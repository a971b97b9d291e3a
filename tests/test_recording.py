"""The recording format: written verbatim, read back exactly, either format detected."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from codex_presence import encode_entry, read_entries
from codex_presence._recording import detect_format


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
